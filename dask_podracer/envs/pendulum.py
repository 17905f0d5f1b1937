"""Pendulum-v1 as batched torch code, step for step the same as gymnasium's."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import ResetRows, TorchVecEnv


class PendulumVecEnv(TorchVecEnv):
    """`num_envs` inverted pendulums (gymnasium Pendulum-v1: g=10, 200-step episodes).

    State: theta `[B]`, theta_dot `[B]`. Observation: `[B, 3]` = cos, sin, theta_dot.
    Action: torque `[B, 1]`, clipped to [-2, 2]. Reward: -(angle² + 0.1·speed² + 0.001·torque²).
    """

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    gravity = 10.0
    mass = 1.0
    length = 1.0
    max_episode_steps = 200
    graph_capturable = True  # sync-free on CUDA: its step replays as a graph (envs/graphed.py)

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(num_envs, device, seed, dtype)
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Box(-self.max_torque, self.max_torque, (1,), np.float32)
        self.theta = torch.zeros(num_envs, dtype=dtype, device=self.device)
        self.theta_dot = torch.zeros(num_envs, dtype=dtype, device=self.device)
        self._never = torch.zeros(num_envs, dtype=torch.bool, device=self.device)  # a pendulum never terminates

    def _reset_where(self, rows: ResetRows) -> None:
        self.theta = rows.put(self.theta, self._uniform(-math.pi, math.pi, rows.shape()))
        self.theta_dot = rows.put(self.theta_dot, self._uniform(-1.0, 1.0, rows.shape()))

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        u = actions.reshape(self.num_envs).to(self.dtype).clamp(-self.max_torque, self.max_torque)
        th, thdot = self.theta, self.theta_dot
        angle = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
        costs = angle**2 + 0.1 * thdot**2 + 0.001 * u**2
        g, m, l, dt = self.gravity, self.mass, self.length, self.dt
        new_thdot = thdot + (3 * g / (2 * l) * torch.sin(th) + 3.0 / (m * l**2) * u) * dt
        new_thdot = new_thdot.clamp(-self.max_speed, self.max_speed)
        self.theta = th + new_thdot * dt
        self.theta_dot = new_thdot
        return -costs, self._never

    def _observe(self) -> Tensor:
        obs = torch.stack([torch.cos(self.theta), torch.sin(self.theta), self.theta_dot], dim=-1)
        return obs.to(torch.float32)

    def set_state(self, theta: Tensor, theta_dot: Tensor) -> None:
        """Place every env in a given state: used to compare against gymnasium step for step."""
        self.theta = torch.as_tensor(theta, dtype=self.dtype, device=self.device).reshape(self.num_envs).clone()
        self.theta_dot = torch.as_tensor(theta_dot, dtype=self.dtype, device=self.device).reshape(self.num_envs).clone()
