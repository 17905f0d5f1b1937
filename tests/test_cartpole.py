"""The torch CartPole, checked against gymnasium's CartPole-v1."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs import CartPoleVecEnv, VecEnv, cartpole, make_vec_env


def gym_cartpole(state: np.ndarray) -> gym.Env:
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.unwrapped.state = np.array(state, dtype=np.float64)
    return env


def test_matches_gymnasium_step_for_step_from_identical_states():
    rng = np.random.default_rng(0)
    n = 64
    # Some states near the thresholds, so both terminating and non-terminating steps are compared.
    states = rng.uniform([-2.45, -2, -0.22, -2], [2.45, 2, 0.22, 2], (n, 4))
    actions = rng.integers(0, 2, n)
    ours = CartPoleVecEnv(n, dtype=torch.float64)
    ours.reset(seed=0)
    ours.set_state(torch.tensor(states))
    _, reward, terminated, truncated, info = ours.step(torch.tensor(actions))
    assert terminated.any() and not terminated.all()
    for i in range(n):
        g_obs, g_reward, g_term, g_trunc, _ = gym_cartpole(states[i]).step(int(actions[i]))
        np.testing.assert_allclose(info["final_obs"][i].numpy(), g_obs, rtol=1e-6, atol=1e-6)
        assert reward[i].item() == g_reward == 1.0
        assert bool(terminated[i]) == g_term and bool(truncated[i]) == g_trunc


def test_float64_trajectory_matches_gymnasium_for_a_whole_episode():
    env = gym.make("CartPole-v1")
    env.reset(seed=3)
    ours = CartPoleVecEnv(1, dtype=torch.float64)
    ours.reset(seed=0)
    ours.set_state(torch.tensor(env.unwrapped.state).reshape(1, 4))
    g_obs = None
    for t in range(500):
        # A simple balancing controller keeps the episode going until the 500-step truncation.
        state = env.unwrapped.state
        action = int(state[2] + 0.5 * state[3] + 0.05 * state[1] > 0)
        g_obs, g_reward, g_term, g_trunc, _ = env.step(action)
        _, reward, term, trunc, info = ours.step(torch.tensor([action]))
        np.testing.assert_allclose(info["final_obs"][0].numpy(), g_obs, rtol=1e-5, atol=1e-6)
        assert reward.item() == g_reward
        assert bool(term) == g_term and bool(trunc) == g_trunc, f"step {t}"
        if g_term or g_trunc:
            break
    assert g_trunc and t == 499  # both truncate after the same 500 steps


def test_protocol_reset_bounds_and_auto_reset():
    env = make_vec_env("CartPole", 256, seed=0)
    assert isinstance(env, VecEnv) and env.single_action_space.n == 2
    obs, _ = env.reset()
    assert obs.shape == (256, 4) and obs.dtype == torch.float32 and bool((obs.abs() <= 0.05).all())
    ended = torch.zeros(256, dtype=torch.bool)
    for _ in range(60):  # always pushing right topples every pole within a few dozen steps
        obs, reward, terminated, truncated, _ = env.step(torch.ones(256, dtype=torch.long))
        assert torch.equal(reward, torch.ones(256))
        assert bool((obs[terminated].abs() <= 0.05).all())  # the next episode starts where one ended
        ended |= terminated
    assert ended.all() and not truncated.any()
    assert make_vec_env("CartPole-v1", 1).max_episode_steps == 500


def _plain_cartpole_step(state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """gymnasium's CartPole step written plainly in torch: the reference for the optimised one."""
    e = CartPoleVecEnv
    x, x_dot, theta, theta_dot = state.unbind(-1)
    force = torch.where(actions == 1, e.force_mag, -e.force_mag).to(state.dtype)
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    temp = (force + e.polemass_length * theta_dot**2 * sintheta) / e.total_mass
    thetaacc = (e.gravity * sintheta - costheta * temp) / (
        e.length * (4.0 / 3.0 - e.masspole * costheta**2 / e.total_mass))
    xacc = temp - e.polemass_length * thetaacc * costheta / e.total_mass
    new = torch.stack([x + e.tau * x_dot, x_dot + e.tau * xacc, theta + e.tau * theta_dot,
                       theta_dot + e.tau * thetaacc], dim=-1)
    terminated = (new[:, 0].abs() > e.x_threshold) | (new[:, 2].abs() > e.theta_threshold_radians)
    return new, terminated


def _compare_with_the_plain_step(dtype: torch.dtype, exact: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    n = 4096
    state = (torch.rand(n, 4, generator=gen, dtype=torch.float64) * 2 - 1) * torch.tensor([2.45, 3, 0.25, 3.0])
    state = state.to(dtype)
    actions = torch.randint(0, 2, (n,), generator=gen)
    env = CartPoleVecEnv(n, dtype=dtype)
    env.reset(seed=0)
    env.set_state(state)
    for t in range(5):
        state, expected_terminated = _plain_cartpole_step(state, actions)
        _, _, terminated, _, info = env.step(actions)
        if exact:
            assert torch.equal(info["final_obs"], state.to(torch.float32)), f"step {t}"
        else:  # numpy's float32 cos and sin may differ from torch's in the last bit
            torch.testing.assert_close(info["final_obs"], state.to(torch.float32), rtol=1e-5, atol=1e-6)
        assert torch.equal(terminated, expected_terminated) and expected_terminated.any(), f"step {t}"
        env.set_state(state)  # continue from the plain state, past the auto-resets


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_torch_step_is_bit_identical_to_the_plain_one(dtype, monkeypatch):
    """The in-place, two-ops-for-Euler step in torch (float64 on a CPU, anything on a GPU) changes no bit."""
    monkeypatch.setattr(cartpole, "array_namespace", lambda device, dtype, num_envs: torch)
    _compare_with_the_plain_step(dtype, exact=True)


def test_the_float32_cpu_step_in_numpy_matches_the_plain_one():
    assert CartPoleVecEnv(1)._xp is np and CartPoleVecEnv(1, dtype=torch.float64)._xp is torch
    assert CartPoleVecEnv(65536)._xp is torch  # big enough for torch's threads
    _compare_with_the_plain_step(torch.float32, exact=False)


def test_an_observation_never_aliases_the_state():
    env = CartPoleVecEnv(1)
    obs, _ = env.reset(seed=0)
    final = env.step(torch.tensor([1]))[4]["final_obs"]
    before = (obs.clone(), final.clone())
    env.step(torch.tensor([1]))
    assert torch.equal(obs, before[0]) and torch.equal(final, before[1]) and obs.is_contiguous()
