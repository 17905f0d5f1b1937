"""The orchestrator: keep the training pool full, record every result, stop on a budget or a target.

An `as_completed` loop on the client is the tournament's asynchronous generator
(what the next segment starts from) and updater (whether a checkpoint enters
the leaderboard). The leaderboard, the history and the run's counters live in
the store and have one writer, this loop, so reopening the store resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from distributed import Client, Future, as_completed, wait

from dask_podracer.agents import make_agent
from dask_podracer.config import Config
from dask_podracer.envs import make_vec_env
from dask_podracer.population.cluster import Slots, cluster_slots, embedded_cluster
from dask_podracer.population.generator import propose
from dask_podracer.population.tasks import segment_task
from dask_podracer.population.updater import update_leaderboard
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentResult, SegmentSpec


@dataclasses.dataclass(frozen=True)
class Progress:
    """Reported after every finished or failed segment."""

    wall_seconds: float
    segments_completed: int
    segments_failed: int
    env_steps: int
    best_score: float | None
    result: SegmentResult | None
    rank: int | None
    """Where the result entered the leaderboard (0 = top), None if it did not."""
    error: str | None


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What one invocation did; `history` holds the reward-vs-time and reward-vs-steps curves."""

    store: str
    best_score: float | None
    best_key: str | None
    wall_seconds: float
    env_steps: int
    segments_completed: int
    segments_failed: int
    stop_reason: str
    """"target", "budget", "max_segments", "failing" (segments keep failing) or "interrupted"."""
    last_error: str | None
    """The last failed segment's error, if any failed."""
    history: list[dict[str, Any]]
    leaderboard: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_RUN_STATE_DEFAULTS = {"segments_started": 0, "fresh_started": 0, "segments_completed": 0,
                       "segments_failed": 0, "env_steps": 0, "wall_seconds": 0.0, "invocations": 0}


def check_constructs(config: Config) -> None:
    """Build the env and a fresh agent once on the client, so a config that cannot run fails before any submit."""
    env = make_vec_env(config.run.env, 1, device="cpu")
    make_agent(config.run.algorithm, env.single_observation_space, env.single_action_space, config.hparams)


def run_tournament(config: Config, client: Client | None = None,
                   on_progress: Callable[[Progress], None] | None = None) -> RunSummary:
    """Run (or resume) the tournament of `config` on `client`, or on an embedded LocalCluster."""
    check_constructs(config)
    with _client_for(config, client) as active:
        slots = cluster_slots(active)
        return _Tournament(config, active, slots, on_progress).run()


@contextlib.contextmanager
def _client_for(config: Config, client: Client | None) -> Iterator[Client]:
    if client is not None:
        yield client
        return
    with embedded_cluster(config.cluster) as cluster, Client(cluster) as embedded:
        yield embedded


