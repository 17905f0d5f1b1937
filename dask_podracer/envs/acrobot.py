"""Acrobot-v1 as batched torch code, step for step the same as gymnasium's ("book" dynamics, RK4)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import ResetRows, TorchVecEnv


class AcrobotVecEnv(TorchVecEnv):
    """`num_envs` two-link pendulums actuated at the elbow (gymnasium Acrobot-v1, 500-step episodes).

    State `[B, 4]`: theta1, theta2, dtheta1, dtheta2. Observation `[B, 6]`:
    cos/sin of both angles and both angular velocities. Action `[B]` in {0, 1, 2}: torque -1, 0, +1.
    Reward -1 per step, 0 on the step that lifts the tip above the bar (which terminates).
    """

    dt = 0.2
    link_length_1 = 1.0
    link_mass_1 = 1.0
    link_mass_2 = 1.0
    link_com_pos_1 = 0.5
    link_com_pos_2 = 0.5
    link_moi = 1.0
    max_vel_1 = 4 * math.pi
    max_vel_2 = 9 * math.pi
    max_episode_steps = 500
    graph_capturable = True  # sync-free on CUDA: its step replays as a graph (envs/graphed.py)

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(num_envs, device, seed, dtype)
        high = np.array([1.0, 1.0, 1.0, 1.0, self.max_vel_1, self.max_vel_2], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(3)
        self.state = torch.zeros(num_envs, 4, dtype=dtype, device=self.device)

    def _reset_where(self, rows: ResetRows) -> None:
        self.state = rows.put(self.state, self._uniform(-0.1, 0.1, rows.shape(4)))

    def _dsdt(self, s: Tensor, torque: Tensor) -> Tensor:
        """Time derivative of the state [B, 4]; the formulas and their order are gymnasium's."""
        m1, m2, l1 = self.link_mass_1, self.link_mass_2, self.link_length_1
        lc1, lc2, i1, i2, g = self.link_com_pos_1, self.link_com_pos_2, self.link_moi, self.link_moi, 9.8
        theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2) + phi2)
        ddtheta2 = ((torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2)
                    / (m2 * lc2**2 + i2 - d2**2 / d1))
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], dim=-1)

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        torque = (actions.reshape(self.num_envs).to(self.dtype) - 1.0)  # index into [-1, 0, +1]
        s, dt = self.state, self.dt
        # One RK4 step over [0, dt], exactly as gymnasium's rk4(derivs, y0, [0, dt]).
        k1 = self._dsdt(s, torque)
        k2 = self._dsdt(s + dt / 2.0 * k1, torque)
        k3 = self._dsdt(s + dt / 2.0 * k2, torque)
        k4 = self._dsdt(s + dt * k3, torque)
        ns = s + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        theta1, theta2, dtheta1, dtheta2 = ns.unbind(-1)
        self.state = torch.stack([_wrap(theta1), _wrap(theta2),
                                  dtheta1.clamp(-self.max_vel_1, self.max_vel_1),
                                  dtheta2.clamp(-self.max_vel_2, self.max_vel_2)], dim=-1)
        terminated = -torch.cos(self.state[:, 0]) - torch.cos(self.state[:, 1] + self.state[:, 0]) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(self.dtype)
        return reward, terminated

    def _observe(self) -> Tensor:
        th1, th2, dth1, dth2 = self.state.unbind(-1)
        obs = torch.stack([torch.cos(th1), torch.sin(th1), torch.cos(th2), torch.sin(th2), dth1, dth2], dim=-1)
        return obs.to(torch.float32)

    def set_state(self, state: Tensor) -> None:
        """Place every env in a given state `[B, 4]`: used to compare against gymnasium step for step."""
        self.state = torch.as_tensor(state, dtype=self.dtype, device=self.device).reshape(self.num_envs, 4).clone()


def _wrap(x: Tensor) -> Tensor:
    """Wrap angles into [-pi, pi] the way gymnasium's `wrap` does: by whole turns, only when outside."""
    turns = torch.where(x > math.pi, torch.ceil((x - math.pi) / (2 * math.pi)), torch.zeros_like(x))
    turns = torch.where(x < -math.pi, -torch.ceil((-math.pi - x) / (2 * math.pi)), turns)
    return x - turns * (2 * math.pi)
