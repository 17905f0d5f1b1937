"""Tests of dask_podracer.store against real Zarr stores on disk (no mocks)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr

from dask_podracer.store import (
    FORMAT_VERSION,
    Checkpoint,
    CheckpointNotFound,
    ChecksumError,
    PodracerStore,
    StoreError,
)
from dask_podracer.store.format import escape_name, unescape_name
from dask_podracer.store import tables

REPO = Path(__file__).resolve().parents[1]


def sample_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "actor.net.0.weight": rng.standard_normal((4, 3)).astype(np.float32),
        "actor.net.0.bias": rng.standard_normal(4).astype(np.float64),
        "actor_optim.state.0.step": np.array(7, dtype=np.int64),  # 0-d
        "critic.log_alpha": np.array(-0.25, dtype=np.float32),  # 0-d float
        "counts": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
        "mask": np.array([True, False, True]),
        "pixels": np.arange(256, dtype=np.uint8).reshape(16, 16),
        "empty": np.zeros((0, 5), dtype=np.float32),
        "empty_flat": np.zeros(0, dtype=np.int64),
        "zeros": np.zeros(8, dtype=np.float64),  # an all-fill-value chunk must still round-trip
    }


def sample_attrs() -> dict:
    return {
        "algorithm": "SAC",
        "env": {"id": "Pendulum-v1", "num_envs": 1024},
        "hparams": {"lr": 3e-4, "gamma": 0.99, "tau": None, "use_per": False},
        "lineage": ["seed-0", "seed-0.1"],
        "score": float("nan"),
        "best": float("inf"),
    }


def digest_of(arrays: dict[str, np.ndarray]) -> str:
    """Independent of the store's own checksum: sha256 over names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = arrays[name]
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def as_json(value: object) -> str:
    # NaN != NaN, so compare JSON text instead of values
    return json.dumps(value, sort_keys=True, allow_nan=True)


def assert_arrays_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, a in want.items():
        b = got[name]
        assert isinstance(b, np.ndarray), name
        assert b.dtype == a.dtype, name
        assert b.shape == a.shape, name
        assert np.array_equal(b, a), name


@pytest.fixture
def store(tmp_path: Path) -> PodracerStore:
    return PodracerStore(tmp_path / "run.zarr", create=True)


# -- opening ---------------------------------------------------------------------------------------


def test_create_open_reopen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    created = PodracerStore("t.zarr", create=True)
    assert created.url == str(tmp_path / "t.zarr")  # resolved to an absolute path
    assert PodracerStore.exists(created.url)
    root = zarr.open_group(created.url, mode="r")
    assert root.attrs.asdict() == {"format": "dask_podracer", "format_version": FORMAT_VERSION}
    assert sorted(root.group_keys()) == ["checkpoints", "history", "leaderboard", "pins", "run"]

    created.save_checkpoint("a", {"x": np.ones(2)}, {})
    reopened = PodracerStore(created.url)
    assert reopened.checkpoint_keys() == ["a"]
    again = PodracerStore(created.url, create=True)  # create=True on an existing store just opens it
    assert again.checkpoint_keys() == ["a"]
    assert PodracerStore(f"file://{created.url}").url == created.url


def test_missing_path_without_create_is_refused_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "run.zarr"
    with pytest.raises(StoreError, match="no podracer store at") as err:
        PodracerStore(missing)
    assert str(missing) in str(err.value)
    assert not missing.exists() and not missing.parent.exists()
    assert not PodracerStore.exists(missing)
    assert not missing.exists()


