"""The VecEnv protocol and the torch Pendulum, checked against gymnasium's Pendulum-v1."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs import PendulumVecEnv, VecEnv, make_vec_env, registered_envs


def gym_pendulum(theta: float, theta_dot: float) -> gym.Env:
    env = gym.make("Pendulum-v1")
    env.reset(seed=0)
    env.unwrapped.state = np.array([theta, theta_dot])
    return env


def test_matches_gymnasium_step_for_step_from_identical_states():
    rng = np.random.default_rng(0)
    n = 64
    theta = rng.uniform(-3 * np.pi, 3 * np.pi, n)  # beyond [-pi, pi]: angle normalisation matters
    theta_dot = rng.uniform(-8, 8, n)
    actions = rng.uniform(-3, 3, (n, 1)).astype(np.float32)  # beyond the torque limit: clipping matters
    ours = PendulumVecEnv(n)
    ours.reset(seed=0)
    ours.set_state(torch.tensor(theta), torch.tensor(theta_dot))
    obs, reward, terminated, truncated, _ = ours.step(torch.tensor(actions))
    for i in range(n):
        env = gym_pendulum(theta[i], theta_dot[i])
        g_obs, g_reward, g_term, g_trunc, _ = env.step(actions[i])
        np.testing.assert_allclose(obs[i].numpy(), g_obs, rtol=1e-5, atol=1e-5)
        assert reward[i].item() == pytest.approx(g_reward, rel=1e-5, abs=1e-5)
        assert bool(terminated[i]) == g_term and bool(truncated[i]) == g_trunc


def test_float64_trajectory_matches_gymnasium_for_a_whole_episode():
    env = gym.make("Pendulum-v1")
    g_obs, _ = env.reset(seed=3)
    ours = PendulumVecEnv(1, dtype=torch.float64)
    ours.reset(seed=0)
    ours.set_state(torch.tensor([env.unwrapped.state[0]]), torch.tensor([env.unwrapped.state[1]]))
    rng = np.random.default_rng(1)
    for t in range(200):
        action = rng.uniform(-2, 2, (1,)).astype(np.float32)
        g_obs, g_reward, g_term, g_trunc, _ = env.step(action)
        _, reward, term, trunc, info = ours.step(torch.tensor(action).reshape(1, 1))
        np.testing.assert_allclose(info["final_obs"][0].numpy(), g_obs, rtol=1e-6, atol=1e-6)
        assert reward.item() == pytest.approx(g_reward, rel=1e-6, abs=1e-5)
        assert bool(trunc) == g_trunc and bool(term) == g_term, f"step {t}"
    assert g_trunc  # both truncate after the same 200 steps


def test_auto_reset_keeps_the_final_observation():
    env = make_vec_env("Pendulum", 8, seed=1)
    obs, _ = env.reset()
    actions = torch.zeros(8, 1)
    for t in range(199):
        obs, _, _, truncated, info = env.step(actions)
        assert not truncated.any()
        assert torch.equal(obs, info["final_obs"])  # nothing ended: the two agree
    obs, _, terminated, truncated, info = env.step(actions)
    assert truncated.all() and not terminated.any()
    assert not torch.equal(obs, info["final_obs"])  # obs starts the next episode, final_obs ends this one
    assert torch.equal(info["episode_length"], torch.full((8,), 200))
    assert torch.all(info["episode_return"] < 0)
    theta = torch.atan2(obs[:, 1], obs[:, 0])
    assert torch.all(theta.abs() <= np.pi) and torch.all(obs[:, 2].abs() <= 1.0)  # fresh initial states
    _, _, _, truncated, _ = env.step(actions)
    assert not truncated.any()  # the clock restarted


def test_protocol_spaces_dtypes_and_device():
    env = make_vec_env("Pendulum-v1", 5, device="cpu", seed=0)
    assert isinstance(env, VecEnv)
    assert env.num_envs == 5 and env.device == torch.device("cpu")
    assert env.single_observation_space.shape == (3,) and env.single_action_space.shape == (1,)
    obs, info = env.reset(seed=0)
    assert obs.shape == (5, 3) and obs.dtype == torch.float32 and info == {}
    obs, reward, terminated, truncated, info = env.step(torch.zeros(5, 1))
    assert reward.shape == (5,) and reward.dtype == torch.float32
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
    assert all(env.single_observation_space.contains(o) for o in obs.numpy())


def test_seeding_is_deterministic_and_seeds_differ():
    def rollout(seed):
        env = make_vec_env("Pendulum", 4, seed=seed)
        obs, _ = env.reset()
        trace = [obs]
        for _ in range(250):  # crosses an auto-reset, whose initial states come from the same stream
            obs, *_ = env.step(torch.ones(4, 1))
            trace.append(obs)
        return torch.stack(trace)

    assert torch.equal(rollout(7), rollout(7))
    assert not torch.equal(rollout(7), rollout(8))
    env = make_vec_env("Pendulum", 4)
    first, _ = env.reset(seed=5)
    again, _ = env.reset(seed=5)
    assert torch.equal(first, again)


def test_step_before_reset_and_unknown_env_are_clear_errors():
    with pytest.raises(RuntimeError, match="before reset"):
        make_vec_env("Pendulum", 2).step(torch.zeros(2, 1))
    with pytest.raises(ValueError, match="unknown env 'Pendulm'.*Pendulum-v1"):
        make_vec_env("Pendulm", 2)
    assert "Pendulum-v1" in registered_envs()


def test_reset_without_a_seed_continues_the_seeded_stream():
    """A seeded env repeats after construction: reset(), reset() gives the same two batches each time."""
    def two_resets(seed):
        env = make_vec_env("CartPole", 16, seed=seed)
        return env.reset()[0], env.reset()[0]

    first, second = two_resets(3)
    again_first, again_second = two_resets(3)
    assert torch.equal(first, again_first) and torch.equal(second, again_second)
    assert not torch.equal(first, second)  # the second reset continues the stream instead of repeating it
    # Unseeded envs draw from OS entropy: two of them differ.
    assert not torch.equal(make_vec_env("CartPole", 16).reset()[0], make_vec_env("CartPole", 16).reset()[0])


def test_env_device_is_the_device_its_tensors_report():
    env = make_vec_env("Pendulum", 2, device="cpu:0", seed=0)
    obs, _ = env.reset()
    assert env.device == torch.device("cpu") == obs.device  # "cpu:0" tensors report "cpu"


def test_reset_rows_by_index_and_by_mask_agree():
    """The CPU's index path (only k rows drawn and written) against the GPU's mask path, on the same values."""
    from dask_podracer.envs.base import ResetRows

    current = torch.arange(12.0).reshape(6, 2)
    mask = torch.tensor([False, True, False, False, True, True])
    by_index, by_mask = ResetRows(mask, mask.nonzero().squeeze(1)), ResetRows(mask)
    assert by_index.shape(2) == (3, 2) and by_mask.shape(2) == (6, 2) and by_mask.shape() == (6,)
    fresh = -torch.arange(1.0, 7.0).reshape(3, 2)
    full = torch.zeros(6, 2)
    full[mask] = fresh
    expected = torch.tensor([[0, 1], [-1, -2], [4, 5], [6, 7], [-3, -4], [-5, -6]], dtype=torch.float32)
    assert torch.equal(by_index.put(current, fresh), expected)
    assert torch.equal(by_mask.put(current, full), expected)
    filled = torch.tensor([0, 9, 2, 3, 9, 9])
    assert torch.equal(by_index.fill(torch.arange(6), 9), filled) and torch.equal(by_mask.fill(torch.arange(6), 9), filled)
    assert torch.equal(current, torch.arange(12.0).reshape(6, 2))  # out of place: info may hold the old tensors
