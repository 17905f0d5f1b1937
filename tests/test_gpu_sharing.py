"""Several segments per GPU (`cluster.segments_per_gpu`): the embedded cluster's layout, the slots a cluster offers,
what preflight refuses, the pool table's device column, the elastic pool, and a tournament whose segments share a
worker's one GPU slot as threads (docs/scaling.md, "Several segments per GPU").

No GPU is needed: a worker's "GPU" is the resource it advertises, and a segment on a worker whose torch sees no
CUDA device trains on the CPU. Which sharing is faster on a real GPU is measured by benchmarks/gpu_members.py
(benchmarks/device/on_gpu.sh, step `shared-gpu`), not here.
"""

import functools
import random
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from distributed import Client, LocalCluster, get_task_stream, get_worker

from dask_podracer.config import ClusterConfig, ConfigError, config_from_dict
from dask_podracer.population import CapacityChanged, ClusterError, cluster_slots, run_tournament
from dask_podracer.population.cluster import gpu_share_of, worker_layout, worker_slots
from dask_podracer.population.monitor import gpu_share, worker_device
from dask_podracer.population.preflight import check_resources, check_workers
from dask_podracer.population.tournament import Tournament, Train, segment_spec
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentResult, SegmentSpec


def test_the_embedded_layout_shares_each_gpu_as_processes_or_as_threads():
    one = ClusterConfig()
    assert worker_layout(one, gpus=2, cores=16) == worker_layout(ClusterConfig(segments_per_gpu=1), 2, 16)
    assert (worker_layout(one, 2, 16).workers, worker_layout(one, 2, 16).threads) == (2, 1)
    processes = worker_layout(ClusterConfig(segments_per_gpu=3), gpus=2, cores=16)
    assert (processes.workers, processes.threads, processes.resources) == (6, 1, {"GPU": 1})
    threads = worker_layout(ClusterConfig(segments_per_gpu=3, gpu_sharing="threads"), gpus=2, cores=16)
    assert (threads.workers, threads.threads, threads.resources) == (2, 3, {"GPU": 1})
    assert gpu_share_of(ClusterConfig(segments_per_gpu=4, gpu_sharing="threads")) == 0.25
    assert gpu_share_of(ClusterConfig(segments_per_gpu=4)) == 1.0  # a process has its GPU=1 to itself
    # without GPUs the setting changes nothing: one worker per core, each a CPU slot
    cpu = worker_layout(ClusterConfig(segments_per_gpu=3, gpu_sharing="threads"), gpus=0, cores=2)
    assert (cpu.workers, cpu.threads, cpu.resources) == (2, 1, {"CPU": 1})


def test_bad_sharing_settings_are_refused_in_one_line():
    run = {"env": "Pendulum-v1", "algorithm": "sac"}
    with pytest.raises(ConfigError, match="cluster.segments_per_gpu"):
        config_from_dict({"run": run, "cluster": {"segments_per_gpu": 0}})
    with pytest.raises(ConfigError, match="cluster.gpu_sharing"):
        config_from_dict({"run": run, "cluster": {"gpu_sharing": "mps"}})


@pytest.fixture(scope="module")
def one_gpu_worker():
    """One worker process advertising GPU=1, with two threads: a GPU to share between two segments as threads."""
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", resources={"GPU": 1}) as cluster, Client(cluster) as client:
        yield client


def test_a_gpu_shared_as_threads_offers_one_slot_per_share(one_gpu_worker):
    assert cluster_slots(one_gpu_worker, gpu_share=0.5).resources == {"GPU": 0.5}
    assert cluster_slots(one_gpu_worker, gpu_share=0.5).count == 2
    # a worker's entry in scheduler_info: GPU=0.3 is 0.3 / 0.1 = 2.99.. shares of 0.1 in floating point, and three
    assert worker_slots({"resources": {"GPU": 0.3}, "nthreads": 3}, "GPU", 0.1) == 3
    assert cluster_slots(one_gpu_worker).count == 1
    assert cluster_slots(one_gpu_worker, requested="GPU", gpu_share=0.5).count == 2
    # two threads run two segments at once, however many shares the GPU is cut into
    assert cluster_slots(one_gpu_worker, gpu_share=0.25).count == 2


