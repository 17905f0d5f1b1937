"""Family trees from a store's history."""

import subprocess
import sys

import pytest

from dask_podracer.lineage import family_tree
from dask_podracer.store import PodracerStore


def rec(key, parent, score, gen, agent, lr, adopted=False, status="finished"):
    return {"key": key, "parent": parent, "score": score, "generation": gen, "agent": agent, "adopted": adopted,
            "hparams": {"actor_lr": lr, "gamma": 0.99}, "status": status}


HISTORY = [
    rec("a", None, -1500.0, 0, 0, 1e-3),
    rec("b", None, -1400.0, 0, 1, 1e-3),
    rec("c", "a", -900.0, 1, 0, 1e-3),
    rec("d", "c", -400.0, 2, 1, 1.25e-3, adopted=True),
    rec("e", "c", -700.0, 2, 0, 1e-3),
    rec("f", "d", -200.0, 3, 1, 1.25e-3),
    rec("g", "d", None, 3, 2, 1e-3, status="failed"),
]


def test_ancestors_then_descendants_with_changed_hparams():
    assert family_tree(HISTORY, "c").splitlines() == [
        "a  gen 0  score -1500.0  agent 0",
        "└── c  gen 1  score -900.0  agent 0  ◀",
        "    ├── d  gen 2  score -400.0  agent 1  adopted  actor_lr=0.00125",
        "    │   └── f  gen 3  score -200.0  agent 1",
        "    └── e  gen 2  score -700.0  agent 0",
    ]


def test_unknown_key_is_a_clear_error():
    with pytest.raises(KeyError, match="no finished segment 'zz'"):
        family_tree(HISTORY, "zz")


def test_cli_lineage(tmp_path):
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    for r in HISTORY:
        store.append_history(r)
    out = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "lineage", store.url, "f"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # a store of history alone: every checkpoint is gone, and its place in the tree comes from its record
    assert out.stdout.splitlines()[-1].endswith("f  gen 3  score -200.0  agent 1  deleted  ◀")
    bad = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "lineage", store.url, "zz"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no finished segment 'zz'" in bad.stderr and "Traceback" not in bad.stderr


def test_the_family_tree_of_a_line_longer_than_the_recursion_limit():
    history = [{"key": f"k{i:04d}", "parent": f"k{i - 1:04d}" if i else None, "status": "finished", "score": -1.0,
                "generation": i, "agent": 0, "hparams": {}} for i in range(1500)]
    lines = family_tree(history, "k0000").splitlines()  # a pool of one agent, 1,500 segments
    assert len(lines) == 1500 and lines[0].endswith("◀") and lines[-1].strip().startswith("└── k1499")
    # branches keep their order: each child's subtree before its next sibling
    history += [{"key": "k0000b", "parent": "k0000", "status": "finished", "score": -2.0, "agent": 1, "hparams": {}},
                {"key": "k0000c", "parent": "k0000b", "status": "finished", "score": -3.0, "agent": 1, "hparams": {}}]
    tree = family_tree(history[:3] + history[-2:], "k0000").splitlines()
    assert [next(w for w in line.split() if w.startswith("k0")) for line in tree] == [
        "k0000", "k0000b", "k0000c", "k0001", "k0002"]  # children sorted by key, each one's subtree first
    assert tree[1].startswith("├── k0000b") and tree[2].startswith("│   └── k0000c") and tree[3].startswith("└── k0001")
