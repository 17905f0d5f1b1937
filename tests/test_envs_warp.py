"""Ant on MuJoCo Warp: gymnasium Ant-v5's numbers until the first contact, and the VecEnv contract.

On the CPU, and on CUDA where there is a GPU: there the first step runs eagerly and later
ones launch the captured CUDA graph, so the step-for-step test covers both.
Slow: MuJoCo Warp compiles its kernels on first use (~45-60 s on 2 cores, ~80 s for CUDA;
cached in ~/.cache/warp afterwards), and on the CPU one Ant step of 4 worlds takes ~0.1-0.3 s.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs.checker import check_vec_env

pytest.importorskip("mujoco")
pytest.importorskip("mujoco_warp")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=[
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")),
])
def warp_ant(request):
    from dask_podracer.envs import make_vec_env

    return make_vec_env("WarpAnt-v0", 3, device=request.param, seed=0)


def test_matches_gymnasium_ant_step_for_step_before_contact(warp_ant):
    """From identical states in the air, both simulators agree to float32 precision.

    Once feet touch the ground the two contact solvers part ways (docs/envs.md): we
    compare the first three steps of Ants started 0.2 m higher than usual, so no foot lands.
    """
    g = gym.make("Ant-v5")
    g.reset(seed=0)
    rng = np.random.default_rng(0)
    n = warp_ant.num_envs
    qpos = g.unwrapped.init_qpos + rng.uniform(-0.1, 0.1, (n, 15))
    qpos[:, 2] = 0.95  # healthy (z <= 1) and clear of the ground for these steps
    qvel = 0.1 * rng.standard_normal((n, 14))
    actions = rng.uniform(-1, 1, (3, n, 8)).astype(np.float32)
    warp_ant.reset(seed=0)
    warp_ant.set_state(torch.tensor(qpos), torch.tensor(qvel))
    ours = [warp_ant.step(torch.tensor(actions[t])) for t in range(3)]
    for i in range(n):
        g.unwrapped.set_state(qpos[i], qvel[i])
        for t in range(3):
            g_obs, g_reward, g_term, _, _ = g.step(actions[t, i])
            _, reward, terminated, _, info = ours[t]
            np.testing.assert_allclose(info["final_obs"][i].cpu().numpy(), g_obs, atol=2e-4,
                                       err_msg=f"env {i} step {t}")
            assert reward[i].item() == pytest.approx(g_reward, abs=2e-4)
            assert bool(terminated[i]) == g_term


def test_warp_ant_keeps_the_vec_env_contract(warp_ant):
    assert warp_ant.single_observation_space.shape == (105,) and warp_ant.single_action_space.shape == (8,)
    assert check_vec_env(warp_ant, max_steps=3).steps == 3
    # Forced through terminations: with the healthy z range below the starting height (~0.75 m),
    # every world is unhealthy after its first step, so each one terminates and auto-resets.
    warp_ant.healthy_z_range = (0.2, 0.5)
    try:
        report = check_vec_env(warp_ant, max_steps=2)
    finally:
        del warp_ant.healthy_z_range  # back to the class's (0.2, 1.0)
    assert (report.steps, report.terminations, report.truncations) == (1, 3, 0)
    # Leaving the healthy z range terminates and restarts just that world: an Ant at z=1.5 is unhealthy at once.
    qpos = warp_ant.init_qpos.repeat(3, 1)
    qpos[0, 2] = 1.5
    warp_ant.set_state(qpos, torch.zeros(3, 14))
    obs, _, terminated, _, info = warp_ant.step(torch.zeros(3, 8))
    assert terminated.tolist() == [True, False, False]
    assert abs(obs[0, 0].item() - 0.75) <= 0.1 and info["final_obs"][0, 0].item() > 1.4  # obs[0] = torso z