def test_a_worker_with_fewer_threads_than_gpu_shares_is_refused_naming_the_threads_it_needs():
    with (LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                       dashboard_address=None, resources={"GPU": 1}) as cluster, Client(cluster) as client):
        slots = cluster_slots(client, gpu_share=0.5)
        assert (slots.resources, slots.count) == ({"GPU": 0.5}, 1)  # Dask runs one task per thread
        with pytest.raises(ClusterError, match=r"GPU=1 with 1 thread\(s\).*segments_per_gpu = 2.*--nthreads 2") as e:
            check_resources(client, slots, "auto")
        assert "\n" not in str(e.value)
        check_resources(client, cluster_slots(client), "auto")  # whole GPUs: one thread is enough


@pytest.mark.slow
def test_actor_slots_are_counted_in_gpu_shares(one_gpu_worker, tmp_path):
    """A learner and its actor on one GPU=1 worker cut in two: preflight counts two slots, not one."""
    def config(sharing):
        return config_from_dict({
            "run": {"env": "CartPole-v1", "algorithm": "impala", "store": str(tmp_path / "actors.zarr")},
            "tournament": {"pool_size": 1}, "actors": {"workers": 1},
            "cluster": {"segments_per_gpu": 2, "gpu_sharing": sharing}})

    PodracerStore(config("threads").store_url, create=True)
    check_workers(one_gpu_worker, config("threads"))
    with pytest.raises(ConfigError, match=r"needs 2 slots per segment .* offers 1 \(GPU\)"):
        check_workers(one_gpu_worker, config("processes"))  # a whole GPU each: the worker offers one


def test_the_pool_table_shows_a_segments_share_of_its_gpu(one_gpu_worker):
    future = one_gpu_worker.submit(time.sleep, 0, resources={"GPU": 0.5}, pure=False)
    future.result()
    share = one_gpu_worker.run_on_scheduler(lambda dask_scheduler: gpu_share(dask_scheduler.tasks[future.key]))
    assert share == 0.5
    whole = one_gpu_worker.submit(time.sleep, 0, resources={"GPU": 1}, pure=False)
    whole.result()
    assert one_gpu_worker.run_on_scheduler(lambda dask_scheduler: gpu_share(dask_scheduler.tasks[whole.key])) == 1
    no_nvml = SimpleNamespace(resources={"GPU": 1}, metrics={}, extra={})
    h100 = SimpleNamespace(resources={"GPU": 1}, metrics={"gpu_memory_used": 2**30}, extra={"gpu": {"name": "H100"}})
    assert worker_device(no_nvml, share) == {"device": "cuda (1/2 GPU)"}
    assert worker_device(no_nvml, 1 / 3)["device"] == "cuda (1/3 GPU)"
    assert worker_device(h100, share)["device"] == "cuda: H100 (1/2 GPU)"
    assert worker_device(h100, 1.0)["device"] == worker_device(h100)["device"] == "cuda: H100"