class _Tournament:
    def __init__(self, config: Config, client: Client, slots: Slots,
                 on_progress: Callable[[Progress], None] | None) -> None:
        self.config = config
        self.client = client
        self.slots = slots
        self.on_progress = on_progress or (lambda progress: None)
        self.store = PodracerStore(config.store_url, create=True)
        self.board = self.store.read_leaderboard()
        self.state = {**_RUN_STATE_DEFAULTS, **self.store.read_run_state()}
        self.state["invocations"] += 1
        self.running: dict[Future, SegmentSpec] = {}
        self.started = time.monotonic()
        self.wall_offset = float(self.state["wall_seconds"])  # time spent by earlier invocations
        self.completed = self.failed = self.env_steps = 0
        self.failed_in_a_row = 0
        self.submitted = 0
        self.last_error: str | None = None
        self.curve: list[dict[str, Any]] = []

    # -- the loop -----------------------------------------------------------------
    def run(self) -> RunSummary:
        pool = self.config.tournament.pool_size or self.slots.count
        stop_reason = "interrupted"
        queue = as_completed()
        try:
            for _ in range(self._wanted(pool)):
                queue.add(self._submit())
            for future in queue:
                self._record(future)
                stop_reason = self._stop_reason()
                if stop_reason:
                    break
                for _ in range(self._wanted(pool)):
                    queue.add(self._submit())
        finally:
            self._finish(graceful=stop_reason == "budget")
        return self._summary(stop_reason)

    def _wanted(self, pool: int) -> int:
        """Segments to submit now: enough to fill the pool, never more than max_segments asks for."""
        wanted = pool - len(self.running)
        if self.config.run.max_segments:
            wanted = min(wanted, self.config.run.max_segments - self.submitted)
        return max(0, wanted)

    def _submit(self) -> Future:
        index = self.state["segments_started"]
        proposal = propose(self.config, index, self.board, self.state["fresh_started"])
        seg, run = self.config.segment, self.config.run
        remaining = max(1.0, run.budget_seconds - self._elapsed())
        spec = SegmentSpec(
            key=f"s{index:06d}-{uuid.uuid4().hex[:8]}",
            store_url=self.store.url,
            env=run.env,
            algorithm=run.algorithm,
            hparams=proposal.hparams,
            parent=proposal.parent,
            seed=run.seed * 1_000_003 + index,
            env_steps=seg.env_steps,
            # a segment never trains past the run's budget, so the loop need not poll the clock
            seconds=min(seg.seconds, remaining) if seg.seconds > 0 else remaining,
            eval_episodes=seg.eval_episodes,
            device=seg.device,
            torch_threads=seg.torch_threads,
            generation=proposal.generation,
        )
        self.state["segments_started"] += 1
        self.submitted += 1
        self.state["fresh_started"] += proposal.parent is None
        future = self.client.submit(segment_task, spec, key=f"segment-{spec.key}", resources=self.slots.resources,
                                    pure=False, retries=self.config.tournament.retries)
        self.running[future] = spec
        return future

    def _record(self, future: Future) -> None:
        spec = self.running.pop(future)
        result: SegmentResult | None = None
        rank = error = None
        if future.status == "finished":
            result = future.result()
            self.board, rank = update_leaderboard(self.board, result, self.config.tournament.leaderboard_size)
            if rank is not None:
                self.store.write_leaderboard(self.board)
            self.completed += 1
            self.env_steps += result.env_steps
            self.failed_in_a_row = 0
        else:
            error = self.last_error = _describe_error(future)
            self.failed += 1
            self.failed_in_a_row += 1
        self.state["segments_completed" if result else "segments_failed"] += 1
        self.state["env_steps"] += result.env_steps if result else 0
        self.state["wall_seconds"] = self.wall_offset + self._elapsed()
        best = self._best()
        self.store.append_history({
            "key": spec.key, "parent": spec.parent, "status": "finished" if result else "failed",
            "score": result.score if result else None, "rank": rank,
            "segment_env_steps": result.env_steps if result else 0,
            "lineage_env_steps": result.total_env_steps if result else None,
            "run_env_steps": self.state["env_steps"], "wall_seconds": self.state["wall_seconds"],
            "best_score": best, "hparams": spec.hparams, "generation": spec.generation,
            "train_seconds": result.train_seconds if result else None,
            "metrics": result.metrics if result else {}, "device": result.device if result else None,
            "error": error,
        })
        self.store.write_run_state(self.state)
        self.curve.append({"wall_seconds": self._elapsed(), "env_steps": self.env_steps, "best_score": best})
        self.on_progress(Progress(self._elapsed(), self.completed, self.failed, self.env_steps, best, result,
                                  rank, error))

    def _stop_reason(self) -> str:
        run = self.config.run
        best = self._best()
        if run.target_return is not None and best is not None and best >= run.target_return:
            return "target"
        if self.failed_in_a_row >= max(3, 2 * (self.config.tournament.pool_size or self.slots.count)):
            return "failing"  # every slot failed twice in a row: refilling would only fail again
        if run.max_segments and self.completed + self.failed >= run.max_segments:
            return "max_segments"
        if self._elapsed() >= run.budget_seconds:
            return "budget"
        return ""

    def _finish(self, graceful: bool) -> None:
        """Collect segments that end within a few seconds (they were capped at the budget); cancel the rest."""
        if graceful and self.running:
            done, _ = wait(list(self.running), timeout=30)
            for future in [f for f in self.running if f in done]:
                self._record(future)
        if self.running:
            self.client.cancel(list(self.running))
            self.running.clear()
        self.state["wall_seconds"] = self.wall_offset + self._elapsed()
        self.store.write_run_state(self.state)

    # -- helpers --------------------------------------------------------------------
    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _best(self) -> float | None:
        return self.board[0]["score"] if self.board else None

    def _summary(self, stop_reason: str) -> RunSummary:
        return RunSummary(
            store=self.store.url, best_score=self._best(), best_key=self.board[0]["key"] if self.board else None,
            wall_seconds=self._elapsed(), env_steps=self.env_steps, segments_completed=self.completed,
            segments_failed=self.failed, stop_reason=stop_reason, last_error=self.last_error, history=self.curve, leaderboard=self.board,
        )


def _describe_error(future: Future) -> str:
    try:
        exception = future.exception()
    except Exception as e:  # cancelled or lost: the future has no exception object to give
        return f"{type(e).__name__}: {e}"
    message = str(exception).splitlines()[0] if str(exception) else ""
    return f"{type(exception).__name__}: {message}"[:500]
