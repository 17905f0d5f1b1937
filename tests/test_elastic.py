"""An elastic pool on a real LocalCluster: it follows the cluster as it grows and shrinks."""

import threading
import time

import pytest
from distributed import Client, LocalCluster

from dask_podracer.config import config_from_dict
from dask_podracer.population import ClusterError, run_tournament
from dask_podracer.store import PodracerStore
from dask_podracer.train import load_agent

pytestmark = pytest.mark.slow


def wait_until(condition, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_pool_grows_with_the_cluster_and_shrinks_lowest_ranked_first(tmp_path):
    config = config_from_dict({
        "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "4m", "max_segments": 14,
                "store": str(tmp_path / "elastic.zarr")},
        "segment": {"env_steps": 300, "eval_episodes": 2},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32},
        "cluster": {"shrink_delay": 0.5},
        "store": {"retention": False},  # every recorded result's checkpoint stays, to be checked below
    })
    progress = []
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", resources={"CPU": 1}) as cluster, Client(cluster) as client:
        outcome = {}
        runner = threading.Thread(target=lambda: outcome.update(
            summary=run_tournament(config, client, on_progress=progress.append, poll_seconds=0.2)))
        runner.start()
        wait_until(lambda: len(progress) >= 1)
        assert max(p.running for p in progress) <= 1
        cluster.scale(3)
        wait_until(lambda: any(p.running >= 2 for p in progress[1:]) and len(progress) >= 4)
        grown = max(p.running for p in progress)
        done_before_shrink = len(progress)
        cluster.scale(1)
        wait_until(lambda: len(client.scheduler_info()["workers"]) == 1)
        runner.join(timeout=240)
        assert not runner.is_alive()
    summary = outcome["summary"]
    assert grown >= 2  # segments ran on the new workers
    assert summary.stop_reason == "max_segments"
    # after shrinking, one agent trains at a time
    assert max(p.running for p in progress[done_before_shrink + 2:]) <= 1
    store = PodracerStore(tmp_path / "elastic.zarr")
    history = store.read_history()
    recorded = [r for r in history if r["status"] == "finished"]
    ended = [r for r in history if r["status"] != "cancelled"]  # cancelled segments are recorded, not reported
    assert len(recorded) == summary.segments_completed and len(ended) == len(progress)
    for entry in store.read_leaderboard():  # nothing recorded was lost, and all of it loads
        load_agent(store, entry["key"])
    assert all(store.has_checkpoint(r["key"]) for r in recorded)
    agents = store.read_run_state()["machine"]["agents"]
    assert len(agents) >= 2 and sum(a["active"] for a in agents) == 1
    # the shrink cancelled the lowest-ranked agents: each cancelled one ranked below every agent kept
    cancelled = [r for r in history if r["status"] == "cancelled" and r["reason"] == "capacity"]
    assert cancelled, history
    shrink = cancelled[0]["wall_seconds"]
    kept = {a["id"] for a in agents if a["active"]} - {r["agent"] for r in cancelled}
    for agent in kept:
        scores = [r["score"] for r in history if r["agent"] == agent and r["status"] == "finished"
                  and r["wall_seconds"] <= shrink]
        kept_score = scores[-1] if scores else None
        for record in cancelled:
            if kept_score is None:
                assert record["agent_score"] is None
            else:
                assert record["agent_score"] is None or record["agent_score"] <= kept_score


SMALL = {"segment": {"env_steps": 150, "eval_episodes": 2},
         "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32}}


def test_pending_segments_let_an_adaptive_cluster_grow_from_nothing(tmp_path):
    config = config_from_dict({
        **SMALL, "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "max_segments": 3,
                         "store": str(tmp_path / "adapt.zarr")},
        "tournament": {"pending": 1}, "cluster": {"resource": "CPU", "capacity_timeout": 30}})
    with LocalCluster(n_workers=0, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", resources={"CPU": 1}) as cluster, Client(cluster) as client:
        cluster.adapt(minimum=0, maximum=2, interval="200ms", wait_count=2)
        summary = run_tournament(config, client, poll_seconds=0.2)
    assert summary.stop_reason == "max_segments" and summary.segments_completed == 3


def test_a_resource_no_worker_has_is_refused_before_anything_runs(cpu_client, tmp_path):
    config = config_from_dict({
        **SMALL, "run": {"env": "Pendulum-v1", "algorithm": "sac", "store": str(tmp_path / "gpu.zarr")},
        "cluster": {"resource": "GPU"}})
    with pytest.raises(ClusterError, match=r"cluster.resource is 'GPU' but no worker offers it \(workers: ") as refused:
        run_tournament(config, cpu_client, poll_seconds=0.2)
    # each worker named with what it offers (the scheduler lists them by address: in either order)
    offered = str(refused.value).split("(workers: ")[1].split(")")[0]
    assert sorted(offered.split(", ")) == ["0: {'CPU': 1}", "1: {'CPU': 1}"]
    assert not (tmp_path / "gpu.zarr").exists()  # refused before the store was created


def test_a_cluster_that_never_offers_a_slot_is_a_clear_error_not_a_hang(tmp_path):
    config = config_from_dict({
        **SMALL, "run": {"env": "Pendulum-v1", "algorithm": "sac", "store": str(tmp_path / "none.zarr")},
        "cluster": {"resource": "CPU", "capacity_timeout": 2.0}})
    with LocalCluster(n_workers=0, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        started = time.monotonic()
        with pytest.raises(ClusterError, match=r"no worker has offered \{'CPU': 1\} for \d+s.*\(workers: none\)"):
            run_tournament(config, client, poll_seconds=0.2)
        assert time.monotonic() - started < 30