def test_empty_directory_is_refused_without_create_and_used_with_it(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no podracer store"):
        PodracerStore(tmp_path)
    assert PodracerStore.exists(PodracerStore(tmp_path, create=True).url)


def test_newer_format_version_is_refused(store: PodracerStore) -> None:
    meta_path = Path(store.url) / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["attributes"]["format_version"] = 99
    meta_path.write_text(json.dumps(meta))
    for create in (False, True):
        with pytest.raises(StoreError) as err:
            PodracerStore(store.url, create=create)
        message = str(err.value)
        assert "99" in message and f"format_version {FORMAT_VERSION}" in message and store.url in message
        assert "\n" not in message
    assert PodracerStore.exists(store.url)  # still ours, just too new


def test_foreign_zarr_group_and_plain_directory_are_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.zarr"
    zarr.open_group(str(foreign), mode="w", attributes={"format": "something-else"})
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not a store")
    for path in (foreign, plain):
        for create in (False, True):
            with pytest.raises(StoreError, match="not a podracer store") as err:
                PodracerStore(path, create=create)
            assert str(path) in str(err.value)
        assert not PodracerStore.exists(path)
    assert sorted(p.name for p in plain.iterdir()) == ["notes.txt"]  # nothing written into it


def test_only_a_bare_store_is_removed(tmp_path: Path) -> None:
    bare = PodracerStore(tmp_path / "bare.zarr", create=True)
    assert bare.remove_if_bare() and not (tmp_path / "bare.zarr").exists()
    keepers = {"state": lambda s: s.write_run_state({"segments": 1}), "history": lambda s: s.append_history({"a": 1}),
               "board": lambda s: s.write_leaderboard([{"key": "k", "score": 1.0}]),
               "checkpoint": lambda s: s.save_checkpoint("k", {"w": np.zeros(2)}, {})}
    for name, record in keepers.items():
        store = PodracerStore(tmp_path / f"{name}.zarr", create=True)
        record(store)
        assert not store.remove_if_bare(), name
        assert PodracerStore.exists(store.url), name
    memory = PodracerStore(f"memory://{uuid.uuid4().hex}.zarr", create=True)
    assert memory.remove_if_bare() and not PodracerStore.exists(memory.url)


def test_store_pickles_as_its_url(store: PodracerStore) -> None:
    store.save_checkpoint("a", {"x": np.arange(3)}, {})
    clone = pickle.loads(pickle.dumps(store))
    assert clone.url == store.url
    assert clone.checkpoint_keys() == ["a"]


# -- checkpoints -----------------------------------------------------------------------------------


def test_checkpoint_round_trip_all_dtypes(store: PodracerStore) -> None:
    arrays, attrs = sample_arrays(), sample_attrs()
    digest = store.save_checkpoint("seg-0001.a_b", arrays, attrs)
    assert len(digest) == 64 and int(digest, 16) >= 0

    loaded = store.load_checkpoint("seg-0001.a_b")
    assert isinstance(loaded, Checkpoint) and loaded.key == "seg-0001.a_b"
    assert_arrays_equal(loaded.arrays, arrays)
    assert as_json(loaded.attrs) == as_json(attrs)
    assert as_json(store.checkpoint_attrs("seg-0001.a_b")) == as_json(attrs)

    published = zarr.open_group(store.url, path="checkpoints/seg-0001.a_b", mode="r").attrs.asdict()
    assert published["complete"] is True and published["checksum"] == digest
    assert published["format_version"] == FORMAT_VERSION and published["saved_at"]


def test_array_names_are_escaped_reversibly(store: PodracerStore) -> None:
    names = ["a/b", "x-y", "100%", "ü.weight", ".", "..", "zarr.json", "__meta", "c", "-2F", "sp ace"]
    arrays = {name: np.full(2, i, dtype=np.int32) for i, name in enumerate(names)}
    store.save_checkpoint("names", arrays, {})
    assert_arrays_equal(store.load_checkpoint("names").arrays, arrays)
    for name in names:
        node = escape_name(name)
        assert unescape_name(node) == name
        assert all(c.isascii() and (c.isalnum() or c in "_.-") for c in node), node
        assert node not in (".", "..", "zarr.json") and not node.startswith("__")
    assert escape_name("actor.net.0.weight") == "actor.net.0.weight"  # typical names stay readable


def test_round_trip_in_a_fresh_process(store: PodracerStore) -> None:
    arrays, attrs = sample_arrays(), sample_attrs()
    store.save_checkpoint("ckpt", arrays, attrs)
    script = (
        "import hashlib, json, sys, numpy as np\n"
        "from dask_podracer.store import PodracerStore\n"
        "c = PodracerStore(sys.argv[1]).load_checkpoint('ckpt')\n"
        "h = hashlib.sha256()\n"
        "for n in sorted(c.arrays):\n"
        "    a = c.arrays[n]\n"
        "    h.update(f'{n}|{a.dtype.str}|{a.shape}|'.encode())\n"
        "    h.update(np.ascontiguousarray(a).tobytes())\n"
        "print(json.dumps({'digest': h.hexdigest(), 'attrs': c.attrs}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", script, store.url], capture_output=True, text=True, env=env, check=True, timeout=60
    )
    result = json.loads(out.stdout)
    assert result["digest"] == digest_of(arrays)
    assert as_json(result["attrs"]) == as_json(attrs)


