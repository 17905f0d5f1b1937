"""Stores written by older dask_podracer versions, read and resumed by this one.

Each fixture is the tree an older version wrote, written by hand here (zarr.json files): a store of
format_version 1 as of 2026-11-22 (history blocks as `records` lists, the run state as a nested `state`
attribute that records neither how its invocation ended nor when), checkpoints of version 1 included.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np

from dask_podracer.cli import main
from dask_podracer.status import format_status, read_status
from dask_podracer.store import FORMAT_VERSION, PodracerStore

HPARAMS = {"num_envs": 4, "actor_lr": 0.001, "critic_lr": 0.001, "hidden": [64, 64]}


def _group(path: Path, attrs: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "zarr.json").write_text(json.dumps({"attributes": attrs, "zarr_format": 3, "node_type": "group"}))


def _record(i: int, parent: str | None) -> dict:
    return {"key": f"s{i:06d}-0000000{i}", "agent": 0, "group": "sac", "parent": parent, "adopted": False,
            "generation": i, "hparams": HPARAMS, "status": "finished", "score": -1700.0 + 500 * i, "rank": 1,
            "segment_env_steps": 1000, "lineage_env_steps": 1000 * (i + 1), "run_env_steps": 1000 * (i + 1),
            "wall_seconds": 8.0 * (i + 1), "train_seconds": 7.0, "metrics": {}, "device": "cpu", "error": None}


def version_1_store(tmp_path: Path) -> Path:
    """What dask_podracer at c1fd370 (2026-11-22) left after a finished 3-segment run: one checkpoint per
    segment (version 1), the board, one history block of `records`, and `run.state` without `finished`."""
    root = tmp_path / "old.zarr"
    store = PodracerStore(root, create=True)  # then made what the old version wrote
    records = [_record(i, None if i == 0 else f"s{i - 1:06d}-0000000{i - 1}") for i in range(3)]
    for r in records:
        attrs = {"algorithm": "sac", "env": "Pendulum-v1", "hparams": HPARAMS, "parent": r["parent"],
                 "generation": r["generation"], "seed": 0, "score": r["score"], "env_steps": r["lineage_env_steps"],
                 "segment_env_steps": 1000, "metrics": {}}
        store.save_checkpoint(r["key"], {"actor.body.0.weight": np.full((2, 3), r["generation"], np.float32)}, attrs)
        meta_path = root / "checkpoints" / r["key"] / "zarr.json"
        meta = json.loads(meta_path.read_text())
        meta["attributes"]["format_version"] = 1
        meta_path.write_text(json.dumps(meta))
    board = [{"key": r["key"], "score": r["score"], "env_steps": r["lineage_env_steps"], "algorithm": "sac",
              "env": "Pendulum-v1", "group": "sac", "parent": r["parent"], "generation": r["generation"],
              "hparams": HPARAMS} for r in sorted(records, key=lambda r: -r["score"])]
    _group(root, {"format": "dask_podracer", "format_version": 1})
    _group(root / "leaderboard", {"entries": board})
    _group(root / "history" / "00000000", {"records": records})
    agents = [{"id": 0, "group": "sac", "hparams": HPARAMS, "checkpoint": records[-1]["key"],
               "score": records[-1]["score"], "generation": 2, "running": None, "active": True, "segments": 3}]
    _group(root / "run", {"state": {"machine": {"counters": {"segments_completed": 3}, "agents": agents},
                                    "invocations": 1, "wall_seconds": 24.0}})
    shutil.rmtree(root / "pins")  # version 1 had no pins/ group
    return root


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def root_version(root: Path) -> int:
    return json.loads((root / "zarr.json").read_text())["attributes"]["format_version"]


def test_a_version_1_store_is_read_as_written_and_reading_changes_nothing(tmp_path, capsys):
    root = version_1_store(tmp_path)
    before = tree_digest(root)
    store = PodracerStore(root)
    assert [r["key"] for r in store.read_history()] == ["s000000-00000000", "s000001-00000001", "s000002-00000002"]
    assert store.read_leaderboard()[0]["key"] == "s000002-00000002"
    assert store.read_run_state()["invocations"] == 1
    assert store.checkpoint_keys() == ["s000000-00000000", "s000001-00000001", "s000002-00000002"]
    assert store.load_checkpoint("s000002-00000002").arrays["actor.body.0.weight"][0, 0] == 2
    read_status(str(root))
    for argv in (["status", str(root)], ["leaderboard", str(root)], ["lineage", str(root), "s000002-00000002"]):
        assert main(argv) == 0, argv
    capsys.readouterr()
    assert tree_digest(root) == before  # no read upgrades the store
    assert root_version(root) == 1


def test_this_version_writing_to_a_version_1_store_raises_its_version_first(tmp_path):
    """A resumed version 1 store got this version's history blocks (`records_json`) under a root that still said
    version 1: dask_podracer 1 then opened it, read an empty history, and its next append would replace the block
    it could not read. Its root now says this version, which a version 1 reader refuses in one line."""
    root = version_1_store(tmp_path)
    store = PodracerStore(root, create=True)  # as `podracer train` opens it: opening still writes nothing new
    assert root_version(root) == 1
    store.extend_history([_record(3, "s000002-00000002")])
    assert root_version(root) == FORMAT_VERSION
    assert json.loads((root / "zarr.json").read_text())["attributes"]["format"] == "dask_podracer"
    assert [r["key"] for r in PodracerStore(root).read_history()][-2:] == ["s000002-00000002", "s000003-00000003"]
    for write in (lambda s: s.write_run_state({"invocations": 2}), lambda s: s.write_leaderboard([]),
                  lambda s: s.save_checkpoint("s000009-00000009", {"w": np.zeros(2)}, {"score": 0.0})):
        other = version_1_store(tmp_path / str(id(write)))
        write(PodracerStore(other))
        assert root_version(other) == FORMAT_VERSION


def test_the_status_of_a_state_that_does_not_record_how_it_ended(tmp_path):
    """Before 2026-11-24 the run state recorded neither `finished` nor when it was written: status said such a
    store's client was killed and that the next run continues its budget; a resume starts a new one."""
    status = read_status(str(version_1_store(tmp_path)))
    assert status.state == "unrecorded"
    line = format_status(status).splitlines()[1]
    assert "killed" not in line and "continues its budget" not in line
    assert "not running" in line and "starts a new budget" in line and "1 invocation, 24.0s of run time" in line
