"""gymnasium's v5 MuJoCo envs stepped on threads (`MujocoAnt-v5`, ...): gymnasium's numbers, and the VecEnv contract.

Each task runs beside gymnasium's own vector env ("gym:<id>") from the same seed with the
same actions: the same MjData calls in float64 give the same physics, contacts included, so
observations must be identical, not merely close, through terminations, truncations and resets.
"""

import numpy as np
import pytest
import torch

from dask_podracer.envs import check_vec_env, make_vec_env
from dask_podracer.envs.mujoco_tasks import TASKS

pytest.importorskip("mujoco")

LIMIT = 40  # a short time limit, so the runs below cover truncations and the resets after them


def random_actions(env, steps: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    low, high = (torch.as_tensor(b) for b in (env.single_action_space.low, env.single_action_space.high))
    return [low + (high - low) * torch.rand(env.num_envs, len(low), generator=gen) for _ in range(steps)]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_matches_gymnasium_step_for_step_through_contacts_and_resets(name):
    gym_id = TASKS[name].gym_id
    ours = make_vec_env(name, 3, seed=0, threads=2, max_episode_steps=LIMIT)
    theirs = make_vec_env(f"gym:{gym_id}", 3, seed=0, max_episode_steps=LIMIT)
    assert ours.single_observation_space.shape == theirs.single_observation_space.shape
    assert np.array_equal(ours.single_action_space.low, theirs.single_action_space.low)
    assert torch.equal(ours.reset()[0], theirs.reset()[0])
    terminations = truncations = 0
    for t, actions in enumerate(random_actions(ours, 2 * LIMIT + 10)):
        obs, reward, terminated, truncated, info = ours.step(actions)
        g_obs, g_reward, g_terminated, g_truncated, g_info = theirs.step(actions)
        where = f"{name} step {t}"
        assert torch.equal(terminated, g_terminated) and torch.equal(truncated, g_truncated), where
        assert torch.equal(obs, g_obs) and torch.equal(info["final_obs"], g_info["final_obs"]), where
        # float64 sums of the same terms; allowed a float32 rounding step in case numpy orders one differently
        torch.testing.assert_close(reward, g_reward, rtol=1e-6, atol=1e-6, msg=where)
        done = terminated | truncated
        assert torch.equal(info["episode_length"][done], g_info["episode_length"][done]), where
        torch.testing.assert_close(info["episode_return"][done], g_info["episode_return"][done], msg=where)
        terminations += int(terminated.sum())
        truncations += int(truncated.sum())
    # Seeded: Ant, Humanoid and Walker2d both terminate and truncate here, Hopper only terminates, HalfCheetah
    # only truncates; every task restarts its 3 envs at least twice each.
    assert terminations + truncations >= 6
    ours.close()
    theirs.close()


def test_ant_and_humanoid_observe_contact_forces_as_gymnasium_does():
    """cfrc_ext is what `mj_rnePostConstraint` computes after the step (the test above compares it, this one
    shows it was non-zero there): a walking Ant's feet touch the ground within its first steps."""
    env = make_vec_env("MujocoAnt-v5", 2, seed=0, threads=1)
    obs, _ = env.reset()
    assert torch.equal(obs[:, 27:], torch.zeros(2, 78))  # gymnasium's reset leaves cfrc_ext at zero
    touched = False
    for actions in random_actions(env, 20):
        obs = env.step(actions)[0]
        touched |= bool(obs[:, 27:].abs().sum() > 0)
    assert touched
    env.close()


def test_keeps_the_vec_env_contract_through_terminations_and_truncations():
    # Walker2d falls within ~15-40 random steps: with a 25-step limit some episodes end each way.
    walker = make_vec_env("MujocoWalker2d-v5", 6, seed=1, threads=2, max_episode_steps=25)
    report = check_vec_env(walker)
    assert report.terminations > 0 and report.truncations > 0
    walker.close()
    # Every Ant starts above a healthy range of (0.2, 0.5): each terminates on its first step and restarts.
    ant = make_vec_env("MujocoAnt-v5", 3, seed=0, healthy_z_range=(0.2, 0.5))
    report = check_vec_env(ant, max_steps=2)
    assert (report.steps, report.terminations, report.truncations) == (1, 3, 0)
    ant.close()


def trajectory(env, seed: int | None, steps: int = 30) -> list[torch.Tensor]:
    out = [env.reset(seed=seed)[0]]
    for actions in random_actions(env, steps):
        obs, reward, *_ = env.step(actions)
        out += [obs, reward]
    return out


def test_seeded_runs_repeat_whatever_the_thread_count():
    one = make_vec_env("MujocoHopper-v5", 5, threads=1, max_episode_steps=20)
    two = make_vec_env("MujocoHopper-v5", 5, threads=2, max_episode_steps=20)
    assert (one.threads, two.threads) == (1, 2)
    first = trajectory(one, seed=7)
    assert all(torch.equal(a, b) for a, b in zip(first, trajectory(two, seed=7)))
    assert all(torch.equal(a, b) for a, b in zip(first, trajectory(one, seed=7)))  # reseeding repeats
    assert not torch.equal(first[0], trajectory(one, seed=8)[0])
    # Without a seed, reset continues each env's stream: a new start, not the seeded one again.
    assert not torch.equal(trajectory(two, seed=None)[0], trajectory(two, seed=7)[0])
    one.close()
    two.close()


def test_takes_gymnasiums_keyword_arguments_and_refuses_others():
    env = make_vec_env("MujocoHalfCheetah-v5", 2, seed=0, threads=1, ctrl_cost_weight=0.0)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(torch.zeros(2, 6))
    env.reset()
    # With no control cost the reward is the forward velocity: (x after - x before) / dt.
    x_before = env.sims.fields["qpos"][:, 0].copy()
    _, reward, *_ = env.step(torch.ones(2, 6))
    expected = (env.sims.fields["qpos"][:, 0] - x_before) / env.dt
    torch.testing.assert_close(reward, torch.as_tensor(expected, dtype=torch.float32))
    env.close()
    with pytest.raises(ValueError, match="MujocoAnt-v5.*healthy_range"):
        make_vec_env("MujocoAnt-v5", 1, healthy_range=(0, 1))


def test_steps_without_the_bindings_profiler_clock_and_puts_it_back():
    """MuJoCo 4's bindings give the profiler a clock of their own (7-10% of an Ant step); the simulations step
    without it, which changes `MjData.timer` only (the gymnasium comparison above runs with it on), and leave a
    clock set by the caller alone."""
    import mujoco

    from dask_podracer.envs.mujoco_threads import ProfilerClockOff, _mjcb_time

    slot = _mjcb_time()
    if slot is None or not slot.value:
        pytest.skip("no bindings' clock to switch off: ctypes cannot reach mjcb_time, or it is NULL")
    bindings_clock = slot.value
    with ProfilerClockOff():
        assert slot.value is None
        with ProfilerClockOff():  # nested, as envs stepped from several threads are
            assert slot.value is None
        assert slot.value is None
    assert slot.value == bindings_clock

    env = make_vec_env("MujocoAnt-v5", 2, seed=0, threads=2)
    env.reset()
    env.step(torch.zeros(2, 8))
    assert slot.value == bindings_clock
    assert env.sims.datas[0].timer[mujoco.mjtTimer.mjTIMER_STEP].duration == 0.0  # stepped untimed
    calls = []

    def clock() -> float:  # a profiler of the caller's
        calls.append(None)
        return float(len(calls))

    mujoco.set_mjcb_time(clock)
    try:
        env.step(torch.zeros(2, 8))
        assert calls  # the caller's clock ran during the step
    finally:
        mujoco.set_mjcb_time(None)
    assert slot.value == bindings_clock
    env.close()