def test_corrupted_chunk_raises_checksum_error(store: PodracerStore) -> None:
    store.save_checkpoint("bad", sample_arrays(), sample_attrs())
    chunk = Path(store.url, "checkpoints", "bad", "actor.net.0.weight", "c", "0", "0")
    data = bytearray(chunk.read_bytes())
    data[5] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="'bad'"):
        store.load_checkpoint("bad")
    assert store.has_checkpoint("bad")  # still listed: corruption is loud at load, not hidden


def test_truncated_chunk_and_missing_array_raise_checksum_error(store: PodracerStore) -> None:
    store.save_checkpoint("t", {"w": np.arange(10.0)}, {})
    chunk = Path(store.url, "checkpoints", "t", "w", "c", "0")
    chunk.write_bytes(chunk.read_bytes()[:7])
    with pytest.raises(ChecksumError, match="'w'"):
        store.load_checkpoint("t")
    store.save_checkpoint("m", {"w": np.arange(3.0), "v": np.ones(2)}, {})
    for path in sorted(Path(store.url, "checkpoints", "m", "v").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    with pytest.raises(ChecksumError, match="lacks array 'v'"):
        store.load_checkpoint("m")


def test_edited_attrs_raise_checksum_error(store: PodracerStore) -> None:
    store.save_checkpoint("e", {"w": np.ones(3)}, {"hparams": {"lr": 0.001}})
    meta_path = Path(store.url, "checkpoints", "e", "zarr.json")
    meta = json.loads(meta_path.read_text())
    meta["attributes"]["attrs"]["hparams"]["lr"] = 0.1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ChecksumError):
        store.load_checkpoint("e")


def test_unpublished_checkpoint_is_invisible(store: PodracerStore) -> None:
    store.save_checkpoint("done", {"w": np.ones(2)}, {})
    store._write_arrays("torn", {"w": np.ones(2), "b": np.zeros(3)})
    assert Path(store.url, "checkpoints", "torn", "w", "zarr.json").exists()  # the data is there...
    assert not store.has_checkpoint("torn")  # ...but not published
    assert store.checkpoint_keys() == ["done"]
    with pytest.raises(CheckpointNotFound, match="'torn'"):
        store.load_checkpoint("torn")
    with pytest.raises(CheckpointNotFound, match="'torn'"):
        store.checkpoint_attrs("torn")
    Path(store.url, "checkpoints", "crashed-early").mkdir()  # a directory without any metadata
    assert store.checkpoint_keys() == ["done"]

    store.save_checkpoint("torn", {"w": np.full(2, 5.0)}, {"retry": 1})  # a leftover is replaced
    loaded = store.load_checkpoint("torn")
    assert_arrays_equal(loaded.arrays, {"w": np.full(2, 5.0)})
    assert store.checkpoint_keys() == ["done", "torn"]


def test_missing_checkpoint(store: PodracerStore) -> None:
    assert not store.has_checkpoint("ghost")
    with pytest.raises(CheckpointNotFound, match="'ghost'"):
        store.load_checkpoint("ghost")


