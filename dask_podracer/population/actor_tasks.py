"""The actor tasks of an actor-learner segment, started by its learner task from the worker it runs on.

The orchestrator submits one task per segment, as always (`tasks.segment_task`); when its spec has `actors`,
that task is the learner: it opens its listener (`train/actor_learner.py`) and then submits `workers` actor
tasks through the worker's own client, each asking for the slot kind the learner asked for. What reaches the
scheduler is the spec, the learner's address and its authkey (task arguments, a few hundred bytes) and each
actor's small report; rollouts and weights go over the learner's socket, worker to worker.

The learner's address is the worker's host (127.0.0.1 in the embedded cluster) and a port the OS picked, so it
is known before any actor starts: no Variable or Event is needed to publish it. An actor whose worker dies is
rerun by Dask like any task and joins again; the learner counts the lost connection.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from distributed import Future, get_client

from dask_podracer.population.worker_slot import current_slot
from dask_podracer.train import SegmentSpec
from dask_podracer.train.actor_learner import run_actor

PREFIX = "actor-"


def actor_keys_prefix(segment_key: str) -> str:
    """What the Dask keys of every actor of the segment saving checkpoint `segment_key` start with."""
    return f"{PREFIX}{segment_key}-"


def actor_key(segment_key: str, launch: str, index: int) -> str:
    """The Dask key of actor `index` started by one run (`launch`) of the learner of `segment_key`'s segment.
    A learner that Dask reruns (its worker died) launches under a new token: an actor of the old run that is
    still going on a surviving worker must not stand in, under its old key, for one of the new run's."""
    return f"{actor_keys_prefix(segment_key)}{launch}-{index}"


def actor_task(spec: SegmentSpec, index: int, address: tuple[str, int], authkey: bytes) -> dict[str, float]:
    return run_actor(spec, index, address, authkey)


class DaskActorTasks:
    """`ActorLauncher` on Dask, for the learner task running now on this worker."""

    def __init__(self, spec: SegmentSpec) -> None:
        self.spec = spec
        self.host, self.resources = current_slot()  # each actor takes a slot of the learner's kind
        self.futures: list[Future] = []
        self.hang_up: Callable[[], None] | None = None

    def start(self, address: tuple[str, int], authkey: bytes, hang_up: Callable[[], None]) -> None:
        self.hang_up = hang_up
        client = get_client()
        workers = self.spec.actors.workers if self.spec.actors else 0
        launch = uuid.uuid4().hex[:8]
        self.futures = [client.submit(actor_task, self.spec, i, address, authkey,
                                      key=actor_key(self.spec.key, launch, i), resources=self.resources, pure=False)
                        for i in range(workers)]

    def stop(self) -> None:
        """The learner task is ending: hang up (a no-op after a normal finish), then release the actor tasks (one
        still waiting for a slot never starts; a running one ends once it sees the learner hang up)."""
        if self.hang_up is not None:
            self.hang_up()
        self.futures = []
