"""The sum tree (agents/sum_tree.py) against brute force: totals, prefix sums, updates, sampling frequencies."""

import numpy as np
import pytest
import torch

from dask_podracer.agents.sum_tree import SumTree


def brute_find(values: np.ndarray, u: float) -> int:
    """The leaf whose prefix-sum interval [sum(p_<i), sum(p_<=i)) holds u."""
    return int(np.searchsorted(np.cumsum(values), u, side="right"))


@pytest.mark.parametrize("capacity", [1, 2, 5, 8, 13, 100])
def test_total_and_prefix_sums_match_brute_force(capacity):
    g = torch.Generator().manual_seed(capacity)
    # Multiples of 1/8: every sum is exact, so the intervals' ends can be compared exactly. About a fifth are
    # 0: empty rows, which must never be found.
    values = torch.randint(0, 6, (capacity,), generator=g).double() / 8
    values[0] += 0.125  # never all zero
    tree = SumTree(capacity)
    tree.update(torch.arange(capacity), values)
    assert float(tree.total()) == pytest.approx(float(values.sum()))
    torch.testing.assert_close(tree.leaves(), values)
    cumsum = np.cumsum(values.numpy())
    # Random points, and every interval's two ends (the left end belongs to the leaf, the right one does not).
    points = [*torch.rand(200, generator=g, dtype=torch.float64).mul(float(tree.total())).tolist(), 0.0,
              *cumsum[:-1].tolist()]
    found = tree.find(torch.tensor(points, dtype=torch.float64)).tolist()
    assert found == [brute_find(values.numpy(), u) for u in points]
    assert all(values[i] > 0 for i in found)


def test_updates_keep_the_sums_and_the_last_of_a_repeated_index_wins():
    g = torch.Generator().manual_seed(0)
    capacity = 37
    tree, shadow = SumTree(capacity), np.zeros(capacity)
    for _ in range(50):
        index = torch.randint(0, capacity, (10,), generator=g)
        value = torch.rand(10, generator=g, dtype=torch.float64)
        tree.update(index, value)
        for i, v in zip(index.tolist(), value.tolist()):  # in order: the last write of an index stays
            shadow[i] = v
        np.testing.assert_allclose(tree.leaves().numpy(), shadow)
        assert float(tree.total()) == pytest.approx(shadow.sum())
        # Every inner node is the sum of its children.
        inner = tree.tree[1:tree.size]
        nodes = torch.arange(1, tree.size)
        torch.testing.assert_close(inner, tree.tree[2 * nodes] + tree.tree[2 * nodes + 1])
    torch.testing.assert_close(tree.get(torch.tensor([3, 3, 0])), torch.tensor(shadow[[3, 3, 0]]))


def test_set_all_equals_updates():
    values = torch.rand(21, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a, b = SumTree(21), SumTree(21)
    a.set_all(values)
    b.update(torch.arange(21), values)
    torch.testing.assert_close(a.tree, b.tree)


def test_sampling_frequencies_follow_the_values():
    values = torch.tensor([0.0, 1.0, 2.0, 3.0, 0.0, 4.0, 0.5, 9.5], dtype=torch.float64)
    tree = SumTree(len(values))
    tree.update(torch.arange(len(values)), values)
    g = torch.Generator().manual_seed(2)
    draws = torch.cat([tree.sample(100, generator=g) for _ in range(400)])  # 40,000 draws
    counts = torch.bincount(draws, minlength=len(values)).double()
    expected = values / values.sum() * len(draws)
    assert counts[0] == counts[4] == 0  # empty rows are never drawn
    # Stratified draws vary less than independent ones; 5 binomial standard deviations is a loose bound.
    sd = (expected * (1 - values / values.sum())).sqrt()
    assert torch.all((counts - expected).abs() <= 5 * sd + 1), (counts, expected)


def test_a_stratified_batch_covers_the_slices():
    # With equal values and a batch as large as the tree, slice k of [0, total) holds exactly leaf k.
    tree = SumTree(16)
    tree.update(torch.arange(16), torch.ones(16, dtype=torch.float64))
    assert tree.sample(16, generator=torch.Generator().manual_seed(3)).tolist() == list(range(16))


def test_a_draw_at_the_total_lands_on_a_stored_row():
    # Rounding can put u at (or just past) the total; it must still find a non-empty leaf, not padding.
    tree = SumTree(5)  # 8 leaves, 3 of them padding
    tree.update(torch.arange(5), torch.tensor([0.1, 0.2, 0.3, 0.0, 0.0], dtype=torch.float64))
    leaf = tree.find(torch.tensor([float(tree.total()), float(tree.total()) * (1 + 1e-12)], dtype=torch.float64))
    assert leaf.tolist() == [2, 2]


def test_refuses_no_capacity():
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        SumTree(0)


def test_the_torch_path_of_gpus_agrees_with_the_numpy_path_of_cpus():
    # On a GPU the tree runs its operations in torch; on the CPU in numpy. Run the torch code here on the CPU.
    g = torch.Generator().manual_seed(4)
    numpy_tree, torch_tree = SumTree(50), SumTree(50)
    torch_tree._cpu, torch_tree._nodes = False, torch_tree.tree
    for _ in range(20):
        index = torch.randint(0, 50, (16,), generator=g)
        value = torch.rand(16, generator=g, dtype=torch.float64)
        numpy_tree.update(index, value)
        torch_tree.update(index, value)
    torch.testing.assert_close(torch_tree.tree, numpy_tree.tree)
    u = torch.rand(500, generator=g, dtype=torch.float64) * numpy_tree.total()
    assert torch.equal(torch_tree.find(u), numpy_tree.find(u))
    assert torch.equal(torch_tree.get(index), numpy_tree.get(index))
