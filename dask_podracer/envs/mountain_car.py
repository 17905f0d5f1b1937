"""MountainCar-v0 and MountainCarContinuous-v0 as batched torch code, matching gymnasium's arithmetic.

gymnasium's two cars differ in more than the action: the discrete one keeps its state in
float64 and clips with `np.clip`; the continuous one clips with comparisons, charges the
*unclipped* action, and stores its state as float32 after every step. Each class below
follows its twin; `dtype=torch.float64` reproduces the discrete twin exactly.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import ResetRows, TorchVecEnv


class _CarBase(TorchVecEnv):
    """What both cars share: position/velocity state `[B]`, the valley, the walls, the reset."""

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.5
    goal_velocity = 0.0
    graph_capturable = True  # sync-free on CUDA: its step replays as a graph (envs/graphed.py)

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(num_envs, device, seed, dtype)
        low = np.array([self.min_position, -self.max_speed], dtype=np.float32)
        high = np.array([self.max_position, self.max_speed], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.position = torch.zeros(num_envs, dtype=dtype, device=self.device)
        self.velocity = torch.zeros(num_envs, dtype=dtype, device=self.device)

    def _reset_where(self, rows: ResetRows) -> None:
        self.position = rows.put(self.position, self._uniform(-0.6, -0.4, rows.shape()))
        self.velocity = rows.fill(self.velocity, 0.0)

    def _move(self, velocity: Tensor) -> Tensor:
        """Clip speed, move, stop at the left wall; return terminated [B]."""
        velocity = velocity.clamp(-self.max_speed, self.max_speed)
        position = (self.position + velocity).clamp(self.min_position, self.max_position)
        # An inelastic left wall: gymnasium zeroes the velocity only when pinned there moving left.
        velocity = torch.where((position == self.min_position) & (velocity < 0), torch.zeros_like(velocity), velocity)
        self.position, self.velocity = position, velocity
        return (position >= self.goal_position) & (velocity >= self.goal_velocity)

    def _observe(self) -> Tensor:
        return torch.stack([self.position, self.velocity], dim=-1).to(torch.float32)

    def set_state(self, position: Tensor, velocity: Tensor) -> None:
        """Place every env in a given state: used to compare against gymnasium step for step."""
        self.position = torch.as_tensor(position, dtype=self.dtype, device=self.device).reshape(self.num_envs).clone()
        self.velocity = torch.as_tensor(velocity, dtype=self.dtype, device=self.device).reshape(self.num_envs).clone()


class MountainCarVecEnv(_CarBase):
    """gymnasium MountainCar-v0: push left / nothing / right (`[B]` in {0, 1, 2}), -1 per step, 200 steps."""

    force = 0.001
    gravity = 0.0025
    max_episode_steps = 200

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(num_envs, device, seed, dtype)
        self.single_action_space = gym.spaces.Discrete(3)

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        a = actions.reshape(self.num_envs).to(self.dtype)
        # Same grouping as gymnasium: v += ((a - 1) * force + cos(3x) * (-gravity)).
        velocity = self.velocity + ((a - 1) * self.force + torch.cos(3 * self.position) * (-self.gravity))
        terminated = self._move(velocity)
        return torch.full_like(velocity, -1.0), terminated


class MountainCarContinuousVecEnv(_CarBase):
    """gymnasium MountainCarContinuous-v0: force `[B, 1]` in [-1, 1], +100 at the goal (x >= 0.45), 999 steps."""

    goal_position = 0.45
    power = 0.0015
    max_episode_steps = 999

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(num_envs, device, seed, dtype)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        a = actions.reshape(self.num_envs).to(self.dtype)
        force = a.clamp(-1.0, 1.0)
        velocity = self.velocity + (force * self.power - 0.0025 * torch.cos(3 * self.position))
        terminated = self._move(velocity)
        # gymnasium keeps its state as float32 between steps, whatever precision it computed in.
        self.position = self.position.to(torch.float32).to(self.dtype)
        self.velocity = self.velocity.to(torch.float32).to(self.dtype)
        reward = torch.where(terminated, 100.0, 0.0).to(self.dtype) - a**2 * 0.1  # the unclipped action is charged
        return reward, terminated
