"""On-policy rollouts: an on-device buffer of `T` steps of `B` envs, and GAE as a pure function."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor

from dask_podracer.envs.devices import check_buffer_fits


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    dones: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over a rollout of `T` steps of `B` envs.

    Args:
        rewards: `[T, B]` reward of step t.
        values: `[T, B]` V(s_t) of the observation step t acted on.
        next_values: `[T, B]` V(s'_t) of the observation step t really led to (the env's
            `final_obs`, not the auto-reset one), so truncated episodes bootstrap from it.
        terminated: `[T, B]` (bool or 0/1) step t ended the episode in a terminal state:
            nothing to bootstrap from.
        dones: `[T, B]` (bool or 0/1) step t ended the episode (terminated or truncated):
            the next step belongs to another episode, so the lambda-return stops here.
        gamma: discount factor.
        gae_lambda: GAE's lambda.

    Returns:
        advantages `[T, B]` and returns `[T, B]` (= advantages + values, the critic's target).

    delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    """
    not_terminal = 1.0 - terminated.to(values.dtype)
    not_done = 1.0 - dones.to(values.dtype)
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = torch.empty_like(values)
    running = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def explained_variance(predictions: Tensor, targets: Tensor) -> Tensor:
    """1 - Var[targets - predictions] / Var[targets] (any equal shapes): 1 is perfect, <= 0 is useless. Fewer than 2
    targets have no variance to explain: 0 (the sample variance of one value is NaN, and a segment fails on it)."""
    if targets.numel() < 2:
        return targets.new_zeros(())
    var_targets = targets.var()
    return 1.0 - (targets - predictions).var() / var_targets.clamp_min(1e-8)


class RolloutBuffer:
    """`T` steps of `B` envs, preallocated on `device` and overwritten every iteration.

    obs and final_obs are `[T, B, obs_dim]`; actions `[T, B, *act_shape]` (the raw policy
    sample, before clipping to the env's bounds); log_probs, values, rewards, terminated
    and dones are `[T, B]` float tensors.
    """

    def __init__(self, num_steps: int, num_envs: int, obs_dim: int, act_shape: tuple[int, ...],
                 act_dtype: torch.dtype, device: torch.device) -> None:
        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros((num_steps, num_envs, *shape), dtype=dtype, device=device)

        row = 2 * obs_dim + math.prod(act_shape) + 6  # values a step keeps (4 bytes or more each)
        check_buffer_fits(num_steps * num_envs * row * 4, device, f"a rollout of hparams.rollout_steps x num_envs = "
                          f"{num_steps:,} x {num_envs:,} steps of {row} values")

        self.num_steps, self.num_envs = num_steps, num_envs
        self.obs = zeros(obs_dim)
        self.final_obs = zeros(obs_dim)
        self.actions = zeros(*act_shape, dtype=act_dtype)
        self.log_probs = zeros()
        self.values = zeros()
        self.rewards = zeros()
        self.terminated = zeros()
        self.dones = zeros()

    def add(self, t: int, obs: Tensor, action: Tensor, log_prob: Tensor, value: Tensor, reward: Tensor,
            final_obs: Tensor, terminated: Tensor, truncated: Tensor) -> None:
        """Write step `t` of every env: obs/final_obs `[B, obs_dim]`, action `[B, *act_shape]`, the rest `[B]`."""
        self.obs[t] = obs
        self.actions[t] = action
        self.log_probs[t] = log_prob
        self.values[t] = value
        self.rewards[t] = reward
        self.final_obs[t] = final_obs
        self.terminated[t] = terminated
        self.dones[t] = terminated | truncated

    def minibatches(self, num_minibatches: int, generator: torch.Generator | None = None) -> Iterator[Tensor]:
        """Shuffled flat indices into the `T * B` samples, split into `num_minibatches` near-equal parts."""
        size = self.num_steps * self.num_envs
        order = torch.randperm(size, generator=generator, device=self.obs.device)
        yield from order.tensor_split(num_minibatches)
