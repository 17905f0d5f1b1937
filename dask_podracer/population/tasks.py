"""The function a Dask worker runs for one segment: place it on this worker's GPU, then train."""

from __future__ import annotations

import dataclasses

from dask_podracer.train import SegmentResult, SegmentSpec, run_segment


def segment_task(spec: SegmentSpec) -> SegmentResult:
    if spec.device == "auto":
        spec = dataclasses.replace(spec, device=worker_device())
    return run_segment(spec)


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
