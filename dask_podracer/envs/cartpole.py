"""CartPole-v1 as batched torch code, step for step the same as gymnasium's (euler integrator)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import TorchVecEnv


class CartPoleVecEnv(TorchVecEnv):
    """`num_envs` carts with a pole (gymnasium CartPole-v1: 500-step episodes, reward 1 per step).

    State: x, x_dot, theta, theta_dot, each `[B]`. Observation: `[B, 4]` in that order.
    Action: `[B]` (or `[B, 1]`) in {0, 1}: push left or right with force 10. Reward: 1 for
    every step, the terminating one included. Terminates when |x| > 2.4 or |theta| > 12°.
    """

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    max_episode_steps = 500

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(num_envs, device, seed, dtype)
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.state = torch.zeros(num_envs, 4, dtype=dtype, device=self.device)

    def _reset_where(self, mask: Tensor) -> None:
        fresh = self._uniform(-0.05, 0.05, (self.num_envs, 4))
        self.state = torch.where(mask.unsqueeze(-1), fresh, self.state)

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        push_right = actions.reshape(self.num_envs) == 1
        force = torch.where(push_right, self.force_mag, -self.force_mag).to(self.dtype)
        x, x_dot, theta, theta_dot = self.state.unbind(-1)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot.square() * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.state = torch.stack([x, x_dot, theta, theta_dot], dim=-1)
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold_radians)
        return torch.ones(self.num_envs, dtype=self.dtype, device=self.device), terminated

    def _observe(self) -> Tensor:
        return self.state.to(torch.float32)

    def set_state(self, state: Tensor) -> None:
        """Place every env in a given state `[B, 4]`: used to compare against gymnasium step for step."""
        self.state = torch.as_tensor(state, dtype=self.dtype, device=self.device).reshape(self.num_envs, 4).clone()
