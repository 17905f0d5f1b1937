"""The function a Dask worker runs for one segment: place it on this worker's GPU, then train."""

from __future__ import annotations

import dataclasses

from dask_podracer.population.actor_tasks import DaskActorTasks
from dask_podracer.train import SegmentResult, SegmentSpec, run_segment


def segment_task(spec: SegmentSpec) -> SegmentResult:
    if spec.device == "auto":
        spec = dataclasses.replace(spec, device=worker_device())
    if spec.actors is None:
        return run_segment(spec)
    actors = DaskActorTasks(spec)  # this task is the learner: it starts its actor tasks
    try:
        return run_segment(spec, actors)
    finally:
        actors.stop()  # however the segment ended, its actors stop waiting on it


def worker_device() -> str:
    """This worker's GPU: the only one it sees (dask-cuda), or one chosen by its LocalCluster index."""
    import torch
    from distributed import get_worker

    count = torch.cuda.device_count()
    if count == 0:
        return "cpu"
    try:
        index = int(get_worker().name) % count
    except (ValueError, TypeError):
        index = 0
    return f"cuda:{index}"
