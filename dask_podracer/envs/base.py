"""The VecEnv protocol and a base class for environments written as batched torch code.

A VecEnv is `num_envs` environments stepped together; every observation, action,
reward and flag is a batch-first tensor on one device. Episodes reset themselves
in the same step they end (gymnasium's "same-step" autoreset): the observation
returned for a finished env is the first one of its next episode, and
`info["final_obs"]` holds, for every env, the observation the step really led to,
which is what a critic bootstraps from.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import torch
from torch import Tensor

StepResult = tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]


@runtime_checkable
class VecEnv(Protocol):
    """What the rest of dask_podracer expects of a batch of environments.

    Shapes: obs `[B, *obs_shape]`, actions `[B, *act_shape]` (or `[B]` for discrete),
    reward / terminated / truncated `[B]`. `info["final_obs"]` is `[B, *obs_shape]`;
    Observations and rewards are float32 whatever dtype an env simulates in.
    `info["episode_return"]` and `info["episode_length"]` are `[B]` and meaningful
    where `terminated | truncated`.
    """

    num_envs: int
    device: torch.device
    single_observation_space: gym.spaces.Space
    single_action_space: gym.spaces.Space
    max_episode_steps: int

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]: ...

    def step(self, actions: Tensor) -> StepResult: ...

    def close(self) -> None: ...


class TorchVecEnv:
    """Base for envs whose dynamics are batched tensor code (no Python loop over envs).

    A subclass keeps its physical state in tensors of shape `[B, ...]` and provides
    `_reset_where(mask)`, `_dynamics(actions) -> (reward, terminated)` and `_observe()`.
    This class owns what every such env shares: the seeded generator, the time limit,
    auto-reset by mask, and episode statistics.
    """

    single_observation_space: gym.spaces.Space
    single_action_space: gym.spaces.Space
    max_episode_steps: int

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.dtype = dtype
        self.generator = torch.Generator(device=self.device)
        self._seed = seed
        self._needs_reset = True
        self.elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.episode_return = torch.zeros(num_envs, dtype=dtype, device=self.device)

    # -- subclass hooks -------------------------------------------------------------
    def _reset_where(self, mask: Tensor) -> None:
        """Draw fresh initial states for the envs where `mask` ([B] bool) is set."""
        raise NotImplementedError

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Advance every env one step; return reward [B] and terminated [B] (bool)."""
        raise NotImplementedError

    def _observe(self) -> Tensor:
        """The observation [B, *obs_shape] of the current state."""
        raise NotImplementedError

    # -- the VecEnv protocol --------------------------------------------------------
    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        seed = self._seed if seed is None else seed
        if seed is not None:
            self.generator.manual_seed(int(seed))
        else:
            self.generator.seed()
        self._seed = None  # later resets continue the stream instead of repeating it
        all_envs = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._reset_where(all_envs)
        self.elapsed = torch.zeros_like(self.elapsed)
        self.episode_return = torch.zeros_like(self.episode_return)
        self._needs_reset = False
        return self._observe(), {}

    def step(self, actions: Tensor) -> StepResult:
        if self._needs_reset:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        actions = torch.as_tensor(actions, device=self.device)
        reward, terminated = self._dynamics(actions)
        # Out of place, so info can hold these tensors without a defensive clone.
        self.elapsed = self.elapsed + 1
        self.episode_return = self.episode_return + reward
        truncated = (self.elapsed >= self.max_episode_steps) & ~terminated
        final_obs = self._observe()
        done = terminated | truncated
        info: dict[str, Any] = {
            "final_obs": final_obs,
            "episode_return": self.episode_return,
            "episode_length": self.elapsed,
        }
        # Reset by mask, not by branching on the host: no device sync in the hot path. On the
        # CPU asking "did any env finish?" costs nothing, and skipping the reset when none did
        # saves the random draws and selects (most steps, for most envs).
        if self.device.type != "cpu" or bool(done.any()):
            self._reset_where(done)
            self.elapsed = self.elapsed.masked_fill(done, 0)
            self.episode_return = self.episode_return.masked_fill(done, 0.0)
            obs = torch.where(done.unsqueeze(-1), self._observe(), final_obs)
        else:
            obs = final_obs.clone()  # a separate tensor, so writing into obs never changes final_obs
        return obs, reward.to(torch.float32), terminated, truncated, info

    def close(self) -> None:
        """Nothing to release: the state is plain tensors."""

    def _uniform(self, low: Tensor | float, high: Tensor | float, shape: tuple[int, ...]) -> Tensor:
        """Uniform samples from this env's own generator, in this env's dtype and device."""
        u = torch.rand(shape, generator=self.generator, device=self.device, dtype=self.dtype)
        return low + (high - low) * u
