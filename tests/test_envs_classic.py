"""Acrobot, MountainCar, MountainCarContinuous and PointChase: numeric equivalence with gymnasium and known answers."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.acrobot import AcrobotVecEnv
from dask_podracer.envs.cartpole import CartPoleVecEnv
from dask_podracer.envs.mountain_car import MountainCarContinuousVecEnv, MountainCarVecEnv
from dask_podracer.envs.point_chase import PointChaseVecEnv


def gym_env(env_id: str, state) -> gym.Env:
    env = gym.make(env_id)
    env.reset(seed=0)
    env.unwrapped.state = state
    return env


def assert_step_matches(ours, env_id, states, actions, gym_action, rtol=1e-5, atol=1e-5):
    """Step ours once from `states` (already set) and gymnasium once per env from the same state; compare."""
    _obs, reward, terminated, truncated, info = ours.step(torch.as_tensor(actions))
    for i, state in enumerate(states):
        env = gym_env(env_id, state)
        g_obs, g_reward, g_term, g_trunc, _ = env.step(gym_action(actions[i]))
        np.testing.assert_allclose(info["final_obs"][i].numpy(), g_obs, rtol=rtol, atol=atol, err_msg=f"env {i}")
        assert reward[i].item() == pytest.approx(g_reward, rel=rtol, abs=atol), f"env {i}"
        assert bool(terminated[i]) == g_term and bool(truncated[i]) == g_trunc, f"env {i}"
    return terminated


def test_acrobot_matches_gymnasium_step_for_step():
    rng = np.random.default_rng(0)
    n = 64
    states = np.column_stack([rng.uniform(-np.pi, np.pi, (n, 2)), rng.uniform(-12, 12, n), rng.uniform(-28, 28, n)])
    states[:8] = [np.pi - 0.05, 0.0, 0.0, 0.0]  # arm up and still: these terminate
    actions = rng.integers(0, 3, n)
    ours = AcrobotVecEnv(n, dtype=torch.float64)
    ours.reset(seed=0)
    ours.set_state(torch.tensor(states))
    terminated = assert_step_matches(ours, "Acrobot-v1", states, actions, int, rtol=1e-6, atol=1e-6)
    # The 8 upright arms and 10 of the random states lift the tip above the bar (gymnasium agrees, above).
    assert terminated.nonzero().flatten().tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 17, 19, 21, 23, 40, 49, 50, 52, 62]


def test_mountain_car_matches_gymnasium_step_for_step_including_walls():
    rng = np.random.default_rng(1)
    n = 64
    position = rng.uniform(-1.2, 0.6, n)
    velocity = rng.uniform(-0.07, 0.07, n)
    position[:4], velocity[:4] = -1.19, -0.05  # drives into the left wall: velocity must be zeroed
    position[4:8], velocity[4:8] = 0.49, 0.05  # reaches the goal
    actions = rng.integers(0, 3, n)
    for dtype, tol in [(torch.float64, 0.0), (torch.float32, 1e-5)]:
        ours = MountainCarVecEnv(n, dtype=dtype)
        ours.reset(seed=0)
        ours.set_state(torch.tensor(position), torch.tensor(velocity))
        states = [np.array([p, v]) for p, v in zip(position, velocity)]
        terminated = assert_step_matches(ours, "MountainCar-v0", states, actions, int, rtol=tol, atol=tol)
        assert terminated[4:8].all()
        assert torch.all(ours.velocity[:4] == 0) and torch.all(ours.position[:4] == -1.2)


def test_mountain_car_continuous_matches_gymnasium_step_for_step():
    rng = np.random.default_rng(2)
    n = 64
    position = rng.uniform(-1.2, 0.6, n).astype(np.float32)
    velocity = rng.uniform(-0.07, 0.07, n).astype(np.float32)
    position[:4], velocity[:4] = -1.19, -0.05
    position[4:8], velocity[4:8] = 0.44, 0.05
    actions = rng.uniform(-2, 2, (n, 1)).astype(np.float32)  # beyond [-1, 1]: clipped force, unclipped cost
    ours = MountainCarContinuousVecEnv(n)
    ours.reset(seed=0)
    ours.set_state(torch.tensor(position), torch.tensor(velocity))
    states = [np.array([p, v], dtype=np.float32) for p, v in zip(position, velocity)]
    terminated = assert_step_matches(ours, "MountainCarContinuous-v0", states, actions, lambda a: a)
    assert terminated[4:8].all()


@pytest.mark.parametrize("env_id, cls, dtype, discrete", [
    ("Acrobot-v1", AcrobotVecEnv, torch.float64, True),
    ("MountainCar-v0", MountainCarVecEnv, torch.float64, True),
    ("MountainCarContinuous-v0", MountainCarContinuousVecEnv, torch.float64, False),
])
def test_whole_episode_trajectory_matches_gymnasium(env_id, cls, dtype, discrete):
    env = gym.make(env_id)
    env.reset(seed=3)
    ours = cls(1, dtype=dtype)
    ours.reset(seed=0)
    state = np.array(env.unwrapped.state, dtype=np.float64)
    if env_id == "Acrobot-v1":
        ours.set_state(torch.tensor(state).reshape(1, 4))
    else:
        ours.set_state(torch.tensor(state[:1]), torch.tensor(state[1:]))
    rng = np.random.default_rng(1)
    for t in range(ours.max_episode_steps):
        action = int(rng.integers(0, 3)) if discrete else rng.uniform(-1, 1, (1,)).astype(np.float32)
        g_obs, g_reward, g_term, g_trunc, _ = env.step(action)
        _, reward, term, trunc, info = ours.step(torch.tensor(action).reshape(1, -1))
        np.testing.assert_allclose(info["final_obs"][0].numpy(), g_obs, rtol=1e-6, atol=1e-6, err_msg=f"step {t}")
        assert reward.item() == pytest.approx(g_reward, rel=1e-6, abs=1e-6), f"step {t}"
        assert bool(term) == g_term and bool(trunc) == g_trunc, f"step {t}"
        if g_term or g_trunc:
            break
    assert g_term or g_trunc


# For each twin: a state and action that keep the episode going, and a state and action that end it.
TIME_LIMIT_CASES = {
    "CartPole-v1": (CartPoleVecEnv, [0.0, 0.0, 0.0, 0.0], 0, [2.39, 1.0, 0.0, 0.0], 1),
    "Acrobot-v1": (AcrobotVecEnv, [0.0, 0.0, 0.0, 0.0], 1, [np.pi - 0.05, 0.0, 0.0, 0.0], 1),
    "MountainCar-v0": (MountainCarVecEnv, [-0.5, 0.0], 1, [0.49, 0.05], 2),
    "MountainCarContinuous-v0": (MountainCarContinuousVecEnv, [-0.5, 0.0], [0.0], [0.44, 0.05], [1.0]),
}


def _place(ours, state) -> None:
    state = torch.tensor([state], dtype=torch.float64)
    if isinstance(ours, (CartPoleVecEnv, AcrobotVecEnv)):
        ours.set_state(state)
    else:
        ours.set_state(state[:, 0], state[:, 1])


@pytest.mark.parametrize("env_id", sorted(TIME_LIMIT_CASES))
def test_terminating_on_the_last_step_is_terminated_not_truncated(env_id):
    """A deliberate protocol difference: gymnasium's TimeLimit flags (True, True), ours (True, False).

    Both run a whole episode held in a safe state, then reach a terminal state on exactly the
    step that hits the time limit; the numbers agree and only the truncated flag differs.
    """
    cls, safe, safe_action, ending, ending_action = TIME_LIMIT_CASES[env_id]
    g = gym.make(env_id)
    g.reset(seed=0)
    ours = cls(1, dtype=torch.float64)
    ours.reset(seed=0)
    dtype = np.float32 if env_id == "MountainCarContinuous-v0" else np.float64
    for t in range(ours.max_episode_steps):
        state, action = (safe, safe_action) if t < ours.max_episode_steps - 1 else (ending, ending_action)
        g.unwrapped.state = np.array(state, dtype=dtype)
        _place(ours, state)
        g_obs, g_reward, g_term, g_trunc, _ = g.step(np.array(action, dtype=np.float32) if isinstance(action, list)
                                                     else action)
        _, reward, term, trunc, info = ours.step(torch.tensor(action).reshape(1, -1))
        np.testing.assert_allclose(info["final_obs"][0].numpy(), g_obs, rtol=1e-6, atol=1e-6, err_msg=f"step {t}")
        assert reward.item() == pytest.approx(g_reward, rel=1e-6, abs=1e-6), f"step {t}"
        if t < ours.max_episode_steps - 1:
            assert (bool(term), bool(trunc), g_term, g_trunc) == (False, False, False, False), f"step {t}"
    assert (g_term, g_trunc) == (True, True)  # gymnasium: terminated, and the TimeLimit also truncates
    assert (bool(term), bool(trunc)) == (True, False)  # ours: terminated only, as the protocol says
    assert info["episode_length"].item() == ours.max_episode_steps


def test_mountain_car_reaches_the_goal_with_the_energy_pumping_policy():
    """Known answer: pushing in the direction of motion climbs out of the valley well within 200 steps."""
    env = make_vec_env("MountainCar", 256, seed=0)
    obs, _ = env.reset()
    finished = torch.zeros(256, dtype=torch.bool)
    for _ in range(200):
        action = torch.where(obs[:, 1] >= 0, 2, 0)
        obs, _, terminated, truncated, _info = env.step(action)
        assert not (truncated & ~finished).any()
        finished |= terminated
    assert finished.all()


def test_point_chase_pursuit_catches_the_target_and_idling_does_not():
    env = PointChaseVecEnv(512, seed=0)
    obs, _ = env.reset()
    caught = torch.zeros(512, dtype=torch.bool)
    idle = PointChaseVecEnv(512, seed=0)
    idle.reset()
    idle_caught = torch.zeros(512, dtype=torch.bool)
    for _ in range(200):
        # Proportional-derivative pursuit toward the target, leading it by its relative velocity.
        action = (8.0 * obs[:, 4:6] + 1.0 * (obs[:, 6:8] - obs[:, 2:4])).clamp(-1, 1)
        obs, _reward, terminated, _, _info = env.step(action)
        caught |= terminated & ~caught
        _, _, idle_term, _, _ = idle.step(torch.zeros(512, 2))
        idle_caught |= idle_term
    assert caught.float().mean() > 0.9
    assert idle_caught.float().mean() < 0.2
