"""A sum tree over a fixed capacity, on any torch device: set values, read the total, sample by prefix sums.

Prioritised replay (Schaul et al. 2016) draws row i with probability p_i / sum_j p_j. The tree keeps the p_i at
its leaves and every inner node holds the sum of its two children, so the total is the root, a change of n
leaves costs n * log2(capacity) work, and a draw of a value u in [0, total) walks down from the root (left if
u < left child's sum, else right with u reduced by it) to the leaf whose prefix-sum interval holds u.

Layout: `size` = capacity rounded up to a power of two; `tree[1]` is the root, node k's children are 2k and
2k + 1, leaf i is `tree[size + i]`; leaves past the capacity stay 0. Values are float64 (sums of 10^6 values
in float32 lose the small ones). Every operation is a batch of index/value tensors, one level at a time, with
no host sync, so the tree can live beside a replay buffer on a GPU. On the CPU the same code runs in numpy on
a view of the tree (`Tensor.numpy()`): a level's few small index operations cost about 1 us each there
against 5 to 10 in torch (measured: sampling 64 rows of a 50,000-row tree took 2.3 ms in torch), which is
most of the time of a prioritised replay buffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor


class SumTree:
    def __init__(self, capacity: int, device: torch.device | str = "cpu") -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.depth = max(1, (self.capacity - 1).bit_length())  # levels below the root
        self.size = 1 << self.depth
        self.tree = torch.zeros(2 * self.size, dtype=torch.float64, device=self.device)
        self._cpu = self.device.type == "cpu"
        self._nodes = self.tree.numpy() if self._cpu else self.tree  # what the operations index: a numpy view on CPU

    def _in(self, t: Tensor, dtype: torch.dtype) -> Any:
        t = t.detach().to(self.device, dtype).reshape(-1)
        return t.numpy() if self._cpu else t

    def _out(self, a: Any) -> Tensor:
        return torch.from_numpy(a) if self._cpu else a

    def total(self) -> Tensor:
        """The sum of all values (a 0-d tensor, on the tree's device)."""
        return self.tree[1]

    def get(self, index: Tensor) -> Tensor:
        """The values at `index` `[n]`."""
        return self._out(self._nodes[self.size + self._in(index, torch.long)])

    def leaves(self) -> Tensor:
        """All `capacity` values, `[capacity]` (a view)."""
        return self.tree[self.size:self.size + self.capacity]

    def update(self, index: Tensor, value: Tensor) -> None:
        """Set leaf `index[k]` to `value[k]` (`[n]` each, values >= 0). Where an index repeats, its last value wins."""
        index, value = self._in(index, torch.long), self._in(value, torch.float64)
        if index.shape[0] == 0:
            return
        # Keep each index's last occurrence: an index_put with repeated indices picks a writer at random.
        order = np.argsort(index, kind="stable") if self._cpu else torch.argsort(index, stable=True)
        sorted_index = index[order]
        last = sorted_index[1:] != sorted_index[:-1]
        last = np.append(last, True) if self._cpu else torch.cat([last, last.new_ones(1)])
        tree, nodes = self._nodes, self.size + sorted_index[last]
        tree[nodes] = value[order[last]]
        for _ in range(self.depth):  # recompute each parent from its children: repeats write the same sum
            nodes = nodes // 2
            tree[nodes] = tree[2 * nodes] + tree[2 * nodes + 1]

    def set_all(self, value: Tensor) -> None:
        """Replace every leaf: `value` `[capacity]`; the inner sums are rebuilt level by level."""
        self.tree.zero_()
        self.tree[self.size:self.size + self.capacity] = value.to(self.device, torch.float64)
        width = self.size
        while width > 1:
            level = self.tree[width:2 * width]
            self.tree[width // 2:width] = level[0::2] + level[1::2]
            width //= 2

    def find(self, prefix: Tensor) -> Tensor:
        """For each value u in `prefix` `[n]` (in [0, total)), the leaf i with sum(p_<i) <= u < sum(p_<=i)."""
        tree, u = self._nodes, self._in(prefix, torch.float64)
        nodes = 1 + 0 * u.astype(np.int64) if self._cpu else torch.ones_like(u, dtype=torch.long)
        for _ in range(self.depth):
            left = tree[2 * nodes]
            # Right when u is past the left sum, unless the right subtree is empty (u at the total by rounding).
            right = (u >= left) & (tree[2 * nodes + 1] > 0)
            u = u - left * right
            nodes = 2 * nodes + right
        return self._out(nodes - self.size)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """`[n]` leaves drawn with probability value / total, stratified: draw k is uniform in the k-th of n
        equal slices of [0, total) (as Schaul et al. do), so each leaf's expected count is n * value / total."""
        u = torch.rand(n, dtype=torch.float64, device=self.device, generator=generator)
        bounds = (torch.arange(n, dtype=torch.float64, device=self.device) + u) / n
        return self.find(bounds * self.total())
