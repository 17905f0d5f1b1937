"""CartPole-v1 as batched array code (torch, or numpy over the same memory for small float32 CPU batches),
step for step the same as gymnasium's (euler integrator)."""

from __future__ import annotations

import math
from types import ModuleType

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import ResetRows, TorchVecEnv, array_namespace, as_arrays, as_tensor, constants


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
    graph_capturable = True  # sync-free on CUDA: its step replays as a graph (envs/graphed.py)

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(num_envs, device, seed, dtype)
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.state = torch.zeros(num_envs, 4, dtype=dtype, device=self.device)
        self._scratch = torch.empty(5, num_envs, dtype=dtype, device=self.device)
        self._k = constants(self._xp, dtype, self.device, **{name: getattr(self, name) for name in (
            "force_mag", "polemass_length", "total_mass", "masspole", "length", "gravity", "tau",
            "x_threshold", "theta_threshold_radians")}, two_force_mag=2 * self.force_mag, four_thirds=4.0 / 3.0)

    @property
    def _xp(self) -> ModuleType:  # not an attribute: a module cannot be deep-copied, and the checker copies envs
        return array_namespace(self.device, self.dtype, self.num_envs)

    def _reset_where(self, rows: ResetRows) -> None:
        self.state = rows.put(self.state, self._uniform(-0.05, 0.05, rows.shape(4)))

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        # gymnasium's arithmetic operation for operation (the same products, sums and order, so
        # float64 matches it), in numpy or torch (array_namespace), with in-place ops on kept buffers
        # and the four Euler updates as two ops on [B, 4]: at 16k envs on a CPU a step costs passes
        # over memory, not arithmetic.
        xp, k = self._xp, self._k
        new_tensor = torch.empty_like(self.state)
        # the columns, as [4, B] views (numpy and torch alike); temporaries in buffers kept between steps
        state, new, action, scratch = as_arrays(xp, self.state.T, new_tensor.T, actions.reshape(self.num_envs),
                                                self._scratch)
        theta, theta_dot = state[2], state[3]
        costheta, sintheta, temp, denom, pull = scratch
        force = xp.multiply(action == 1, k.two_force_mag, out=pull)  # anything else pushes left
        force -= k.force_mag  # exactly ±force_mag
        sintheta[...] = theta  # a contiguous copy: cos and sin run twice as fast on it as on a column
        xp.cos(sintheta, out=costheta)
        xp.sin(sintheta, out=sintheta)
        # temp = (force + polemass_length * theta_dot² * sintheta) / total_mass
        xp.multiply(theta_dot, theta_dot, out=temp)
        temp *= k.polemass_length
        temp *= sintheta
        temp += force
        temp /= k.total_mass
        # thetaacc = (gravity * sintheta - costheta * temp) / (length * (4/3 - masspole * costheta² / total_mass))
        xp.multiply(costheta, costheta, out=denom)
        denom *= k.masspole
        denom /= k.total_mass
        xp.subtract(k.four_thirds, denom, out=denom)
        denom *= k.length
        # `new` holds d(state)/dt first: x_dot, xacc, theta_dot, thetaacc
        sintheta *= k.gravity
        sintheta -= xp.multiply(costheta, temp, out=pull)
        thetaacc = xp.divide(sintheta, denom, out=new[3])
        # xacc = temp - polemass_length * thetaacc * costheta / total_mass
        xp.multiply(thetaacc, k.polemass_length, out=pull)
        pull *= costheta
        pull /= k.total_mass
        xp.subtract(temp, pull, out=new[1])
        new[0::2] = state[1::2]
        new *= k.tau  # Euler: state + tau * d(state)/dt
        new += state
        terminated = (xp.abs(new[0]) > k.x_threshold) | (xp.abs(new[2]) > k.theta_threshold_radians)
        self.state = new_tensor
        return torch.ones(self.num_envs, dtype=self.dtype, device=self.device), as_tensor(xp, terminated)

    def _observe(self) -> Tensor:
        return self.state.to(torch.float32, copy=True)

    def set_state(self, state: Tensor) -> None:
        """Place every env in a given state `[B, 4]`: used to compare against gymnasium step for step."""
        self.state = torch.as_tensor(state, dtype=self.dtype, device=self.device).reshape(self.num_envs, 4).clone()
