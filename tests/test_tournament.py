"""Tournaments on a real LocalCluster of worker processes, recorded in a real Zarr store."""

import json
import subprocess
import sys

import pytest
from distributed import get_task_stream

from dask_podracer.config import config_from_dict
from dask_podracer.population import run_tournament
from dask_podracer.store import PodracerStore
from dask_podracer.train import load_agent

pytestmark = pytest.mark.slow

TINY = {
    "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "max_segments": 4, "seed": 1},
    "tournament": {"leaderboard_size": 3, "fresh_agents": 2, "perturb": ["actor_lr", "critic_lr"]},
    "segment": {"env_steps": 200, "eval_episodes": 3},
    "hparams": {"hidden": [32, 32], "num_envs": 2, "learning_starts": 100, "batch_size": 64},
}


@pytest.fixture
def client(cpu_client):
    """The suite's shared LocalCluster of two worker processes (tests/conftest.py)."""
    return cpu_client


def tiny_config(store, **run):
    return config_from_dict({**TINY, "run": {**TINY["run"], "store": str(store), **run}})


def test_tournament_fills_a_leaderboard_whose_entries_all_load(client, tmp_path):
    store_path = tmp_path / "t.zarr"
    progress = []
    with get_task_stream(client) as stream:  # which worker ran each task, as the scheduler saw it
        summary = run_tournament(tiny_config(store_path), client, on_progress=progress.append)
    assert summary.stop_reason == "max_segments"
    assert summary.segments_completed == 4 and summary.segments_failed == 0
    assert summary.env_steps == 800 and len(summary.history) == 4 and len(progress) == 4
    assert [p["env_steps"] for p in summary.history] == [200, 400, 600, 800]

    store = PodracerStore(store_path)
    board = store.read_leaderboard()
    assert len(board) == 3  # leaderboard_size
    assert [e["score"] for e in board] == sorted((e["score"] for e in board), reverse=True)
    assert summary.best_score == board[0]["score"]
    for entry in board:
        agent = load_agent(store, entry["key"])  # checksum verified on load
        assert agent.algorithm == "sac"
    history = store.read_history()
    assert len(history) == 4 and all(r["status"] == "finished" for r in history)
    children = [r for r in history if r["parent"] is not None]
    assert children and all(r["generation"] == 1 for r in children)  # after 2 fresh agents, picks from the board
    assert len(store.checkpoint_keys()) == 4  # every segment's checkpoint is kept
    # two worker processes really shared the work: every recorded segment ran as a task, and each worker ran some
    ran_on = {task["key"].removeprefix("segment-"): task["worker"] for task in stream.data
              if task["key"].startswith("segment-") and task["status"] == "OK"}
    assert set(ran_on) == {r["key"] for r in history}
    assert set(ran_on.values()) == set(client.scheduler_info()["workers"]) and len(set(ran_on.values())) == 2


def test_second_run_on_the_same_store_continues_it(client, tmp_path):
    store_path = tmp_path / "t.zarr"
    run_tournament(tiny_config(store_path, max_segments=3), client)
    store = PodracerStore(store_path)
    before_board, before_history = store.read_leaderboard(), store.read_history()

    summary = run_tournament(tiny_config(store_path, max_segments=3), client)
    assert summary.segments_completed == 3
    history = store.read_history()
    assert history[:3] == before_history and len(history) == 6  # nothing recorded was lost
    new_keys = {r["key"] for r in history[3:]}
    assert not new_keys & {r["key"] for r in before_history}
    assert all(r["key"].startswith(("s000003", "s000004", "s000005")) for r in history[3:])
    board = store.read_leaderboard()
    kept = [e for e in before_board if e in board]
    assert kept and board[0]["score"] >= before_board[0]["score"]  # old entries stay unless beaten
    assert all(r["parent"] is not None for r in history[3:])  # the resumed run builds on the old board
    assert store.read_run_state()["invocations"] == 2


