"""On-device wrappers: normalisation statistics against a plain computation, episode statistics against a loop."""

import numpy as np
import torch

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.checker import check_vec_env
from dask_podracer.envs.wrappers import (EpisodeStatistics, NormalizeObservation, NormalizeReward, RunningMeanStd,
                                         VecEnvWrapper)


def test_running_mean_std_merges_batches_like_one_big_batch():
    data = torch.randn(1000, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 5 + 2
    rms = RunningMeanStd((3,), torch.device("cpu"), epsilon=0.0)
    rms.count = torch.tensor(0.0, dtype=torch.float64)
    for chunk in data.split(37):
        rms.update(chunk)
    torch.testing.assert_close(rms.mean, data.mean(0))
    torch.testing.assert_close(rms.var, data.var(0, unbiased=False))


class LastStep(VecEnvWrapper):
    """Passes every step through unchanged, keeping what the inner env returned: the raw observations."""

    def step(self, actions):
        self.last = self.env.step(actions)
        return self.last


def test_normalize_observation_whitens_and_applies_to_final_obs():
    # CartPole pushed at random ends episodes within a few dozen steps, so final_obs differs from obs
    raw = LastStep(make_vec_env("CartPole", 256, seed=0))
    env = NormalizeObservation(raw)
    gen = torch.Generator().manual_seed(0)
    obs, _ = env.reset()
    for _ in range(50):
        obs, _, _, _, _info = env.step(torch.randint(0, 2, (256,), generator=gen))
    assert abs(float(obs[:, 0].mean())) < 0.5 and 0.3 < float(obs[:, 0].std()) < 2.0
    env.training = False
    mean, var = env.obs_rms.mean.clone(), env.obs_rms.var.clone()
    # learnt statistics, far from the fresh (0, 1) that would make normalising the identity
    assert not torch.allclose(var, torch.ones_like(var), rtol=0.5)

    def whiten(x):  # by hand, with the frozen statistics
        return ((x - mean) / torch.sqrt(var + 1e-8)).clamp(-10, 10).float()

    ended = 0
    for _ in range(20):
        obs, _, terminated, truncated, info = env.step(torch.randint(0, 2, (256,), generator=gen))
        inner_obs, *_, inner_info = raw.last
        done = terminated | truncated
        torch.testing.assert_close(obs, whiten(inner_obs))
        torch.testing.assert_close(info["final_obs"], whiten(inner_info["final_obs"]))
        # where an episode ended, obs is the next episode's first: final_obs must not be that
        assert not torch.isclose(info["final_obs"][done], obs[done]).all(1).any()
        ended += int(done.sum())
    assert ended > 50  # plenty of episodes ended while frozen
    assert torch.equal(mean, env.obs_rms.mean) and torch.equal(var, env.obs_rms.var)
    frozen_env = NormalizeObservation(make_vec_env("Pendulum", 4, seed=0))
    frozen_env.training = False  # learning statistics would (rightly) break the checker's repeat-the-seed test
    check_vec_env(frozen_env)
    check_vec_env(EpisodeStatistics(make_vec_env("PointChase", 4, seed=0)))


def test_normalize_reward_scales_by_the_discounted_return_std_and_keeps_raw():
    env = NormalizeReward(make_vec_env("Pendulum", 64, seed=0), gamma=0.9)
    env.reset()
    for _ in range(100):
        _, reward, _, _, info = env.step(torch.zeros(64, 1))
    expected = info["raw_reward"] / torch.sqrt(env.scale.rms.var + 1e-8)
    torch.testing.assert_close(reward, expected.float())
    assert float(reward.abs().mean()) < float(info["raw_reward"].abs().mean())
    assert float(info["episode_return"].mean()) < -50  # episode statistics stay in raw units


def test_normalize_reward_while_learning_matches_plain_numpy():
    """Statistics learning as it goes (not frozen), against a from-scratch numpy computation of every step.

    numpy side: G ← γG + r; the variance is that of every G seen so far plus the prior (count 1e-4,
    mean 0, variance 1), computed from the whole history each step; G restarts where an episode
    ended; the reward is clipped to ±clip. CartPole with random pushes ends episodes every few
    dozen steps, and its first steps (G all 1, variance ~0) hit the clip.
    """
    gamma, clip, n = 0.9, 5.0, 8
    env = NormalizeReward(make_vec_env("CartPole", n, seed=0), gamma=gamma, clip=clip)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    discounted, history = np.zeros(n), []
    prior_count, clipped, ended = 1e-4, 0, 0
    for t in range(80):
        _, reward, terminated, truncated, info = env.step(torch.randint(0, 2, (n,), generator=gen))
        raw = info["raw_reward"].double().numpy()
        discounted = discounted * gamma + raw
        history.append(discounted.copy())
        seen = np.concatenate(history)
        count = prior_count + seen.size
        mean = seen.sum() / count
        var = (prior_count * (1.0 + mean**2) + ((seen - mean) ** 2).sum()) / count
        expected = np.clip(raw / np.sqrt(var + 1e-8), -clip, clip)
        np.testing.assert_allclose(reward.numpy(), expected, rtol=1e-5, err_msg=f"step {t}")
        np.testing.assert_allclose(float(env.scale.rms.var), var, rtol=1e-9)
        done = (terminated | truncated).numpy()
        discounted[done] = 0.0
        clipped += int((np.abs(raw / np.sqrt(var + 1e-8)) > clip).sum())
        ended += int(done.sum())
    assert clipped > 0 and ended > n  # both the clip and the restart of G were exercised


def test_episode_statistics_match_a_plain_loop():
    env = EpisodeStatistics(make_vec_env("CartPole", 16, seed=0), window=20)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    finished_returns, finished_lengths = [], []
    for _ in range(120):
        _, _, terminated, truncated, info = env.step(torch.randint(0, 2, (16,), generator=gen))
        for i in np.flatnonzero((terminated | truncated).numpy()):
            finished_returns.append(float(info["episode_return"][i]))
            finished_lengths.append(int(info["episode_length"][i]))
    summary = env.summary()
    assert summary["episodes"] == len(finished_returns) > 20  # the ring buffer has wrapped
    # The newest 20, in any order: same multiset of returns and lengths.
    assert sorted(env.returns.tolist()) == sorted(finished_returns[-20:])
    assert sorted(env.lengths.tolist()) == sorted(finished_lengths[-20:])
    assert summary["mean_length"] == np.mean(finished_lengths[-20:])
