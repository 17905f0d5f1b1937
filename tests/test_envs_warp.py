"""The MuJoCo Warp tasks: gymnasium v5's numbers until the first contact, and the VecEnv contract.

Every task (WarpAnt, WarpHumanoid, WarpHalfCheetah, WarpHopper, WarpWalker2d) on the CPU, and on CUDA
where there is a GPU: there the first step runs eagerly and later ones launch the captured CUDA graph,
so the step-for-step test covers both. Slow: MuJoCo Warp compiles its kernels on first use (~25-60 s
on 2 cores for all five models together, ~80 s for CUDA; cached in ~/.cache/warp afterwards), and on
the CPU an env step of 3 worlds takes 0.03-0.15 s. So each task is built once per device (3 worlds,
3-step episodes) and shared by the module's tests.
"""

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.checker import check_vec_env

pytest.importorskip("mujoco")
pytest.importorskip("mujoco_warp")
pytestmark = pytest.mark.slow

from dask_podracer.envs.warp import TASKS, Ant, Hopper  # noqa: E402  (after the skips: needs gymnasium's MuJoCo)

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
DEVICES = ["cpu", pytest.param("cuda", marks=NEEDS_CUDA)]
WORLDS = 3
EPISODE = 3
"""Steps per episode of the shared envs: the contract check then ends every episode by truncation."""


@dataclass(frozen=True)
class Airborne:
    """Where a task's test states start: clear of the ground, so the two simulators meet no contact."""

    lift: tuple[int, float]
    """A qpos entry (the root's height) and its value."""
    noise: float
    """Scale of the random qpos and qvel offsets."""
    unhealthy: tuple[int, float] | None
    """A qpos entry and a value that gymnasium calls unhealthy, given to the last world (None: never terminates)."""


AIRBORNE = {
    "WarpAnt-v0": Airborne((2, 0.95), 0.1, (2, 1.05)),  # torso z; healthy up to 1.0
    "WarpHumanoid-v0": Airborne((2, 1.7), 0.01, (2, 2.05)),  # 0.1 bends its limbs into each other; healthy below 2
    "WarpHalfCheetah-v0": Airborne((1, 0.5), 0.1, None),
    "WarpHopper-v0": Airborne((1, 1.55), 0.1, (2, 0.3)),  # torso angle; healthy within ±0.2
    "WarpWalker2d-v0": Airborne((1, 1.55), 0.1, (2, 1.2)),  # torso angle; healthy within ±1
}
SHAPES = {  # observation and action sizes of gymnasium's v5 envs
    "WarpAnt-v0": (105, 8), "WarpHumanoid-v0": (348, 17), "WarpHalfCheetah-v0": (17, 6),
    "WarpHopper-v0": (11, 3), "WarpWalker2d-v0": (17, 6),
}
UNHEALTHY_AT_START = {  # keyword arguments under which every world is unhealthy after its first step
    "WarpAnt-v0": {"healthy_z_range": (0.2, 0.5)},  # the torso starts at ~0.75 m
    "WarpHumanoid-v0": {"healthy_z_range": [1.0, 1.2]},  # ~1.4 m (a list, as a TOML config gives it)
    "WarpHopper-v0": {"healthy_z_range": (0.7, 1.0)},  # ~1.25 m
    "WarpWalker2d-v0": {"healthy_z_range": (0.8, 1.0)},  # ~1.25 m
}


@pytest.fixture(scope="module", params=[pytest.param((name, "cpu"), id=name) for name in TASKS]
                + [pytest.param((name, "cuda"), id=f"{name}-cuda", marks=NEEDS_CUDA) for name in TASKS])
def warp_env(request):
    """(name, env): the task on the device, 3 worlds, 3-step episodes."""
    name, device = request.param
    return name, make_vec_env(name, WORLDS, device=device, seed=0, max_episode_steps=EPISODE)