@pytest.mark.slow
def test_two_segments_share_one_gpu_slot_at_once(one_gpu_worker, tmp_path):
    config = config_from_dict({
        "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "max_segments": 4, "seed": 3,
                "store": str(tmp_path / "shared.zarr")},
        "tournament": {"leaderboard_size": 2, "fresh_agents": 2, "perturb": ["actor_lr"]},
        "segment": {"env_steps": 300, "eval_episodes": 2},
        "cluster": {"segments_per_gpu": 2, "gpu_sharing": "threads"},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 100, "batch_size": 32},
    })
    with get_task_stream(one_gpu_worker) as stream:
        summary = run_tournament(config, one_gpu_worker)
    assert summary.segments_completed == 4 and summary.segments_failed == 0
    spans = sorted((t["startstops"][0]["start"], t["startstops"][-1]["stop"]) for t in stream.data
                   if t["key"].startswith("segment-") and t["status"] == "OK")
    assert len(spans) == 4
    # the one worker, with GPU=1, ran two segments at once: each asked for half of it
    overlapping = [a for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    assert overlapping, spans


def sleeping_segment(spec: SegmentSpec, seconds: float, marks: str) -> SegmentResult:
    """A segment that trains nothing: it holds its slot for `seconds`, marked by a file under `marks/<worker>/`,
    and reports how many segments were running on its worker and on the whole cluster as it ended (the one of
    the most at once that ends first sees them all), and a random score."""
    here = Path(marks) / str(get_worker().name)
    here.mkdir(parents=True, exist_ok=True)
    mark = here / spec.key
    mark.touch()
    time.sleep(seconds)
    metrics = {"on_worker": len(list(here.iterdir())), "on_cluster": len(list(Path(marks).glob("*/*")))}
    mark.unlink()
    return SegmentResult(key=spec.key, parent=spec.parent, algorithm=spec.algorithm, env=spec.env,
                         hparams=spec.hparams, score=random.Random(spec.seed).uniform(-1500, -100),
                         segment_env_steps=100, lineage_env_steps=100, train_seconds=seconds, eval_seconds=0.0,
                         generation=spec.generation, device="cpu", metrics=metrics)


@pytest.mark.slow
def test_the_elastic_pool_grows_by_two_segments_per_gpu_shared_as_threads(tmp_path):
    config = config_from_dict({
        "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "max_segments": 40, "seed": 5,
                "store": str(tmp_path / "elastic.zarr")},
        "tournament": {"perturb": ["actor_lr"]},
        "cluster": {"segments_per_gpu": 2, "gpu_sharing": "threads", "shrink_delay": 0.5},
        "store": {"retention": False},  # the sleeping segments write no checkpoint to collect
    })
    progress = []
    with (LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                       dashboard_address="127.0.0.1:0", resources={"GPU": 1}) as cluster, Client(cluster) as client):
        outcome = {}
        runner = threading.Thread(target=lambda: outcome.update(summary=run_tournament(
            config, client, on_progress=progress.append, poll_seconds=0.1,
            segment_fn=functools.partial(sleeping_segment, seconds=0.4, marks=str(tmp_path / "marks")))))
        runner.start()
        deadline = time.monotonic() + 60
        while len(progress) < 6:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        grown_from = len(progress)
        cluster.scale(2)  # a second GPU=1 worker of two threads: two more slots
        runner.join(timeout=120)
        assert not runner.is_alive()
    assert outcome["summary"].segments_completed == 40, outcome["summary"]
    seen = [r["metrics"] for r in PodracerStore(config.store_url).read_history() if r["status"] == "finished"]
    assert max(m["on_cluster"] for m in seen[:grown_from]) == 2  # one GPU: two halves at once
    assert max(m["on_worker"] for m in seen) == 2  # never more than a worker's shares
    assert max(m["on_cluster"] for m in seen) == 4  # two GPUs: the pool grew to four


def test_threads_sharing_a_gpu_run_auto_eagerly_and_refuse_compile_on(tmp_path):
    """A CUDA graph capture in one thread fails another thread's random draws (seen on an H100): segments sharing a
    GPU as threads are told not to capture, and an explicit `compile = "on"` is refused before any work."""

    def config(sharing, **hparams):
        return config_from_dict({
            "run": {"env": "Pendulum-v1", "algorithm": "sac", "store": str(tmp_path / "s.zarr")},
            "cluster": {"segments_per_gpu": 2, "gpu_sharing": sharing}, "hparams": hparams})

    with pytest.raises(ConfigError, match=r'hparams.compile must be "auto" or "off" with cluster.gpu_sharing = '
                                          r'"threads" .* got \'on\''):
        config("threads", compile="on")
    config("processes", compile="on")  # a process per segment: each captures on its own
    for sharing, allowed in (("threads", False), ("processes", True)):
        train = next(i for i in Tournament(config(sharing)).handle(CapacityChanged(2)) if isinstance(i, Train))
        assert train.graphs_allowed is allowed
        assert segment_spec(train, str(tmp_path / "s.zarr"), 60.0).graphs_allowed is allowed


