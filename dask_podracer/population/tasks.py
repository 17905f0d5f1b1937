"""The function a Dask worker runs for one segment: place it on this worker's GPU, then train."""

from __future__ import annotations

import dataclasses

from dask_podracer.population.actor_tasks import DaskActorTasks
from dask_podracer.population.learner_tasks import DaskLearnerTasks
from dask_podracer.population.worker_slot import worker_device
from dask_podracer.train import SegmentResult, SegmentSpec, run_segment


def segment_task(spec: SegmentSpec) -> SegmentResult:
    if spec.device == "auto":
        spec = dataclasses.replace(spec, device=worker_device())
    if spec.actors is not None:
        actors = DaskActorTasks(spec)  # this task is the learner: it starts its actor tasks
        try:
            return run_segment(spec, actors)
        finally:
            actors.stop()  # however the segment ended, its actors stop waiting on it
    if spec.learners is not None:
        learners = DaskLearnerTasks(spec)  # this task is learner 0: it starts the others
        try:
            return run_segment(spec, learners=learners)
        finally:
            learners.stop()
    return run_segment(spec)
