"""An on-device replay buffer: preallocated tensors filled as a ring, sampled uniformly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from dask_podracer.envs.devices import check_buffer_fits


class ReplayBuffer:
    """Transitions (obs, action, reward, next_obs, terminated) kept on the learner's device.

    Rows are written a batch of envs at a time, so collection never leaves the device.
    `next_obs` is the true next observation (the env's `final_obs`), and `terminated`
    excludes time-limit truncation, so targets bootstrap through truncated episodes.
    """

    fields = ("obs", "action", "reward", "next_obs", "terminated")

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device: torch.device) -> None:
        self.capacity = int(capacity)
        self.device = device
        shapes = {"obs": (obs_dim,), "action": (act_dim,), "reward": (), "next_obs": (obs_dim,), "terminated": ()}
        row = 2 * obs_dim + act_dim + 2  # float32 values a transition keeps
        # before allocating: torch zero-fills what it gets, and a buffer the allocator grants beyond the RAM
        # (`buffer_size = 2000000000`, a slip of three zeros) got the client OOM-killed in the config's check
        check_buffer_fits(self.capacity * row * 4, device, f"a replay buffer of hparams.buffer_size = "
                          f"{self.capacity:,} transitions of {row} float32 values")
        self.data = {k: torch.zeros((self.capacity, *s), dtype=torch.float32, device=device) for k, s in shapes.items()}
        self.position = 0  # next row to write
        self.size = 0

    def add(self, obs: Tensor, action: Tensor, reward: Tensor, next_obs: Tensor, terminated: Tensor) -> None:
        """Append a batch: obs [B, obs_dim], action [B, act_dim], reward [B], next_obs [B, obs_dim], terminated [B]."""
        batch = {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs, "terminated": terminated}
        n = obs.shape[0]
        if n > self.capacity:  # the ring would wrap within one write: rows written twice, one value lost at random
            raise ValueError(f"a batch of {n} transitions does not fit a replay buffer of {self.capacity}")
        rows = (self.position + torch.arange(n, device=self.device)) % self.capacity
        for k, v in batch.items():
            self.data[k][rows] = v.to(torch.float32).reshape(n, *self.data[k].shape[1:])  # no gather for the shape
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        idx = torch.randint(0, self.size, (batch_size,), device=self.device, generator=generator)
        return {k: v[idx] for k, v in self.data.items()}

    def state_dict(self) -> dict[str, Any]:
        """Only the filled rows, oldest first, so a checkpoint's size follows what was collected."""
        if self.size < self.capacity:
            order = torch.arange(self.size, device=self.device)
        else:
            order = (self.position + torch.arange(self.capacity, device=self.device)) % self.capacity
        return {k: v[order] for k, v in self.data.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        n = int(state["obs"].shape[0])
        keep = min(n, self.capacity)  # a child with a smaller buffer keeps the newest rows
        for k in self.fields:
            self.data[k][:keep] = state[k][n - keep:].to(self.device, torch.float32)
        self.size = keep
        self.position = keep % self.capacity
