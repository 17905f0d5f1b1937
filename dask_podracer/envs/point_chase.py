"""PointChase-v0: a point mass chasing a moving target in a box. No gymnasium twin.

A task of our own, in the spirit of the seeds' custom vectorised envs: it is cheap,
continuous, has a dense reward with a known optimum direction (straight at the target),
and terminates on success, so it exercises the termination path that Pendulum never takes.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import ResetRows, TorchVecEnv


class PointChaseVecEnv(TorchVecEnv):
    """`num_envs` 2-D point masses in [-1, 1]², each chasing a target that circles a random centre.

    Observation `[B, 8]`: own position and velocity, target offset (target − self) and target velocity.
    Action `[B, 2]`: a force, clipped to [-1, 1] per axis. Reward per step: −distance − 0.01·|force|²,
    plus `catch_bonus` on the step the distance drops below `catch_radius`, which terminates.
    """

    dt = 0.05
    accel = 4.0  # force 1 gives 4 m/s² so the chaser can outrun a target at ~0.6 m/s
    damping = 0.1  # fraction of velocity lost per step: keeps speeds bounded without a clamp
    catch_radius = 0.05
    catch_bonus = 10.0
    max_episode_steps = 200
    graph_capturable = True  # sync-free on CUDA: its step replays as a graph (envs/graphed.py)

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(num_envs, device, seed, dtype)
        high = np.array([1, 1, 10, 10, 2, 2, 2, 2], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        z = lambda *shape: torch.zeros(num_envs, *shape, dtype=dtype, device=self.device)
        self.pos, self.vel = z(2), z(2)
        self.centre, self.radius, self.phase, self.omega = z(2), z(), z(), z()

    def _target(self) -> tuple[Tensor, Tensor]:
        """Target position and velocity [B, 2]: a circle of `radius` about `centre` at `omega` rad/s."""
        direction = torch.stack([torch.cos(self.phase), torch.sin(self.phase)], dim=-1)
        tangent = torch.stack([-torch.sin(self.phase), torch.cos(self.phase)], dim=-1)
        r = self.radius.unsqueeze(-1)
        return self.centre + r * direction, r * self.omega.unsqueeze(-1) * tangent

    def _reset_where(self, rows: ResetRows) -> None:
        self.pos = rows.put(self.pos, self._uniform(-0.9, 0.9, rows.shape(2)))
        self.vel = rows.fill(self.vel, 0.0)
        self.centre = rows.put(self.centre, self._uniform(-0.4, 0.4, rows.shape(2)))
        self.radius = rows.put(self.radius, self._uniform(0.1, 0.5, rows.shape()))
        self.phase = rows.put(self.phase, self._uniform(-math.pi, math.pi, rows.shape()))
        # Either direction, at 0.5-1.5 rad/s: a target the chaser must lead, not just follow.
        speed = self._uniform(0.5, 1.5, rows.shape()) * torch.where(self._uniform(0.0, 1.0, rows.shape()) < 0.5, -1.0, 1.0)
        self.omega = rows.put(self.omega, speed.to(self.dtype))

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        force = actions.reshape(self.num_envs, 2).to(self.dtype).clamp(-1.0, 1.0)
        self.vel = self.vel * (1.0 - self.damping) + self.accel * self.dt * force
        new_pos = self.pos + self.vel * self.dt
        # Walls are inelastic: a coordinate stopped by a wall loses its velocity.
        hit = new_pos.abs() > 1.0
        self.pos = new_pos.clamp(-1.0, 1.0)
        self.vel = torch.where(hit, torch.zeros_like(self.vel), self.vel)
        self.phase = self.phase + self.omega * self.dt
        target, _ = self._target()
        distance = torch.linalg.vector_norm(target - self.pos, dim=-1)
        terminated = distance < self.catch_radius
        reward = -distance - 0.01 * (force**2).sum(-1) + self.catch_bonus * terminated.to(self.dtype)
        return reward, terminated

    def _observe(self) -> Tensor:
        target, target_vel = self._target()
        return torch.cat([self.pos, self.vel, target - self.pos, target_vel], dim=-1).to(torch.float32)