# NVIDIA's MPS daemon (`cluster.mps`). The real control program exists only on a machine with NVIDIA's driver, and
# `on_gpu.sh shared-gpu --mps` ran the benchmark under it on an H200; here a program of the same name on PATH plays
# its part (a state file stands for the daemon), so that what `mps_daemon` starts, leaves alone and stops is seen.
FAKE_MPS_CONTROL = """#!/bin/sh
state="$FAKE_MPS_STATE"
if [ "$1" = "-d" ]; then
    echo "-d" >>"$state.log"
    if [ -e "$state.refuse" ]; then echo "An instance of this daemon is already running" >&2; exit 1; fi
    touch "$state"; exit 0
fi
read -r command
echo "$command" >>"$state.log"
if [ ! -e "$state" ]; then echo "Cannot find MPS control daemon process"; exit 1; fi
if [ "$command" = "quit" ]; then rm "$state"; fi
exit 0
"""


@pytest.fixture
def fake_mps_control(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "nvidia-cuda-mps-control"
    program.write_text(FAKE_MPS_CONTROL)
    program.chmod(0o755)
    state = tmp_path / "mps-daemon"
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_MPS_STATE", str(state))
    return state


def _calls(state: Path) -> list[str]:
    log = state.with_name(state.name + ".log")
    return log.read_text().split() if log.exists() else []


def test_mps_is_started_before_the_block_and_stopped_after_it(fake_mps_control):
    from dask_podracer.population.gpu_mps import mps_daemon

    with mps_daemon(True, gpus=1) as what:
        assert what == "started" and fake_mps_control.exists()  # the daemon runs while the block does
    assert not fake_mps_control.exists()
    assert _calls(fake_mps_control) == ["get_server_list", "-d", "get_server_list", "quit"]


def test_a_running_mps_daemon_is_left_running(fake_mps_control):
    from dask_podracer.population.gpu_mps import mps_daemon

    fake_mps_control.touch()  # someone else's daemon
    with mps_daemon(True, gpus=2) as what:
        assert what == "running"
    assert fake_mps_control.exists() and _calls(fake_mps_control) == ["get_server_list"]


def test_mps_is_left_alone_when_not_wanted_or_without_a_gpu(fake_mps_control):
    from dask_podracer.population.gpu_mps import mps_daemon

    with mps_daemon(False, gpus=1) as off, mps_daemon(True, gpus=0) as no_gpu:
        assert (off, no_gpu) == ("off", "no GPU")
    assert _calls(fake_mps_control) == []


def test_mps_that_cannot_start_is_refused_in_one_line(fake_mps_control, monkeypatch, tmp_path):
    from dask_podracer.population.gpu_mps import MPSError, mps_daemon

    fake_mps_control.with_name(fake_mps_control.name + ".refuse").touch()
    with pytest.raises(MPSError, match=r"^cluster.mps = true, but `nvidia-cuda-mps-control -d` did not start a "
                                       r"daemon: An instance of this daemon is already running; set cluster.mps"):
        with mps_daemon(True, gpus=1):
            pytest.fail("the block ran without a daemon")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ClusterError, match=r"^cluster.mps = true, but nvidia-cuda-mps-control is not on PATH "
                                           r"\(it comes with NVIDIA's driver\)"):
        with mps_daemon(True, gpus=1):
            pytest.fail("the block ran without a daemon")


def test_the_mps_setting_is_checked_and_ignored_without_gpus(tmp_path):
    with pytest.raises(ConfigError, match=r"cluster.mps must be true or false, got str 'yes'$"):
        config_from_dict({"run": {"env": "Pendulum-v1"}, "cluster": {"mps": "yes"}})
    from dask_podracer.population.connect import embedded_client

    # on this machine (no GPU) the embedded cluster starts as it would without the setting
    with embedded_client(ClusterConfig(workers=1, mps=True, dashboard_address="127.0.0.1:0")) as client:
        assert len(client.scheduler_info()["workers"]) == 1
