"""Prioritised replay (Schaul et al. 2016, proportional variant, as Ape-X uses it): `ReplayBuffer` plus a sum tree.

- Row i has a priority p_i; a batch draws row i with probability P(i) = p_i^alpha / sum_j p_j^alpha
  (`sum_tree.SumTree`, stratified; alpha = 0 is uniform).
- New rows get the largest priority seen so far (1 at first), so each is likely drawn at least once, or,
  where the caller has them (Ape-X actors), initial priorities |TD error| + epsilon.
- Importance weights w_i = (N * P(i))^-beta / max_batch w, N the rows stored, correct the bias of the skewed
  draw in the loss; beta grows linearly from `beta_start` to 1 over `beta_updates` learner updates
  (`annealed_beta`). The normalisation is by the batch's largest weight (not the buffer's), so weights <= 1.
- After an update the sampled rows' priorities become |TD error| + epsilon (`update_priorities`).

Priorities are stored raw (before alpha) in `priority` `[capacity]`; the tree holds p^alpha. A checkpoint
keeps them as one more row-aligned replay entry (`priority`, oldest first, like the other fields); a checkpoint
without it (a buffer saved by a plain `ReplayBuffer`) loads with every row at priority 1, and a plain buffer
loading a prioritised checkpoint ignores the entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from dask_podracer.envs.devices import check_buffer_fits
from dask_podracer.agents.replay import ReplayBuffer
from dask_podracer.agents.sum_tree import SumTree


PRIORITY = "priority"
"""The replay entry a prioritised buffer's checkpoint keeps its rows' raw priorities in."""
DEFAULT_PRIORITY = 1.0
"""The priority of a row saved without one (a plain buffer's checkpoint), and of the first rows added."""


def annealed_beta(updates: int, beta_start: float, beta_updates: int) -> float:
    """beta after `updates` learner updates: `beta_start` at 0, linearly up to 1 at `beta_updates`, then 1."""
    return min(1.0, beta_start + (1.0 - beta_start) * updates / beta_updates)


class PrioritizedReplayBuffer(ReplayBuffer):
    """A `ReplayBuffer` sampled in proportion to priority^alpha, returning importance weights and row indices."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device: torch.device, alpha: float = 0.6,
                 beta_start: float = 0.4, beta_updates: int = 100_000, epsilon: float = 1e-6) -> None:
        # the rows, their float32 priorities and the float64 sum tree over a power of two of leaves, all counted
        # before any is allocated: the rows alone fitted with `buffer_size = 400000000` (17.6 GB of 23.5 GiB) and
        # the tree's 6.4 GB came on top of them on the client
        row, leaves = 2 * obs_dim + act_dim + 2, 1 << max(1, (int(capacity) - 1).bit_length())
        check_buffer_fits(int(capacity) * (row + 1) * 4 + 2 * leaves * 8, torch.device(device),
                          f"a prioritised replay buffer of hparams.buffer_size = {int(capacity):,} transitions of "
                          f"{row} float32 values, their priorities and sum tree")
        super().__init__(capacity, obs_dim, act_dim, device)
        self.alpha = float(alpha)
        self.beta_start = float(beta_start)
        self.beta_updates = int(beta_updates)
        self.epsilon = float(epsilon)
        self.tree = SumTree(self.capacity, device)
        self.priority = torch.zeros(self.capacity, dtype=torch.float32, device=device)
        self.max_priority = torch.ones((), dtype=torch.float32, device=device)  # a tensor: no host sync

    def beta(self, updates: int) -> float:
        return annealed_beta(updates, self.beta_start, self.beta_updates)

    def _set(self, rows: Tensor, priority: Tensor) -> None:
        self.priority[rows] = priority
        self.tree.update(rows, priority.to(torch.float64).pow(self.alpha))

    def add(self, obs: Tensor, action: Tensor, reward: Tensor, next_obs: Tensor, terminated: Tensor,
            priority: Tensor | None = None) -> None:
        """`ReplayBuffer.add`; the new rows get `priority` `[B]` (e.g. |TD error| from an actor; epsilon is
        added) or, without it, the largest priority so far."""
        rows = (self.position + torch.arange(obs.shape[0], device=self.device)) % self.capacity
        super().add(obs, action, reward, next_obs, terminated)
        if priority is None:
            new = self.max_priority.expand(rows.shape[0])
        else:
            new = priority.detach().to(self.device, torch.float32).abs().reshape(-1) + self.epsilon
            self.max_priority = torch.maximum(self.max_priority, new.max())
        self._set(rows, new)

    def sample(self, batch_size: int, generator: torch.Generator | None = None,
               updates: int = 0) -> dict[str, Tensor]:
        """A batch drawn by priority, with `index` `[B]` (its rows, for `update_priorities`) and `weight` `[B]`
        (importance weights at the beta of `updates` learner updates)."""
        index = self.tree.sample(batch_size, generator)
        probability = self.tree.get(index) / self.tree.total()
        weight = (self.size * probability).pow(-self.beta(updates))
        weight = (weight / weight.max()).to(torch.float32)
        batch = {k: v[index] for k, v in self.data.items()}
        batch["index"] = index
        batch["weight"] = weight
        return batch

    def update_priorities(self, index: Tensor, td_error: Tensor) -> None:
        """The rows `index` `[B]` get priority |td_error| + epsilon (`[B]`); a row drawn twice keeps its last."""
        priority = td_error.detach().to(self.device, torch.float32).abs().reshape(-1) + self.epsilon
        self.max_priority = torch.maximum(self.max_priority, priority.max())
        self._set(index.to(self.device), priority)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.size < self.capacity:
            order = torch.arange(self.size, device=self.device)
        else:
            order = (self.position + torch.arange(self.capacity, device=self.device)) % self.capacity
        state[PRIORITY] = self.priority[order]
        return state

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """`ReplayBuffer.load_state_dict`, and the rows' priorities: the saved ones, or 1 each where the
        checkpoint has none."""
        super().load_state_dict(state)
        keep = self.size
        self.priority.zero_()
        if PRIORITY in state:
            saved = state[PRIORITY]
            self.priority[:keep] = saved[saved.shape[0] - keep:].to(self.device, torch.float32)
        else:
            self.priority[:keep] = DEFAULT_PRIORITY
        self.max_priority = self.priority[:keep].max() if keep else torch.ones((), device=self.device)
        self.tree.set_all(self.priority.to(torch.float64).pow(self.alpha) * (self.priority > 0))