def test_matches_gymnasium_step_for_step_before_contact(warp_env):
    """From identical states in the air, both simulators agree to float32 precision: the observation after
    the reset, then each step's observation, reward and termination, until a world terminates.

    Once a body touches the ground the two contact solvers part ways (docs/envs.md), so the states start
    high enough that gymnasium meets no contact in these steps (asserted). The last world starts unhealthy
    (except HalfCheetah's, which never terminates): both must terminate it on the first step.
    """
    name, env = warp_env
    task, start = env.task, AIRBORNE[name]
    g = gym.make(task.gym_id)
    g.reset(seed=0)
    model = g.unwrapped.model
    rng = np.random.default_rng(0)
    qpos = g.unwrapped.init_qpos + rng.uniform(-start.noise, start.noise, (WORLDS, model.nq))
    qpos[:, start.lift[0]] = start.lift[1]
    if start.unhealthy is not None:
        qpos[-1, start.unhealthy[0]] = start.unhealthy[1]
    qvel = start.noise * rng.standard_normal((WORLDS, model.nv))
    low, high = g.action_space.low, g.action_space.high
    actions = rng.uniform(low, high, (EPISODE, WORLDS, low.size)).astype(np.float32)
    env.reset(seed=0)
    first_obs = env.set_state(torch.tensor(qpos), torch.tensor(qvel)).cpu().numpy()
    ours = [env.step(torch.tensor(actions[t], device=env.device)) for t in range(EPISODE)]
    compared = 0
    for i in range(WORLDS):
        g.reset(seed=0)
        g.unwrapped.set_state(qpos[i], qvel[i])
        np.testing.assert_allclose(first_obs[i], g.unwrapped._get_obs(), atol=2e-4, err_msg=f"env {i} after reset")
        for t in range(EPISODE):
            g_obs, g_reward, g_terminated, _, _ = g.step(actions[t, i])
            assert g.unwrapped.data.ncon == 0, f"env {i} step {t}: gymnasium's {task.gym_id} touched something"
            _, reward, terminated, _, info = ours[t]
            np.testing.assert_allclose(info["final_obs"][i].cpu().numpy(), g_obs, atol=2e-4,
                                       err_msg=f"env {i} step {t}")
            assert reward[i].item() == pytest.approx(g_reward, abs=2e-4), f"env {i} step {t}"
            assert bool(terminated[i]) == g_terminated, f"env {i} step {t}"
            compared += 1
            if g_terminated:  # ours has reset this world; gymnasium's would go on from where it fell
                break
    unhealthy = AIRBORNE[name].unhealthy is not None
    assert compared == WORLDS * EPISODE - (EPISODE - 1) * unhealthy
    g.close()


def test_keeps_the_vec_env_contract_through_truncations(warp_env):
    """Random actions until every episode has hit its 3-step limit; then a reset draws gymnasium's noise."""
    name, env = warp_env
    assert (env.single_observation_space.shape[0], env.single_action_space.shape[0]) == SHAPES[name]
    report = check_vec_env(env)
    assert (report.steps, report.terminations, report.truncations) == (EPISODE, 0, WORLDS)
    # Reset noise: qpos within ±scale of the model's qpos0 for every task; qvel within ±scale for the
    # tasks that draw it uniformly, and from scale·N(0, 1) (so beyond ±scale somewhere) for Ant and HalfCheetah.
    env.reset(seed=0)
    scale = env.task.reset_noise_scale
    assert float((env.sim.qpos - env.init_qpos).abs().max()) <= scale
    assert (float(env.sim.qvel.abs().max()) > scale) == env.task.normal_qvel_noise


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(UNHEALTHY_AT_START))
def test_keeps_the_vec_env_contract_through_terminations(name, device):
    """With the healthy z range below the starting height, every world terminates and resets on its first step."""
    env = make_vec_env(name, WORLDS, device=device, seed=0, **UNHEALTHY_AT_START[name])
    report = check_vec_env(env, max_steps=2)
    assert (report.steps, report.terminations, report.truncations) == (1, WORLDS, 0)
    assert env.max_episode_steps == 1000  # gymnasium's limit, by default


def test_podracer_check_env_checks_warp_humanoid_on_the_cpu(capsys):
    """The command as a user types it: random actions until each of the 4 Humanoids has fallen once."""
    from dask_podracer.cli import main

    assert main(["check-env", "WarpHumanoid-v0", "--num-envs", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WarpHumanoid-v0: keeps the VecEnv contract (4 envs on cpu, ")
    assert "observation Box(-inf, inf, (348,), float32)" in out and "no episode ended" not in out


def test_task_keywords_are_gymnasiums_and_are_checked():
    """Keywords replace a task's defaults (TOML arrays become tuples); unknown ones and bad ranges are refused,
    naming them. No Warp needed."""
    assert Ant.configured(healthy_z_range=[0.3, 0.9]).healthy_z_range == (0.3, 0.9)
    assert Ant().ctrl_cost_weight == 0.5 and Hopper().frame_skip == 4  # gymnasium v5's defaults
    with pytest.raises(TypeError, match="healthy_angle_range"):
        Ant.configured(healthy_angle_range=(-1, 1))  # Hopper's, not Ant's
    with pytest.raises(ValueError, match="healthy_z_range"):
        Hopper.configured(healthy_z_range=(1.0, 0.5))
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_vec_env("WarpHopper-v0", 2, max_episode_steps=0)