def test_cli_trains_on_an_embedded_cluster_and_shows_the_leaderboard(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(
        '[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nbudget = "2m"\nmax_segments = 3\n'
        '[segment]\nenv_steps = 150\neval_episodes = 2\n'
        '[cluster]\nworkers = 1\ndashboard_address = "127.0.0.1:0"\n'
        '[hparams]\nhidden = [16, 16]\nnum_envs = 2\nlearning_starts = 50\nbatch_size = 32\n')
    store = tmp_path / "cli.zarr"
    run = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store", str(store),
                          "--json", str(tmp_path / "summary.json")], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "stopped: max_segments" in run.stdout and str(store) in run.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    for field in ("best_score", "wall_seconds", "env_steps", "segments_completed", "segments_failed", "store"):
        assert field in summary
    assert summary["segments_completed"] == 3 and summary["env_steps"] == 450
    assert [set(p) for p in summary["history"]] == [{"wall_seconds", "env_steps", "best_score"}] * 3

    board = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "leaderboard", str(store), "--json"],
                           capture_output=True, text=True, timeout=120)
    assert board.returncode == 0, board.stderr
    entries = json.loads(board.stdout)
    assert len(entries) == 3 and entries[0]["score"] == summary["best_score"]
    assert all({"key", "score", "env_steps", "algorithm", "parent"} <= set(e) for e in entries)
    table = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "leaderboard", str(store)],
                           capture_output=True, text=True, timeout=120)
    assert entries[0]["key"] in table.stdout
    top = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "leaderboard", str(store), "--json", "--top", "2"],
                         capture_output=True, text=True, timeout=120)
    assert json.loads(top.stdout) == entries[:2]
    negative = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "leaderboard", str(store), "--top", "-1"],
                              capture_output=True, text=True, timeout=120)
    assert negative.returncode == 2 and negative.stderr == "podracer: error: --top must be >= 0 (0 shows every " \
                                                           "entry), got -1\n"

    missing = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "leaderboard", str(tmp_path / "nope.zarr")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no podracer store" in missing.stderr and "Traceback" not in missing.stderr


TINY_TOML = ('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nbudget = "2m"\nmax_segments = 2\n'
             '[segment]\nenv_steps = 150\neval_episodes = 2\n'
             '[hparams]\nhidden = [16, 16]\nnum_envs = 2\nlearning_starts = 50\nbatch_size = 32\n')


def test_cli_runs_on_an_existing_cluster_given_its_address(client, tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    store = tmp_path / "remote.zarr"
    run = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store", str(store),
                          "--scheduler", client.scheduler.address], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert f"cluster at {client.scheduler.address}" in run.stdout and "stopped: max_segments" in run.stdout
    assert len(PodracerStore(store).read_history()) == 2


# `python -m dask_podracer.cli` with a connect timeout of 1 s instead of 10: Dask retries a refused address until
# the timeout ends, and what the CLI says after it is the same
CLI_WITH_A_SHORT_CONNECT_TIMEOUT = """
import functools, sys
import dask_podracer.population.orchestrator as orchestrator  # where run_tournament looks `connect` up
orchestrator.connect = functools.partial(orchestrator.connect, timeout="1s")
from dask_podracer.cli import main
sys.exit(main())
"""


def test_a_progress_callback_that_raises_ends_the_run_and_the_board_keeps_what_the_history_ranks(client, tmp_path):
    # the callback runs after the machine has promoted a result and before the loop carried the promotion out:
    # the board written at the end lacked the entry that the history ranked, and a resume never put it back
    store_path = tmp_path / "t.zarr"

    def broken(progress):
        raise RuntimeError("a bug in the callback")

    with pytest.raises(RuntimeError, match="a bug in the callback"):
        run_tournament(tiny_config(store_path), client, on_progress=broken)
    store = PodracerStore(store_path)
    ranked = {r["key"] for r in store.read_history() if r.get("rank") is not None}
    assert ranked and ranked == {e["key"] for e in store.read_leaderboard()}


def test_cli_says_clearly_when_the_scheduler_cannot_be_reached(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    store = tmp_path / "never.zarr"
    run = subprocess.run([sys.executable, "-c", CLI_WITH_A_SHORT_CONNECT_TIMEOUT, "train", str(config), "--store",
                          str(store), "--scheduler", "tcp://127.0.0.1:9"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in run.stderr
    assert "Traceback" not in run.stderr and not store.exists()


def test_segments_on_nanny_workers_lift_the_nannys_malloc_freeze(client, tmp_path):
    # Dask's nanny spawns workers with MALLOC_TRIM_THRESHOLD_ set, which froze glibc's mmap threshold
    # and made every SAC update ~1.7x slower (docs/benchmarks.md); the segment lifts it in its process.
    run_tournament(tiny_config(tmp_path / "t.zarr", max_segments=2), client)

    def worker_malloc_state():
        import os

        from dask_podracer.train import host_memory
        return "MALLOC_TRIM_THRESHOLD_" in os.environ, host_memory._restored

    assert set(client.run(worker_malloc_state).values()) == {(True, True)}
