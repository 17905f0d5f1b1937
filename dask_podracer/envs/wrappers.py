"""On-device wrappers: running observation / reward normalisation and episode statistics.

Every statistic lives in tensors on the env's device and is updated without a host sync,
so wrapping a GPU env keeps the hot path on the GPU. A wrapper is itself a VecEnv:
attributes it does not define (spaces, `max_episode_steps`, `set_state`...) are the env's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import StepResult, VecEnv


class VecEnvWrapper:
    """Forwards everything to `env`; subclasses override `reset` and/or `step`."""

    def __init__(self, env: VecEnv) -> None:
        self.env = env

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (e.g. during unpickling): don't recurse
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        return self.env.reset(seed=seed)

    def step(self, actions: Tensor) -> StepResult:
        return self.env.step(actions)

    def close(self) -> None:
        self.env.close()


class RunningMeanStd:
    """Mean and variance of a stream of batches `[N, *shape]`, merged with Chan et al.'s parallel formula."""

    def __init__(self, shape: tuple[int, ...], device: torch.device, epsilon: float = 1e-4) -> None:
        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count = torch.tensor(epsilon, dtype=torch.float64, device=device)  # a tensor: no host sync
        # None: each batch is taken in as it is. Set: a batch's moments, packed `[1 + 2 * size]` float64 (count,
        # then mean and variance flattened), are replaced by `combine(moments)` (packed the same) before they are
        # taken in; several learners that combine their batches so keep identical statistics (agents/normalization.py)
        self.combine: Callable[[Tensor], Tensor] | None = None

    def update(self, batch: Tensor) -> None:
        batch = batch.to(torch.float64)
        b_mean, b_var, b_count = batch.mean(0), batch.var(0, unbiased=False), batch.shape[0]
        if self.combine is not None:
            shape = self.mean.shape
            packed = torch.cat([torch.tensor([float(b_count)], dtype=torch.float64, device=batch.device),
                                b_mean.reshape(-1), b_var.reshape(-1)])
            b_count, b_mean, b_var = self.combine(packed).tensor_split([1, 1 + self.mean.numel()])
            b_count, b_mean, b_var = b_count.reshape(()), b_mean.reshape(shape), b_var.reshape(shape)
        delta, total = b_mean - self.mean, self.count + b_count
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        # In place: a reader on another CUDA stream (a pipelined learner) ordered after this update by an
        # event reads these same tensors, never memory the caching allocator has handed to something else.
        self.mean.add_(delta * b_count / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def state_dict(self) -> dict[str, Tensor]:
        """Copies: the statistics change in place."""
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        device = self.mean.device
        self.mean, self.var, self.count = (torch.as_tensor(state[k]).to(device, torch.float64, copy=True)
                                           for k in ("mean", "var", "count"))


class NormalizeObservation(VecEnvWrapper):
    """obs → clip((obs − mean) / sqrt(var + eps), ±clip), with mean/var over every obs seen while `training`.

    `info["final_obs"]` is normalised with the same statistics, so a critic bootstraps from
    the same scale it sees. Set `training = False` to freeze the statistics (evaluation).
    """

    def __init__(self, env: VecEnv, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__(env)
        self.obs_rms = RunningMeanStd(tuple(env.single_observation_space.shape), env.device)
        self.clip, self.epsilon, self.training = clip, epsilon, True
        shape = env.single_observation_space.shape
        self.single_observation_space = gym.spaces.Box(-clip, clip, shape, np.float32)

    def normalize(self, obs: Tensor) -> Tensor:
        z = (obs - self.obs_rms.mean) / torch.sqrt(self.obs_rms.var + self.epsilon)
        return z.clamp(-self.clip, self.clip).to(torch.float32)

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed)
        if self.training:
            self.obs_rms.update(obs)
        return self.normalize(obs), info

    def step(self, actions: Tensor) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if self.training:
            self.obs_rms.update(obs)
        info = {**info, "final_obs": self.normalize(info["final_obs"])}
        return self.normalize(obs), reward, terminated, truncated, info


class DiscountedReturnScale:
    """`scale(reward)` = clip(reward / sqrt(var(G) + eps), ±clip), G each env's running discounted return.

    `update(reward, done)` takes in one env step: G ← γ·G + reward, then var(G) takes in this
    step's G (unless `learn` is false), then G restarts at 0 where `done`. The rule of
    `NormalizeReward` and of the agents' `normalize_rewards`, kept once.
    """

    def __init__(self, num_envs: int, gamma: float, device: torch.device, clip: float = 10.0,
                 epsilon: float = 1e-8) -> None:
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.rms = RunningMeanStd((), device)
        self.returns = torch.zeros(num_envs, dtype=torch.float64, device=device)

    def update(self, reward: Tensor, done: Tensor, learn: bool = True) -> None:
        self.returns.mul_(self.gamma).add_(reward.to(torch.float64))
        if learn:
            self.rms.update(self.returns)
        self.returns.masked_fill_(done, 0.0)

    def __call__(self, reward: Tensor) -> Tensor:
        return (reward / torch.sqrt(self.rms.var + self.epsilon)).clamp(-self.clip, self.clip).to(reward.dtype)


class NormalizeReward(VecEnvWrapper):
    """reward → clip(reward / sqrt(var(G) + eps), ±clip), G each env's running discounted return
    (`DiscountedReturnScale`).

    G ← γ·G + reward, then var(G) takes in this step's G (while `training`), then G restarts
    at 0 where the episode ended, by termination or truncation. Like gymnasium's vector
    `NormalizeReward` (same-step autoreset) except in two ways: gymnasium's G also drops the
    episode's history on the terminating step itself (it multiplies by 1 − terminated before
    adding that step's reward), where ours keeps it; and gymnasium does not clip.
    The raw reward stays in `info["raw_reward"]`; `info["episode_return"]` stays the env's
    (unnormalised) one, so evaluation scores remain comparable.
    """

    def __init__(self, env: VecEnv, gamma: float = 0.99, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__(env)
        self.scale = DiscountedReturnScale(env.num_envs, gamma, env.device, clip, epsilon)
        self.training = True

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        self.scale.returns.zero_()
        return self.env.reset(seed=seed)

    def step(self, actions: Tensor) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.scale.update(reward, terminated | truncated, learn=self.training)
        return obs, self.scale(reward).to(torch.float32), terminated, truncated, {**info, "raw_reward": reward}


class EpisodeStatistics(VecEnvWrapper):
    """Counts finished episodes and keeps the returns and lengths of the last `window` of them, on device.

    It sums rewards itself (wrap it *inside* `NormalizeReward` to record raw returns), so it
    also works for envs whose info lacks episode statistics. `summary()` is the only host sync.
    """

    def __init__(self, env: VecEnv, window: int = 100) -> None:
        super().__init__(env)
        device = env.device
        self.window = window
        self.returns = torch.zeros(window, dtype=torch.float64, device=device)
        self.lengths = torch.zeros(window, dtype=torch.int64, device=device)
        self.episodes = torch.zeros((), dtype=torch.int64, device=device)  # finished so far, ever
        self._return = torch.zeros(env.num_envs, dtype=torch.float64, device=device)
        self._length = torch.zeros(env.num_envs, dtype=torch.int64, device=device)

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        self._return.zero_()
        self._length.zero_()
        return self.env.reset(seed=seed)

    def step(self, actions: Tensor) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self._return += reward.to(torch.float64)
        self._length += 1
        done = terminated | truncated
        # Finished episodes go to ring-buffer slots episodes, episodes+1, ...; the rest write
        # out of range and are dropped, so there is no boolean indexing (which would sync).
        rank = torch.cumsum(done.to(torch.int64), 0) - 1
        slot = torch.where(done, (self.episodes + rank) % self.window, self.window)
        n_done = done.sum()
        keep = rank >= n_done - self.window  # more finished than the window holds: keep the newest
        slot = torch.where(keep, slot, self.window)
        ext_r = torch.cat([self.returns, self.returns.new_zeros(1)])
        ext_l = torch.cat([self.lengths, self.lengths.new_zeros(1)])
        self.returns = ext_r.scatter(0, slot, self._return)[: self.window]
        self.lengths = ext_l.scatter(0, slot, self._length)[: self.window]
        self.episodes = self.episodes + n_done
        self._return = self._return.masked_fill(done, 0.0)
        self._length = self._length.masked_fill(done, 0)
        return obs, reward, terminated, truncated, info

    def summary(self) -> dict[str, float]:
        """Mean return and length over the last `window` finished episodes (NaN before the first)."""
        n = min(int(self.episodes), self.window)
        if n == 0:
            return {"episodes": 0, "mean_return": float("nan"), "mean_length": float("nan")}
        return {"episodes": int(self.episodes), "mean_return": float(self.returns[:n].mean()),
                "mean_length": float(self.lengths[:n].double().mean())}
