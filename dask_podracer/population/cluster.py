"""Where segments run: the embedded LocalCluster, and what slots a cluster offers.

A slot is what one segment needs: a `GPU` resource on a worker that owns a GPU,
or a `CPU` resource on a worker without one. Workers of any other cluster
(`--scheduler ADDRESS`) advertise them with `dask worker --resources "GPU=1"`;
a cluster whose workers advertise neither is used one segment per thread.
With `cluster.segments_per_gpu = N` a GPU holds N slots: N worker processes per GPU
("processes" sharing), or one worker whose segments each ask for GPU=1/N ("threads").
A worker offers no more slots than it has threads: Dask runs one task per thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing import resource_tracker
from typing import TypeVar

import torch
from distributed import Client, LocalCluster

from dask_podracer.config import ClusterConfig

GPU = "GPU"
CPU = "CPU"
T = TypeVar("T")


class ClusterError(RuntimeError):
    """The cluster cannot run segments (no workers, or none with the needed resources)."""


MAIN_GUARD = ('its worker processes re-import the script that started them, so a script must make the call under '
              '`if __name__ == "__main__":`')


@dataclasses.dataclass(frozen=True)
class Slots:
    resources: dict[str, float] | None
    """What each segment asks for, e.g. {"GPU": 1}; None when workers advertise no resources."""
    count: int
    """Segments the cluster can run at once."""


def embedded_cluster(config: ClusterConfig, cores_per_segment: int = 1) -> LocalCluster:
    """A LocalCluster of worker processes on 127.0.0.1: one per GPU, or without GPUs one per
    `cores_per_segment` cores (a segment's `torch_threads`: `worker_layout`).

    Its scheduler preloads the live Podracer page (`dashboard_preload.py`), and its workers
    `worker_preload.py` (Ctrl-C at a terminal stops the client, not them), each after any preload
    named in Dask's config (passing `preload` replaces the config's, so both are given).
    """
    import dask

    if _reimporting_main():
        # A worker process of the embedded cluster is running the user's unguarded script
        # again; starting a cluster from here fails deep inside multiprocessing instead.
        raise ClusterError(f"an embedded LocalCluster cannot start while a worker imports the script: {MAIN_GUARD}")
    layout = worker_layout(config, torch.cuda.device_count(), os.cpu_count() or 1, cores_per_segment)
    preload = [*dask.config.get("distributed.scheduler.preload", []), "dask_podracer.population.dashboard_preload"]
    worker_preload = [*dask.config.get("distributed.worker.preload", []), "dask_podracer.population.worker_preload"]
    try:
        return start_whole(lambda: LocalCluster(
            n_workers=layout.workers,
            threads_per_worker=layout.threads,
            processes=True,
            host="127.0.0.1",
            scheduler_port=0,
            dashboard_address=config.dashboard_address,
            resources=layout.resources,
            silence_logs=logging.CRITICAL,  # failures are reported by the orchestrator, once
            scheduler_kwargs={"preload": preload},
            preload=worker_preload,
        ))
    except RuntimeError as e:  # distributed says only "Nanny failed to start."
        raise ClusterError(f"the embedded LocalCluster's worker processes did not start ({e}); "
                           f"if it was started from a script: {MAIN_GUARD}") from e


def start_whole(start: Callable[[], LocalCluster]) -> LocalCluster:
    """The cluster `start` makes, made on a thread of its own: Ctrl-C (a notebook's stop button) while it starts
    waits for the start to end, closes the cluster and is raised then.

    Interrupted in place, LocalCluster's start was cancelled half way and never closed: in a notebook, whose
    process lives on, its scheduler went on listening on its ports (the next run's "Port 8787 is already in use").
    SIGINT is blocked on that thread, so the cluster's event loop thread (started there) and the worker processes
    it spawns inherit the block: the stop button signals the kernel's whole process group, and a worker process
    still importing (before `worker_preload.py` ignores SIGINT) printed its KeyboardInterrupt into the cell."""
    cluster, error, stopped = _whole(start, block_sigint=True)
    if cluster is not None and stopped is not None:
        close_whole(cluster)
    if stopped is not None:
        raise stopped
    if error is not None:
        raise error
    return cluster


def close_whole(cluster: LocalCluster, raise_interrupt: bool = True) -> None:
    """Close `cluster` on a thread of its own, to the end: a Ctrl-C while it closes (a notebook's stop button
    pressed twice) cancelled the close half way, and the kernel kept the scheduler listening. That Ctrl-C is raised
    once the cluster is closed, or dropped (`raise_interrupt` False: the close of a run that the first one stopped,
    whose exception carries the run's summary)."""
    _, error, stopped = _whole(cluster.close)
    if stopped is not None and raise_interrupt:
        raise stopped
    if error is not None:
        raise error


def _whole(call: Callable[[], T], block_sigint: bool = False) -> tuple[T | None, BaseException | None,
                                                                       BaseException | None]:
    """`call()` run on a thread of its own and waited for to its end: its result, its exception, and the first
    exception a signal raised in this thread meanwhile (Ctrl-C, the CLI's SIGTERM), for the caller to raise."""
    done = threading.Event()
    outcome: list = [None, None]

    def run() -> None:
        try:
            if block_sigint and hasattr(signal, "pthread_sigmask"):  # not on Windows
                # multiprocessing unblocks SIGINT in the thread that starts its resource tracker (at the first
                # spawn): started here first, so the worker processes' spawns leave the block alone
                resource_tracker.ensure_running()
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            outcome[0] = call()
        except BaseException as e:  # handed to the caller's thread
            outcome[1] = e
        finally:
            done.set()

    threading.Thread(target=run, name="podracer-cluster", daemon=True).start()
    stopped: BaseException | None = None
    while not done.is_set():
        try:
            done.wait()
        except BaseException as e:
            stopped = stopped or e
    return outcome[0], outcome[1], stopped


@dataclasses.dataclass(frozen=True)
class WorkerLayout:
    """The embedded cluster's worker processes, each one's threads, and the resources each advertises."""

    workers: int
    threads: int
    resources: dict[str, float]


def worker_layout(config: ClusterConfig, gpus: int, cores: int, cores_per_segment: int = 1) -> WorkerLayout:
    """One worker per GPU (`segments_per_gpu` of them per GPU when they share it as processes, or one with that
    many threads when they share it as threads), or without GPUs one per `cores_per_segment` cores (at least
    one): a segment of `segment.torch_threads = 2` gets two cores, not two threads fighting over one.
    `cluster.workers` overrides the count. A worker picks its GPU by its index modulo the GPUs it sees
    (population/tasks.py), so the processes sharing a GPU spread evenly over them."""
    if not gpus:
        workers = config.workers or max(1, cores // cores_per_segment)
        return WorkerLayout(workers, config.threads_per_worker, {CPU: config.threads_per_worker})
    if config.gpu_sharing == "threads":
        return WorkerLayout(config.workers or gpus, config.threads_per_worker * config.segments_per_gpu, {GPU: 1})
    return WorkerLayout(config.workers or gpus * config.segments_per_gpu, config.threads_per_worker, {GPU: 1})


def _reimporting_main() -> bool:
    """Whether this call comes from a script that multiprocessing is importing as `__mp_main__`."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def cluster_slots(client: Client, wait_seconds: float = 60.0, resource: dict[str, float] | None = None,
                  requested: str = "auto", gpu_share: float = 1.0) -> Slots:
    """The slots the cluster's workers offer now.

    With `requested` "auto", wait up to `wait_seconds` for a first worker (failing clearly
    if none comes) and ask for GPU, else CPU, else a thread, by what the workers advertise.
    With a named resource ("GPU", "CPU", "none") nothing is waited for: an adaptive cluster
    may start empty and grow once segments wait. `resource` keeps a running tournament
    counting what it asked for at its start. A segment asks for `gpu_share` of a GPU
    (`gpu_share_of(config.cluster)`: 1/N when N segments share a GPU as threads).
    """
    if requested != "auto" and resource is None:
        resource = {} if requested == "none" else {requested: gpu_share if requested == GPU else 1}
    if wait_seconds > 0 and resource is None:
        try:
            client.wait_for_workers(1, timeout=wait_seconds)
        except TimeoutError:
            raise ClusterError(f"no Dask worker joined the scheduler at {client.scheduler.address} "
                               f"within {wait_seconds:.0f}s") from None
    workers = list(client.scheduler_info(n_workers=-1)["workers"].values())
    if resource == {}:
        return Slots(None, sum(int(w.get("nthreads", 1)) for w in workers))
    for name, amount in resource.items() if resource else [(GPU, gpu_share), (CPU, 1)]:
        total = sum(w.get("resources", {}).get(name, 0) for w in workers)
        if total >= amount or resource:
            return Slots({name: amount}, sum(worker_slots(w, name, amount) for w in workers))
    return Slots(None, sum(int(w.get("nthreads", 1)) for w in workers))


def worker_slots(worker: dict, name: str, amount: float) -> int:
    """Segments asking for `amount` of resource `name` that one worker (its scheduler_info entry) runs at once:
    its shares of the resource, but no more than its threads (Dask runs one task per thread, so a worker with
    GPU=1 and one thread runs one segment at a time however small the share each asks for)."""
    # a small tolerance: GPU=0.3 in shares of 0.1 is 0.3 / 0.1 = 2.99.. in floating point
    shares = int(worker.get("resources", {}).get(name, 0) / amount + 1e-9)
    return min(shares, int(worker.get("nthreads", 1)))


def gpu_share_of(config: ClusterConfig) -> float:
    """The part of a GPU one segment asks for: 1, or 1/segments_per_gpu when segments share a GPU as threads."""
    return 1.0 / config.segments_per_gpu if config.gpu_sharing == "threads" else 1.0
