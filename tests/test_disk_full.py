"""A disk that fills up mid-checkpoint: the segment fails cleanly, nothing visible is torn, the run stops in
one line, and once there is room again the same command resumes it with nothing stored lost."""

import errno
import os
import subprocess
import sys

import pytest
from zarr.storage import LocalStore

from dask_podracer.store import PodracerStore, StoreError
from dask_podracer.train import SegmentSpec, load_agent, run_segment

HPARAMS = {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32}


def spec(store: PodracerStore, key: str, parent: str | None = None) -> SegmentSpec:
    return SegmentSpec(key=key, store_url=store.url, env="Pendulum-v1", algorithm="sac", hparams=HPARAMS,
                       parent=parent, seed=1, env_step_budget=150, eval_episodes=2)


class FillingDisk:
    """zarr's LocalStore.set, failing as a full disk does (ENOSPC) once `free` more bytes have been written."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.original = LocalStore.set

    async def set(self, store: LocalStore, key: str, value) -> None:
        if len(value) > self.free:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.free -= len(value)
        await self.original(store, key, value)


def test_a_checkpoint_that_fills_the_disk_fails_its_segment_and_leaves_nothing_visible(tmp_path, monkeypatch):
    store = PodracerStore(tmp_path / "full.zarr", create=True)
    run_segment(spec(store, "a"))
    disk = FillingDisk(free=40_000)  # about 40% of the bytes of a checkpoint of this size
    monkeypatch.setattr(LocalStore, "set", lambda self, key, value: disk.set(self, key, value))
    with pytest.raises(StoreError, match=r"cannot save checkpoint 'b' to store '.*': No space left on device; it "
                                         r"was not published"):
        run_segment(spec(store, "b", parent="a"))
    assert disk.free < 40_000  # it failed part-way, not before writing anything
    assert store.checkpoint_keys() == ["a"] and not store.has_checkpoint("b")
    assert not (tmp_path / "full.zarr" / "checkpoints" / "b").exists()  # what it wrote was given back
    assert load_agent(store, "a") is not None  # what was stored before is intact

    monkeypatch.undo()  # room again: the same segment saves under the same key
    assert run_segment(spec(store, "b", parent="a")).lineage_env_steps == 300
    assert store.checkpoint_keys() == ["a", "b"]


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 3 MiB tmpfs (room for about two small SAC checkpoints): needs root, as in CI here."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected-ENOSPC test above covers the segment")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_tournament_on_a_disk_that_fills_stops_in_one_line_and_resumes_once_there_is_room(small_tmpfs, tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nbudget = "3m"\nmax_segments = 8\n'
                      '[segment]\nenv_steps = 150\neval_episodes = 2\n[cluster]\nworkers = 1\n'
                      'dashboard_address = "127.0.0.1:0"\n[hparams]\nhidden = [16, 16]\nnum_envs = 2\n'
                      'learning_starts = 50\nbatch_size = 32\n'
                      '[store]\nretention = false\n')  # every checkpoint kept, so the disk does fill
    store_path = small_tmpfs / "t.zarr"
    train = [sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store", str(store_path), "--quiet"]
    full = subprocess.run(train, capture_output=True, text=True, timeout=300, check=False)
    assert full.returncode in (1, 2), full.stdout + full.stderr
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("podracer: error: ") and "No space left on device" in last, full.stderr
    store = PodracerStore(store_path)
    saved = store.checkpoint_keys()
    assert saved, "the disk filled before any checkpoint: make the tmpfs larger"
    for key in saved:  # nothing visible is torn: every published checkpoint passes its checksum
        store.load_checkpoint(key)
    recorded = [r for r in store.read_history() if r["status"] == "finished"]
    assert {r["key"] for r in recorded} <= set(saved)

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], check=True)  # room again
    resumed = subprocess.run(train, capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert set(saved) <= set(store.checkpoint_keys())  # nothing stored was lost
    history = store.read_history()
    assert history[:len(recorded)] == recorded or all(r in history for r in recorded)
    assert len({r["key"] for r in history}) == len(history)
