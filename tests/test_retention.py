"""Retention: a store that does not grow without bound. Each rule on a real store, crash-safe deletion,
`podracer gc` on a store written without retention, and long tournaments whose checkpoint count stays bounded
while resume, lineage, plot, export and shared-replay loads keep working."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dask_podracer.cli import main
from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.population import run_tournament
from dask_podracer.population.retention import Holders, ReplaySources, checkpoints_to_keep, collect
from dask_podracer.store import CheckpointNotFound, PodracerStore
from dask_podracer.train import SegmentSpec, load_agent, replay_sources, run_segment

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"
PODRACER = str(Path(sys.executable).with_name("podracer"))
HPARAMS = {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32, "buffer_size": 250}


def spec(store: PodracerStore, key: str, parent: str | None = None) -> SegmentSpec:
    """100 env steps, so 100 replay rows per segment; a lineage shares its buffer of 250 rows."""
    return SegmentSpec(key=key, store_url=store.url, env="Pendulum-v1", algorithm="sac", hparams=HPARAMS,
                       parent=parent, seed=1, env_step_budget=100, eval_episodes=2, share_replay=parent is not None)


@pytest.fixture(scope="module")
def lineages_once(tmp_path_factory) -> Path:
    """Agent 0's line a0 -> a1 -> a2 -> a3 and agent 1's b0 -> b1, sharing replay rows along each line: trained
    once for the module (six segments, about 2.5 s), then copied for each test, which may delete from its copy."""
    store = PodracerStore(tmp_path_factory.mktemp("lines") / "lines.zarr", create=True)
    for line in (["a0", "a1", "a2", "a3"], ["b0", "b1"]):
        for parent, key in zip([None, *line], line):
            run_segment(spec(store, key, parent))
    return Path(store.url)


@pytest.fixture
def lineages(lineages_once, tmp_path) -> PodracerStore:
    """A fresh copy of `lineages_once`'s store."""
    return PodracerStore(shutil.copytree(lineages_once, tmp_path / "lines.zarr"))


def keep(store: PodracerStore, **holders) -> set[str]:
    fields = {"board": frozenset(), "in_flight_parents": frozenset(), "agent_latest": frozenset(),
              "live_lines": {}, "pinned": frozenset(), **holders}
    return checkpoints_to_keep(Holders(**fields), keep_per_agent=1, sources=ReplaySources(store))


def test_a_shared_buffer_keeps_exactly_the_ancestors_whose_rows_it_reads(lineages):
    # a3 holds its 100 rows and reads 150 more: 100 from a2, 50 from a1; a0's rows are past its buffer
    assert replay_sources(lineages, "a3") == ["a2", "a1"]
    assert keep(lineages, agent_latest=frozenset({"a3"})) == {"a3", "a2", "a1"}


@pytest.mark.parametrize("holder", ["board", "in_flight_parents", "agent_latest", "pinned", "live_lines"])
def test_each_holder_keeps_its_checkpoint_and_the_rest_is_deleted(lineages, holder):
    held = {"live_lines": {1: ["b0", "b1"]}}.get(holder, frozenset({"b1"}))  # keep_per_agent 1: b1 of b0, b1
    kept = keep(lineages, **{holder: held})
    assert kept == {"b1", "b0"}  # b1 reads 100 rows of b0's
    done = collect(lineages, kept, lineages.checkpoint_keys())
    assert sorted(k for k, _ in done.deleted) == ["a0", "a1", "a2", "a3"] and done.bytes_freed > 0
    assert lineages.checkpoint_keys() == ["b0", "b1"]
    assert load_agent(lineages, "b1").replay.size == 200  # the shared rows are still there
    with pytest.raises(CheckpointNotFound, match="no complete checkpoint 'a3'"):
        load_agent(lineages, "a3")


