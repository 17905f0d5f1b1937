"""The other learners of a segment with `[learners]`, started by its own task (rank 0) from the worker it runs on.

The orchestrator submits one task per segment, as always (`tasks.segment_task`); when its spec has `learners`,
that task is rank 0: it serves the rendezvous (`train/learners.py`) on its worker's host and then submits ranks 1
to K-1 through the worker's own client, each asking for the slot kind rank 0 asked for. What reaches the scheduler
is the spec, the rendezvous address and each learner's small report; gradients go between the learners
(gloo or NCCL), never through the scheduler.
"""

from __future__ import annotations

import dataclasses
import uuid

from distributed import Future, get_client

from dask_podracer.population.worker_slot import current_slot, worker_device
from dask_podracer.train import SegmentSpec
from dask_podracer.train.segment import run_learner

PREFIX = "learner-"


def learner_key(segment_key: str, launch: str, rank: int) -> str:
    """The Dask key of learner `rank` started by one run (`launch`) of rank 0 of `segment_key`'s segment; a rank 0
    that Dask reruns launches under a new token, as actors do (`actor_tasks.actor_key`)."""
    return f"{PREFIX}{segment_key}-{launch}-{rank}"


def learner_task(spec: SegmentSpec, rank: int, address: tuple[str, int]) -> dict[str, float]:
    if spec.device == "auto":
        spec = dataclasses.replace(spec, device=worker_device())
    return run_learner(spec, rank, address)


class DaskLearnerTasks:
    """`LearnerLauncher` on Dask, for rank 0 running now on this worker."""

    def __init__(self, spec: SegmentSpec) -> None:
        self.spec = spec
        self.host, self.resources = current_slot()
        self.futures: list[Future] = []

    def start(self, address: tuple[str, int]) -> None:
        client = get_client()
        launch = uuid.uuid4().hex[:8]
        workers = self.spec.learners.workers if self.spec.learners else 1
        self.futures = [client.submit(learner_task, self.spec, rank, address, key=learner_key(self.spec.key, launch,
                                                                                              rank),
                                      resources=self.resources, pure=False)
                        for rank in range(1, workers)]

    def stop(self) -> None:
        """Rank 0 is ending: release the other ranks' tasks (one still waiting for a slot never starts; a running
        one fails at its next collective, rank 0 having left the group)."""
        self.futures = []