def test_overwriting_a_complete_checkpoint_is_refused(store: PodracerStore) -> None:
    store.save_checkpoint("k", {"w": np.ones(2)}, {"v": 1})
    with pytest.raises(StoreError, match="'k' already exists"):
        store.save_checkpoint("k", {"w": np.zeros(2)}, {"v": 2})
    loaded = store.load_checkpoint("k")
    assert_arrays_equal(loaded.arrays, {"w": np.ones(2)})
    assert loaded.attrs == {"v": 1}


BAD_KEYS = ["", "a/b", "..", ".", "zarr.json", "__x", "a b", "ü", "x" * 201]


def test_bad_keys_are_refused(store: PodracerStore) -> None:
    for key in BAD_KEYS:
        for call in (
            lambda key=key: store.save_checkpoint(key, {"w": np.ones(1)}, {}),
            lambda key=key: store.load_checkpoint(key),
            lambda key=key: store.has_checkpoint(key),
            lambda key=key: store.checkpoint_attrs(key),
        ):
            with pytest.raises(ValueError, match="invalid checkpoint key") as err:
                call()
            assert repr(key) in str(err.value)
    assert sorted(p.name for p in Path(store.url, "checkpoints").iterdir()) == ["zarr.json"]


def test_bad_arrays_and_attrs_are_refused(store: PodracerStore) -> None:
    with pytest.raises(ValueError, match="unsupported dtype"):
        store.save_checkpoint("k", {"w": np.array(["a"], dtype=object)}, {})
    with pytest.raises(ValueError, match="not JSON serialisable"):
        store.save_checkpoint("k", {"w": np.ones(1)}, {"f": object()})
    with pytest.raises(ValueError, match="invalid array name"):
        store.save_checkpoint("k", {"": np.ones(1)}, {})
    assert not store.has_checkpoint("k")
    # numpy scalars in metadata are common (metrics): they are stored as plain JSON numbers
    store.save_checkpoint("k", {"w": np.ones(1)}, {"score": np.float32(1.5), "steps": np.int64(3)})
    assert store.checkpoint_attrs("k") == {"score": 1.5, "steps": 3}


def test_checkpoint_keys_are_sorted(store: PodracerStore) -> None:
    for key in ["b", "a", "c.1", "c-0"]:
        store.save_checkpoint(key, {"w": np.ones(1)}, {"key": key})
    assert store.checkpoint_keys() == ["a", "b", "c-0", "c.1"]
    assert store.checkpoint_attrs("c.1") == {"key": "c.1"}