def test_a_deletion_cut_off_between_mark_and_removal_is_never_seen_torn_and_gc_finishes_it(lineages):
    store_path = Path(lineages.url)
    # a real crash: the process dies right after the mark, before removing anything
    code = ("import os, signal\nimport dask_podracer.store.checkpoints as ck\n"
            "ck.remove = lambda store, key: os.kill(os.getpid(), signal.SIGKILL)\n"
            "from dask_podracer.store import PodracerStore\n"
            f"PodracerStore({str(store_path)!r}).delete_checkpoint('a0')\n")
    crashed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert crashed.returncode == -9
    assert (store_path / "checkpoints" / "a0" / "actor.body.0.weight").exists()  # the arrays are all there
    assert "a0" not in lineages.checkpoint_keys() and lineages.deleted_checkpoints() == ["a0"]
    with pytest.raises(CheckpointNotFound, match="checkpoint 'a0' .* was deleted by the retention policy"):
        lineages.load_checkpoint("a0")
    assert replay_sources(lineages, "a1") == []  # a reader of its rows finds them gone, never half there

    dry = subprocess.run([PODRACER, "gc", str(store_path), "--dry-run", "--keep-per-agent", "1"],
                         capture_output=True, text=True, check=False)
    assert dry.returncode == 0, dry.stderr
    assert "would remove a0 (" in dry.stdout and "cut off earlier" in dry.stdout
    assert lineages.deleted_checkpoints() == ["a0"]
    done = subprocess.run([PODRACER, "gc", str(store_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "removed a0 (" in done.stdout and not (store_path / "checkpoints" / "a0").exists()


def test_a_keep_per_agent_below_one_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"store.keep_per_agent must be >= 1 .*, got 0"):
        config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac"}, "store": {"keep_per_agent": 0}})
    refused = subprocess.run([PODRACER, "gc", "nowhere.zarr", "--keep-per-agent", "0"], capture_output=True,
                             text=True, check=False)
    assert refused.returncode == 2 and refused.stderr.strip() == (
        "podracer: error: --keep-per-agent must be >= 1 (an agent trains on from its newest checkpoint), got 0")


# -- whole tournaments ----------------------------------------------------------------------------------------

FAST = {"segment": {"env_steps": 40, "eval_episodes": 1},
        "hparams": {"hidden": [8, 8], "num_envs": 2, "learning_starts": 20, "batch_size": 16, "buffer_size": 120},
        "tournament": {"leaderboard_size": 3, "replay": "share", "perturb": ["actor_lr"]}}


def fast(store: Path, segments: int, **store_section) -> object:
    return config_from_dict({**FAST, "store": store_section, "run": {
        "env": "Pendulum-v1", "algorithm": "sac", "budget": "5m", "max_segments": segments, "store": str(store)}})


@pytest.fixture(scope="module")
def client(cpu_client):
    """The suite's shared cluster of two one-slot worker processes (tests/conftest.py): these tournaments kill,
    scale and configure no worker, and its workers have imported torch already."""
    return cpu_client


def stored_checkpoints(store_path: Path) -> int:
    return sum(1 for p in (store_path / "checkpoints").iterdir() if p.is_dir())


@pytest.mark.slow
def test_a_long_tournament_keeps_a_bounded_store_and_everything_still_reads_it(client, tmp_path):
    store_path = tmp_path / "long.zarr"
    counts = []
    for segments in (30, 60):  # a run past the bound below, then a resume that doubles it: 60 segments, 3x the bound
        summary = run_tournament(fast(store_path, segments, keep_per_agent=2), client)
        assert summary.checkpoints_deleted > 0
        counts.append(stored_checkpoints(store_path))
    store = PodracerStore(store_path)
    history = store.read_history()
    finished = [r for r in history if r["status"] == "finished"]
    assert len(finished) >= 55
    # board (3) + 2 agents x (2 newest + latest) + what those read of shared replay rows (buffer 120, 40 per
    # segment: at most 2 ancestors each), however many segments ran
    bound = 3 + 2 * 3 + 2 * 2 * 3
    assert max(counts) <= bound and counts[1] <= counts[0] + 3, counts
    assert len(store.checkpoint_keys()) == counts[1]

    best = store.read_leaderboard()[0]["key"]
    agent = load_agent(store, best)  # the shared-replay rows it reads are all kept
    assert agent.replay.size == min(120, next(r["lineage_env_steps"] for r in finished if r["key"] == best))
    lineage = subprocess.run([PODRACER, "lineage", str(store_path), best], capture_output=True, text=True, check=False)
    assert lineage.returncode == 0, lineage.stderr
    assert "deleted" in lineage.stdout and best in lineage.stdout  # its deleted ancestors, from the history
    plot = subprocess.run([PODRACER, "plot", str(store_path), "--out", str(tmp_path / "c.html")],
                          capture_output=True, text=True, check=False)
    assert plot.returncode == 0 and (tmp_path / "c.html").exists(), plot.stderr
    exported = subprocess.run([sys.executable, str(WORKFLOWS / "export_champion.py"), str(store_path),
                               str(tmp_path / "champion"), "--episodes", "2"], capture_output=True, text=True,
                              check=False)
    assert exported.returncode == 0, exported.stderr
    assert store.pinned() == {best}  # an exported champion is kept from now on
    for entry in store.read_leaderboard():
        load_agent(store, entry["key"])


@pytest.mark.slow
def test_gc_cleans_a_store_written_without_retention_and_the_run_resumes(client, tmp_path):
    store_path = tmp_path / "old.zarr"
    # as stores were before retention; 24 checkpoints, more than the long test's bound of 21 that gc keeps at most
    run_tournament(fast(store_path, 24, retention=False), client)
    store = PodracerStore(store_path)
    everything = store.checkpoint_keys()
    assert len(everything) == 24
    files = sorted(p.relative_to(store_path) for p in store_path.rglob("*"))

    dry = subprocess.run([PODRACER, "gc", str(store_path), "--dry-run"], capture_output=True, text=True, check=False)
    assert dry.returncode == 0, dry.stderr
    assert sorted(p.relative_to(store_path) for p in store_path.rglob("*")) == files  # nothing changed
    would = [line.split()[2] for line in dry.stdout.splitlines() if line.startswith("would remove s")]
    assert would and dry.stdout.splitlines()[-1].startswith(f"would remove {len(would)} checkpoints, ")

    done = subprocess.run([PODRACER, "gc", str(store_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(line.split()[1] for line in done.stdout.splitlines() if line.startswith("removed s")) == \
        sorted(would)
    assert set(store.checkpoint_keys()) == set(everything) - set(would)
    freed = int(done.stdout.splitlines()[-1].split(", ")[1].split()[0].replace(",", ""))
    assert freed > 0

    board = {e["key"] for e in store.read_leaderboard()}
    assert board <= set(store.checkpoint_keys())
    summary = run_tournament(fast(store_path, 10), client)  # resumes on what gc kept
    assert summary.segments_completed == 10 and summary.segments_failed == 0
    assert len(store.read_history()) >= 34


@pytest.mark.slow
def test_a_pinned_checkpoint_outlives_retention(client, tmp_path, capsys):
    store_path = tmp_path / "pin.zarr"
    run_tournament(fast(store_path, 4, retention=False), client)
    store = PodracerStore(store_path)
    first = store.read_history()[0]["key"]
    pinned = subprocess.run([PODRACER, "pin", str(store_path), first], capture_output=True, text=True, check=False)
    assert pinned.returncode == 0 and pinned.stdout.strip() == f"pinned {first}", pinned.stderr
    summary = run_tournament(fast(store_path, 12, keep_per_agent=1), client)
    assert summary.checkpoints_deleted > 0  # retention ran, and left the pinned one
    assert first in store.checkpoint_keys()
    load_agent(store, first)
    assert os.path.isdir(store_path / "pins" / first)
    assert store.read_run_state()["retention"] == {"on": True, "keep_per_agent": 1}
    assert main(["pin", str(store_path), first, "--unpin"]) == 0
    assert main(["pin", str(store_path), first, "--unpin"]) == 0  # said so, not "unpinned" again
    assert capsys.readouterr().out.splitlines() == [f"unpinned {first}", f"{first} was not pinned"]
    assert first not in store.pinned()


def test_a_candidate_whose_checkpoint_is_gone_already_is_passed_over(tmp_path):
    # a record naming a checkpoint removed by hand (or a segment function that saves none) made collect raise
    # CheckpointNotFound, which ended run_tournament at its last table write
    import numpy as np

    from dask_podracer.store import PodracerStore

    store = PodracerStore(str(tmp_path / "s.zarr"), create=True)
    store.save_checkpoint("s000001-a", {"w": np.zeros(4)}, {})
    done = collect(store, keep=set(), candidates=["s000000-gone", "s000001-a"])
    assert [key for key, _ in done.deleted] == ["s000001-a"] and not store.has_checkpoint("s000001-a")