def test_concurrent_writers_in_processes_leave_shared_metadata_alone(store: PodracerStore) -> None:
    shared = [Path(store.url, "zarr.json"), Path(store.url, "checkpoints", "zarr.json")]
    before = [(p.stat().st_ino, p.read_bytes()) for p in shared]
    script = (
        "import sys, numpy as np\n"
        "from dask_podracer.store import PodracerStore\n"
        "s = PodracerStore(sys.argv[1])\n"
        "for i in range(5):\n"
        "    s.save_checkpoint(f'w{sys.argv[2]}-{i}', {'w': np.full((64, 64), i, np.float32)}, {'i': i})\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    workers = range(2)  # the machine running the tests may have two cores: keep it quick
    procs = [subprocess.Popen([sys.executable, "-c", script, store.url, str(w)], env=env) for w in workers]
    rounds = 0
    while rounds == 0 or (any(p.poll() is None for p in procs) and rounds < 2000):  # until workers finish
        store.write_leaderboard([{"key": "x", "score": 0.0, "round": rounds}])  # the orchestrator writes meanwhile
        assert set(store.checkpoint_keys()) <= {f"w{w}-{i}" for w in workers for i in range(5)}
        rounds += 1
    assert [p.wait(timeout=60) for p in procs] == [0 for _ in workers]
    assert store.read_leaderboard() == [{"key": "x", "score": 0.0, "round": rounds - 1}]
    keys = store.checkpoint_keys()
    assert keys == sorted(f"w{w}-{i}" for w in workers for i in range(5))
    for key in keys:
        assert store.load_checkpoint(key).attrs["i"] == int(key[-1])
    assert [(p.stat().st_ino, p.read_bytes()) for p in shared] == before


def test_memory_url_round_trip() -> None:
    url = f"memory://podracer-{uuid.uuid4().hex}"
    with pytest.raises(StoreError, match="no podracer store"):
        PodracerStore(url)
    store = PodracerStore(url, create=True)
    assert store.url == url and PodracerStore.exists(url)
    arrays = sample_arrays()
    store.save_checkpoint("m", arrays, {"a": 1})
    assert_arrays_equal(PodracerStore(url).load_checkpoint("m").arrays, arrays)
    store.append_history({"n": 1})
    assert PodracerStore(url).read_history() == [{"n": 1}]


# -- leaderboard, history, run state --------------------------------------------------------------


def test_leaderboard_write_read_replace(store: PodracerStore) -> None:
    assert store.read_leaderboard() == []
    entries = [
        {"rank": 0, "key": "b", "score": 12.5, "hparams": {"lr": 1e-3}},
        {"rank": 1, "key": "a", "score": float("nan"), "parent": None},
    ]
    store.write_leaderboard(entries)
    assert as_json(store.read_leaderboard()) == as_json(entries)
    replaced = [{"rank": 0, "key": "c", "score": float("-inf")}]
    store.write_leaderboard(replaced)
    assert as_json(PodracerStore(store.url).read_leaderboard()) == as_json(replaced)
    store.write_leaderboard([])
    assert store.read_leaderboard() == []
    with pytest.raises(TypeError):
        store.write_leaderboard({"key": "not a list"})


def test_history_append_order_survives_reopen(store: PodracerStore, monkeypatch: pytest.MonkeyPatch) -> None:
    assert store.read_history() == []
    monkeypatch.setattr(tables, "HISTORY_BLOCK", 4)  # small blocks: cross boundaries in few appends
    n = 2 * tables.HISTORY_BLOCK + 3
    for i in range(n):
        store.append_history({"segment": i, "status": "ok" if i % 3 else "failed", "score": i / 2})
    reopened = PodracerStore(store.url)
    assert [r["segment"] for r in reopened.read_history()] == list(range(n))
    blocks = sorted(p.name for p in Path(store.url, "history").iterdir() if p.is_dir())
    assert blocks == ["00000000", "00000001", "00000002"]
    reopened.append_history({"segment": n})
    assert store.read_history()[-1] == {"segment": n}


def test_run_state_round_trip(store: PodracerStore) -> None:
    assert store.read_run_state() == {}
    state = {"budget_left_s": 120.5, "next_id": 42, "in_flight": ["w1-3", "w2-0"], "stopped": False}
    store.write_run_state(state)
    assert PodracerStore(store.url).read_run_state() == state
    store.write_run_state({"next_id": 43})
    assert store.read_run_state() == {"next_id": 43}  # replaced, not merged


def test_a_checkpoint_of_a_newer_format_is_refused_and_left_alone(store: PodracerStore) -> None:
    store.save_checkpoint("new", sample_arrays(), sample_attrs())
    meta_path = Path(store.url) / "checkpoints" / "new" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["attributes"]["format_version"] = 99
    meta_path.write_text(json.dumps(meta))
    before = meta_path.read_bytes()
    with pytest.raises(StoreError) as err:
        store.load_checkpoint("new")
    message = str(err.value)
    assert "'new'" in message and "format_version 99, newer than" in message and f"up to {FORMAT_VERSION}" in message
    assert "\n" not in message
    assert store.checkpoint_keys() == []  # listed nowhere, so nothing picks it as a parent
    assert meta_path.read_bytes() == before  # and not touched


def test_a_store_holds_no_pickle_and_loading_runs_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays of plain numeric dtypes with no codec but bytes, JSON everywhere else: nothing that unpickles."""
    import torch

    from dask_podracer.train import SegmentSpec, load_agent, run_segment

    url = str(tmp_path / "real.zarr")
    PodracerStore(url, create=True)
    run_segment(SegmentSpec(key="k0", store_url=url, env="Pendulum-v1", algorithm="sac", seed=0, env_step_budget=64,
                            eval_episodes=2, hparams={"hidden": [8, 8], "num_envs": 2, "learning_starts": 16,
                                                      "batch_size": 8}))
    metadata = list(Path(url).rglob("zarr.json"))
    assert len(metadata) > 20
    for path in metadata:
        meta = json.loads(path.read_text())  # every metadata file is JSON
        if meta["node_type"] == "array":
            assert meta["data_type"] in {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                         "uint64", "float16", "float32", "float64"}, path
            assert [c["name"] for c in meta["codecs"]] == ["bytes"], path
    assert not [p for p in Path(url).rglob("*") if p.suffix in {".pkl", ".pickle", ".pt", ".pth"}]

    def refuse(*args, **kwargs):
        raise AssertionError("loading a checkpoint unpickled something")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    agent = load_agent(PodracerStore(url), "k0")
    assert agent.algorithm == "sac"


def test_a_version_1_store_and_its_checkpoints_are_still_read(store: PodracerStore) -> None:
    store.save_checkpoint("old", sample_arrays(), sample_attrs())
    for path in (Path(store.url) / "zarr.json", Path(store.url) / "checkpoints" / "old" / "zarr.json"):
        meta = json.loads(path.read_text())
        meta["attributes"]["format_version"] = 1
        path.write_text(json.dumps(meta))
    reopened = PodracerStore(store.url, create=True)
    assert reopened.checkpoint_keys() == ["old"]
    assert_arrays_equal(reopened.load_checkpoint("old").arrays, sample_arrays())


def test_a_local_store_is_held_by_one_holder_at_a_time_and_freed_however_it_ends(tmp_path):
    store = PodracerStore(tmp_path / "held.zarr", create=True)
    with store.hold_run():
        # another holder, of this process or of another, is refused naming the first
        with pytest.raises(StoreError, match=rf"^store '{store.url}' is in use: a run of this process holds it; "
                                             r"wait for it to end"):
            with PodracerStore(store.url).hold_run("podracer gc"):
                pass
        other = subprocess.run([sys.executable, "-c", HOLD_IN_ANOTHER_PROCESS, store.url], capture_output=True,
                               text=True, timeout=60)
        assert other.stdout.startswith(f"store '{store.url}' is in use: a run of process {os.getpid()}")
    with store.hold_run("podracer gc"):  # released at the block's end
        pass
    # a holder killed outright (no block's end, no cleanup) leaves nothing held: the kernel drops its lock
    killed = subprocess.run([sys.executable, "-c", HOLD_AND_DIE, store.url], timeout=60)
    assert killed.returncode == -9
    with store.hold_run():
        pass
    assert store.remove_if_bare()  # the lock file is not something recorded
    assert not Path(store.url).exists()


def test_a_remote_store_is_held_within_this_process(tmp_path):
    # no lock file (between processes the run state's lease holds it), but two runs of one process share the
    # lease's process id: held here, they are told apart
    store = PodracerStore(f"memory://{uuid.uuid4().hex}.zarr", create=True)
    with store.hold_run():
        with pytest.raises(StoreError, match=r"is in use: a run of this process holds it"):
            with store.hold_run("podracer gc"):
                pass
    with store.hold_run("podracer gc"):
        pass


HOLD_IN_ANOTHER_PROCESS = """
import sys
from dask_podracer.store import PodracerStore, StoreError
try:
    with PodracerStore(sys.argv[1]).hold_run():
        print("held")
except StoreError as e:
    print(e)
"""

HOLD_AND_DIE = """
import os, signal, sys
from dask_podracer.store import PodracerStore
with PodracerStore(sys.argv[1]).hold_run():
    os.kill(os.getpid(), signal.SIGKILL)
"""
