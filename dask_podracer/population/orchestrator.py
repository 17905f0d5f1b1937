"""The orchestrator: carry out the tournament's instructions on a Dask cluster.

An `as_completed` loop on the client feeds finished segments, failures, changes
of the cluster's capacity and the end of the budget to the tournament state
machine (`tournament.py`), and carries out what it answers: submit a segment,
cancel one, write the leaderboard, stop. The leaderboard, the history and the
machine's state live in the store and have one writer, this loop, so reopening
the store resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import dask
from distributed import Client, Future, as_completed, wait
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError

from dask_podracer.config import Config, ConfigError
from dask_podracer.population.cluster import ClusterError, Slots, cluster_slots, gpu_share_of
from dask_podracer.population.connect import TLSFiles, connect, embedded_client
from dask_podracer.population.retention import (Holders, ReplaySources, checkpoints_to_keep, collect,
                                                missed_records, own_lines)
from dask_podracer.population.preflight import check_resources, check_without_cluster, check_workers, pin_data
from dask_podracer.population.monitor import (MOST_PAGES, STORE_ANNOTATION, PodracerPage, named_page_plugins,
                                              page_plugin_name)
from dask_podracer.population.run_lease import check_no_run_going, this_client
from dask_podracer.population.task_keys import segment_key, task_key
from dask_podracer.population.tasks import segment_task
from dask_podracer.population.tournament import (BudgetReached, CapacityChanged, Cancel, CheckpointDamaged, Event,
                                                 Evict, Instruction, Promote, Quarantine, SegmentFailed,
                                                 SegmentFinished, SegmentRecovered, Stop, Tournament, Train,
                                                 segment_spec)
from dask_podracer.store import ChecksumError, PodracerStore, StoreError
from dask_podracer.store.records import HistoryRecord, LeaderboardEntry
from dask_podracer.tracking import Trackers, TrackingError, open_trackers, state_origin
from dask_podracer.train import SegmentResult, SegmentSpec, result_from_attrs

log = logging.getLogger(__name__)

SegmentFunction = Callable[[SegmentSpec], SegmentResult]
BUDGET_GRACE_SECONDS = 30.0
"""After a budget stop, how long segments still running may take to end and be recorded (each was capped at the
budget, but its evaluation comes after the cap); whatever is running then is cancelled."""
FLUSH_SECONDS = 1.0
"""Tables are written at most this often (and when the run stops). A client killed in between loses
no checkpoint: the next invocation finds the ones the history does not record and records them."""
STATE_SECONDS = 5.0
"""The run state (every agent's hyper-parameters and checkpoint: large for a large pool) is written at most
this often, and when the run stops. A resumed run whose state is older than its history loses nothing:
checkpoints no record names are recovered, those of agents it did not know of go to the board only."""
HEARTBEAT_SECONDS = 30.0
"""A run writes its state at least this often, even when nothing happens, so `podracer status` tells a run
going (a state written within a few heartbeats) from one whose client was killed."""
FINISHED = ("target", "budget", "max_segments", "failing")
"""Stop reasons of an invocation that ended by itself; any other end (a killed client, a lost
scheduler, Ctrl-C) leaves it unfinished, and the next invocation continues its budget."""


@dataclasses.dataclass(frozen=True)
class Progress:
    """Reported after every finished or failed segment."""

    wall_seconds: float
    segments_completed: int
    segments_failed: int
    env_steps: int
    """Env steps of the segments this invocation finished."""
    best_score: float | None
    result: SegmentResult | None
    rank: int | None
    """Where the result entered the leaderboard (0 = top), None if it did not."""
    error: str | None
    running: int
    """Segments training now, the replacement of the segment reported on included (submitted right after)."""
    budget_spent: float | None = None
    """Seconds of `run.budget` spent: `wall_seconds` plus what an interrupted invocation that this one continues
    spent (the run stops when it reaches the budget); None from callers that do not say."""


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What one invocation did; `history` holds the reward-vs-time and reward-vs-steps curves."""

    store: str
    best_score: float | None
    best_key: str | None
    wall_seconds: float
    env_steps: int
    """Env steps of the segments this invocation finished (the history's `run_env_steps` counts all invocations')."""
    segments_completed: int
    segments_failed: int
    stop_reason: str
    """"target", "budget", "max_segments", "failing" (segments keep failing) or "interrupted"."""
    recovered: int
    """Segments an earlier, interrupted invocation finished but never recorded, recorded by this one."""
    last_error: str | None
    """The last failed segment's error, if any failed."""
    history: list[dict[str, Any]]
    """The best score after each segment of this invocation: wall_seconds, env_steps, best_score."""
    leaderboard: list[LeaderboardEntry]
    checkpoints_deleted: int = 0
    """Checkpoints the retention policy (`[store]`) deleted in this invocation."""
    segments_cancelled: int = 0
    """Segments still running when the run stopped, cancelled unrecorded (at a budget stop: those that did not end
    within the grace period after it)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_tournament(config: Config, client: Client | None = None,
                   on_progress: Callable[[Progress], None] | None = None, *, scheduler: str | None = None,
                   tls: TLSFiles | None = None, on_start: Callable[[Client], None] | None = None,
                   segment_fn: SegmentFunction = segment_task, poll_seconds: float = 1.0) -> RunSummary:
    """Run (or resume) the tournament of `config` on `client`, on the scheduler at `scheduler`, or on an
    embedded LocalCluster (neither given).

    Everything that can be checked without a cluster is checked first (a config that cannot run, a store it
    cannot continue): a `ConfigError` or `StoreError` then, and no cluster starts. `on_start` is called with
    the client once the run is about to start (the CLI prints the dashboard's address); `segment_fn` runs one
    segment on a worker (benchmarks inject a stand-in that only sleeps); `poll_seconds` is how often the
    cluster's capacity and the budget are checked.
    """
    _check_arguments(config, client, scheduler, tls, {"on_progress": on_progress, "on_start": on_start,
                                                      "segment_fn": segment_fn}, poll_seconds)
    config = pin_data(config)
    check_without_cluster(config, embedded=client is None and scheduler is None)
    try:
        trackers = open_trackers(config.logging, config.run.name, config.store_url)  # a missing library
    except TrackingError as e:  # names the directory or tracking store, as given in [logging] or on the command line
        raise ConfigError(str(e)) from None
    with trackers, _client_for(config, client, scheduler, tls) as active:
        slots = cluster_slots(active, requested=config.cluster.resource, gpu_share=gpu_share_of(config.cluster))
        check_resources(active, slots, config.cluster.resource)  # before the store is created
        fresh = not PodracerStore.exists(config.store_url)
        store = PodracerStore(config.store_url, create=True)
        # held from here to the run's end: another run on it (of this process, or of another on a local store) is
        # refused now, before either reads the tables the other would rewrite (store/run_lock.py)
        with store.hold_run():
            try:
                check_workers(active, config)  # every worker: the store, the env, the agents
            except BaseException:
                if fresh:  # refused before anything ran: leave no store behind that looks like a run's
                    store.remove_if_bare()
                raise
            if on_start is not None:
                on_start(active)
            # Preflight found the store free, seconds ago: a client of another process may have started on it
            # since (a remote store has no lock; its run state appears at that run's first write). Checked again
            # just before this loop's first write.
            check_no_run_going(store.url, store.read_run_state())
            _add_page_plugin(active, store.url)  # after the check: a refused run leaves the page to the one going
            return _Loop(config, active, store, slots, on_progress, segment_fn, poll_seconds, trackers).run()


def _check_arguments(config: Any, client: Any, scheduler: Any, tls: Any, functions: dict[str, Any],
                     poll_seconds: Any) -> None:
    """A TypeError or ValueError naming the argument of `run_tournament` that cannot work, before anything runs:
    wrong ones otherwise fail deep inside (a callback that is not callable, after the first segment)."""
    if not isinstance(config, Config):
        raise TypeError(f"run_tournament needs a Config (from load_config or config_from_dict), got "
                        f"{type(config).__name__}")
    if client is not None and not isinstance(client, Client):
        raise TypeError(f"client must be a dask.distributed.Client, got {type(client).__name__} (a scheduler's "
                        "address goes in scheduler=)")
    if client is not None and scheduler is not None:
        raise ValueError("give client= or scheduler=, not both")
    if client is not None and client.status != "running":
        raise ClusterError(f"the client given is {client.status}, not running")
    if scheduler is not None and not isinstance(scheduler, str):
        raise TypeError(f"scheduler must be an address such as 'tcp://host:8786', got {type(scheduler).__name__}")
    if tls is not None and not isinstance(tls, TLSFiles):
        raise TypeError(f"tls must be a TLSFiles, got {type(tls).__name__}")
    for name, function in functions.items():
        if (function is not None or name == "segment_fn") and not callable(function):
            raise TypeError(f"{name} must be callable, got {type(function).__name__}")
    if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)) or not poll_seconds > 0:
        raise ValueError(f"poll_seconds must be a positive number, got {poll_seconds!r}")


def _config_named(config: Config) -> str:
    """The config as the run state names it: its file's absolute path (`podracer status` may run anywhere), with
    the `--set` of its source when there were settings; a config built in Python by its source."""
    if config.file is None:
        return config.source
    return f"{config.file} with --set" if config.settings else config.file


def _add_page_plugin(client: Client, store_url: str) -> None:
    """Serve this run's store on the scheduler's Podracer pages, beside the pages of the other runs it serves
    (a shared cluster: the page links to each, and shows the newest run still going unless asked for one).

    A page this store's earlier run left is removed first, or the scheduler warns in its own log (where no filter
    of ours reaches) that it overwrites it; so are the oldest beyond `MOST_PAGES`. Each is removed only if there,
    or the scheduler logs the removal of a missing one as an error with its traceback."""
    name = page_plugin_name(store_url)
    try:
        names = client.run_on_scheduler(_page_plugin_names)
    except Exception:  # a scheduler that runs no function of ours (pickling turned off): ask it to remove this one
        names = [name]
    others = [n for n in names if n != name]
    stale = [n for n in names if n == name] + others[:max(0, len(others) - (MOST_PAGES - 1))]
    for old in stale:
        with contextlib.suppress(ValueError):
            client.unregister_scheduler_plugin(old)
    client.register_plugin(PodracerPage(store_url), name=name)


def _page_plugin_names(dask_scheduler: Any) -> list[str]:
    """The names of the scheduler's run pages, oldest run first (run on the scheduler)."""
    return [name for name, _ in named_page_plugins(dask_scheduler)]


@contextlib.contextmanager
def _client_for(config: Config, client: Client | None, scheduler: str | None,
                tls: TLSFiles | None) -> Iterator[Client]:
    """The client the run uses: the one given, one of the scheduler named, or one of a new embedded cluster."""
    if client is not None:
        yield client
    elif scheduler is not None:
        with connect(scheduler, tls) as connected:
            yield connected
    else:
        with embedded_client(config.cluster, config.segment.torch_threads) as embedded:
            yield embedded


class _Loop:
    def __init__(self, config: Config, client: Client, store: PodracerStore, slots: Slots,
                 on_progress: Callable[[Progress], None] | None, segment_fn: SegmentFunction,
                 poll_seconds: float, trackers: Trackers | None = None) -> None:
        self.config, self.client, self.store, self.slots = config, client, store, slots
        self.trackers = trackers or Trackers()  # TensorBoard, MLflow ([logging]): fed what the history gets
        self.on_progress = on_progress or (lambda progress: None)
        self.segment_fn, self.poll_seconds = segment_fn, poll_seconds
        saved = self.store.read_run_state()
        self.history = self.store.read_history()  # read once: `_recover` goes through it too
        self.history_written = len(self.history)  # records in the store: the run state says how many it knew of
        # The state is written at most every STATE_SECONDS, the history every second: a client killed in between
        # leaves records the state never counted (`missed`), whose time, segments and results are added here.
        self.missed = missed_records(saved, self.history)
        saved_wall = float(saved.get("wall_seconds", 0.0))
        newest = max((float(r.get("wall_seconds") or 0.0) for r in self.missed), default=saved_wall)
        self.wall_offset = max(saved_wall, newest)  # time spent by earlier invocations
        self.invocations = int(saved.get("invocations", 0)) + 1
        # An invocation that was cut off (killed client, lost scheduler) is continued, not restarted:
        # its budget and segment count go on from what it had spent.
        leg = saved.get("leg", {}) if saved and not saved.get("finished", False) else {}
        self.continued = bool(leg)
        missed_ended = sum(r.get("status") in ("finished", "failed") for r in self.missed)
        self.spent_before = float(leg.get("budget_spent", 0.0)) + (self.wall_offset - saved_wall if leg else 0.0)
        self.machine = Tournament(config, self.store.read_leaderboard(), saved.get("machine"),
                                  completed_before=int(leg.get("segments", 0)) + (missed_ended if leg else 0))
        self.futures: dict[str, tuple[Future, Train]] = {}
        # with_results: the queue gathers each result as its future finishes, in the background,
        # instead of one blocking round trip per `future.result()` in this loop
        self.queue = as_completed(with_results=True, raise_errors=False)
        self.started = time.monotonic()
        self.started_at = time.time()  # the wall-clock date, for `podracer status`
        self.client_id = this_client()
        # the date of the run's second 0, recorded and kept by every invocation after the first: a point of the
        # TensorBoard and MLflow logs is at origin + its wall_seconds, live or exported from the store later
        # (`podracer tensorboard`), however long the gaps between invocations were
        if self.trackers.writers:  # opened on this store's state (tracking.run_origin): their dates
            self.origin = self.trackers.origin
        else:
            recorded = state_origin(saved)
            self.origin = self.started_at if recorded is None else recorded
        self.completed = self.failed = self.env_steps = 0
        self.last_error: str | None = None
        self.curve: list[dict[str, Any]] = []
        self.stop_reason = ""
        self.zero_capacity_since: float | None = None
        self.lower_capacity_since: float | None = None
        self.unwritten_history: list[HistoryRecord] = []
        self.board_changed = False
        self.dirty = True  # the machine's state differs from the store's
        self.flushed = 0.0  # when the tables were last written
        self.state_written = 0.0  # when the run state was last written
        self.recovered = 0
        self.unwritable = False  # a table write failed (a full disk): this invocation writes no more
        # retention ([store]): each agent's own checkpoints, and the published ones a pass may delete
        self.lines: dict[int, list[str]] = {}
        self.checkpoints: set[str] = set()
        self.replay_sources = ReplaySources(self.store)
        self.collections = 0
        self.deleted = 0
        self.cancelled = 0

    def run(self) -> RunSummary:
        """The run to its stop. An exception that stops it early (Ctrl-C, the CLI's SIGTERM, a progress reader
        that exited) leaves with what was done so far as its `run_summary`, once the state is written."""
        stopped_by: BaseException | None = None
        try:
            self._recover()
            # the run state names this client before any segment starts: another process's run on this store
            # is refused from now on (run_lease.py), not a second later, after this loop's first tick
            self._flush()
            self._carry_out(self._handle(CapacityChanged(self.slots.count)))
            next_poll = time.monotonic() + self.poll_seconds
            while not self.stop_reason:
                for future, outcome in self._next_batch(timeout=max(0.0, next_poll - time.monotonic())):
                    self._segment_ended(future, outcome)
                    if self.stop_reason:
                        break
                if not self.stop_reason and time.monotonic() >= next_poll:
                    self._poll()
                    next_poll = time.monotonic() + self.poll_seconds
                if time.monotonic() - self.state_written >= HEARTBEAT_SECONDS:
                    self.dirty = True
                if time.monotonic() - self.flushed >= FLUSH_SECONDS:
                    self._flush()  # one write of each table per second at most, not per event
        except BaseException as e:
            stopped_by = e
            raise
        finally:
            self._finish()
            if stopped_by is not None:  # the CLI's --json summary of an interrupted run
                stopped_by.run_summary = self._summary()
        return self._summary()

    # -- events in ---------------------------------------------------------------------------
    def _recover(self) -> None:
        """Record the checkpoints that no history record names: segments that finished after an earlier
        invocation last wrote its tables (or after its client died). Workers publish checkpoints whole
        themselves, so these are complete results; only their bookkeeping was lost."""
        history, self.history = self.history, []
        recorded = {r["key"] for r in history}
        self.lines = own_lines(history)
        self._catch_up(self.missed)
        # a quarantined checkpoint is kept for inspection: retention never deletes it
        self.checkpoints = {key for key in self.store.checkpoint_keys() if not self.store.is_quarantined(key)}
        for key in sorted(self.checkpoints):
            if key in recorded:
                continue
            try:  # verified before its score is trusted: a damaged one is quarantined, never recorded
                result = result_from_attrs(key, self.store.load_checkpoint(key).attrs)
            except ChecksumError as e:
                log.warning("not recovering checkpoint %r: %s", key, e)
                self._carry_out(self._handle(CheckpointDamaged(key, f"ChecksumError: {e}")))
                continue
            agent_id = self.machine.in_flight.get(key)
            if agent_id is not None:
                self.lines.setdefault(agent_id, []).append(key)
            instructions = self._handle(SegmentRecovered(agent_id, result, resumed=self.continued))
            self.recovered += 1
            self.completed += 1
            self.env_steps += result.segment_env_steps
            agent = self.machine.agents.get(agent_id) if agent_id is not None else None
            record = self._record(key, agent_id, agent.group if agent else None, result.parent, None,
                                  result.generation, result.hparams, result, None, instructions)
            record["recovered"] = True
            self._carry_out(instructions)

    def _catch_up(self, missed: list[HistoryRecord]) -> None:
        """Give the machine the segments the history recorded after the saved state was written (a client killed
        within STATE_SECONDS of its last results): counted, ranked (a no-op for an entry the board holds), and each
        one's agent, which the state still has training it, continues from it. Never recorded again."""
        for record in missed:
            key, status = record["key"], record.get("status")
            if status == "failed":
                self.machine.counters["segments_failed"] += 1
            if status != "finished":
                continue
            try:
                attrs = self.store.load_checkpoint(key).attrs
            except StoreError:  # quarantined or damaged since: counted, continued from by no agent
                self.machine.counters["segments_completed"] += 1
                self.machine.counters["env_steps"] += int(record.get("segment_env_steps") or 0)
                continue
            result = result_from_attrs(key, attrs, device=attrs.get("device"))
            agent_id = self.machine.in_flight.pop(key, None)
            agent = self.machine.agents.get(record.get("agent"))  # or its agent trained on from the one before
            if agent_id is None and agent is not None and agent.checkpoint is not None \
                    and agent.checkpoint == result.parent:
                agent_id = agent.id
            # resumed=False: the leg's count already holds it (see __init__)
            self._carry_out(self._handle(SegmentRecovered(agent_id, result, resumed=False)))

    def _next_batch(self, timeout: float) -> list[tuple[Future, Any]]:
        """Whatever finished, waiting at most `timeout` seconds for something to (as_completed, with a tick)."""
        if not self.queue.has_ready():
            with self.queue.thread_condition:
                self.queue.thread_condition.wait(timeout=timeout)
        return self.queue.next_batch(block=False) if self.queue.has_ready() else []

    def _segment_ended(self, future: Future, outcome: Any) -> None:
        """Record a finished future; `outcome` is its result, or its exception if it failed."""
        key = segment_key(future.key)
        if key not in self.futures:
            return  # cancelled by an instruction: the machine has already forgotten it
        _, train = self.futures.pop(key)
        error: str | None = None
        # a result gathered is a result, whatever the future's status says by now: a scheduler that died after
        # sending it marks its futures lost, and the segment's checkpoint is in the store all the same; so is
        # the checkpoint of a task cancelled (its scheduler died) after its worker published it
        result = outcome if isinstance(outcome, SegmentResult) else self._published_result(key)
        if result is None and _cancelled_by_lost_scheduler(outcome):
            # not the segment's failure: the run stops here as for any lost scheduler, unfinished, and the next
            # one continues its budget (counted as failures, two losses in a row stopped it as "failing")
            raise self._lost_scheduler("its segments were cancelled")
        if result is not None:
            self.completed += 1
            self.env_steps += result.segment_env_steps
            self.lines.setdefault(train.agent, []).append(result.key)
            self.checkpoints.add(result.key)
            event: Event = SegmentFinished(train.agent, result)
        else:
            error = self.last_error = _describe_error(outcome)
            self.failed += 1
            # the parent's, or a rerun segment's own: the machine decides what follows (a Quarantine first)
            event = SegmentFailed(train.agent, train.key, error, damaged=_damaged_checkpoint(outcome))
        instructions = self._handle(event)
        plan = train.plan
        self._record(train.key, train.agent, train.group, plan.parent, plan.adopted, plan.generation, plan.hparams,
                     result, error, instructions)
        self._carry_out(instructions)

    def _lost_scheduler(self, why: str) -> ClusterError:
        return ClusterError(f"lost the Dask scheduler at {self.client.scheduler.address} ({why}); everything "
                            "recorded is in the store: run again on a cluster to resume")

    def _published_result(self, key: str) -> SegmentResult | None:
        """The result of a failed task whose segment published its checkpoint all the same, read back and
        verified; None when there is none, or it does not pass its checksum."""
        if not self.store.has_checkpoint(key):
            return None
        try:
            attrs = self.store.load_checkpoint(key).attrs
        except StoreError:
            return None
        return result_from_attrs(key, attrs, device=attrs.get("device"))

    def _poll(self) -> None:
        """Follow the cluster: its capacity now, and the budget."""
        if self._budget_spent() >= self.config.run.budget_seconds:
            self._carry_out(self._handle(BudgetReached()))
            return
        try:
            if self.client.status != "running":
                raise CommClosedError(f"client is {self.client.status}")
            slots = cluster_slots(self.client, wait_seconds=0, resource=self.slots.resources or {})
        except (OSError, CommClosedError, KeyError) as e:  # KeyError: an empty identity once the link is gone
            raise self._lost_scheduler(type(e).__name__) from None
        now = time.monotonic()
        if slots.count == 0:
            self.zero_capacity_since = self.zero_capacity_since or now
            waited = now - self.zero_capacity_since
            if waited > self.config.cluster.capacity_timeout:
                need = self.slots.resources or "a thread"
                raise ClusterError(f"no worker has offered {need} for {waited:.0f}s: "
                                   f"segments cannot run (workers: {describe_workers(self.client)})")
        else:
            self.zero_capacity_since = None
        # Grow at once; shrink only once the loss has lasted `shrink_delay`: a worker that died is
        # usually back within seconds (its nanny restarts it) and Dask reruns its segment meanwhile.
        if slots.count < self.machine.slots:
            self.lower_capacity_since = self.lower_capacity_since or now
            if now - self.lower_capacity_since < self.config.cluster.shrink_delay:
                return
        self.lower_capacity_since = None
        if slots.count != self.machine.slots:
            self._carry_out(self._handle(CapacityChanged(slots.count)))

    def _handle(self, event: Event) -> list[Instruction]:
        """The machine's answer to `event`. A new board is noted here, not when the answer is carried out: if
        something fails in between (a progress callback that raises), the final write still stores the board
        that the machine and the history already hold."""
        instructions = self.machine.handle(event)
        self.dirty = self.dirty or bool(instructions)
        self.board_changed = self.board_changed or any(isinstance(i, (Promote, Evict)) for i in instructions)
        return instructions

    # -- instructions out ---------------------------------------------------------------------
    def _carry_out(self, instructions: list[Instruction]) -> None:
        for instruction in instructions:
            if isinstance(instruction, Train):
                self._submit(instruction)
            elif isinstance(instruction, Cancel):
                future, train = self.futures.pop(instruction.key, (None, None))
                if future is not None:
                    self.client.cancel([future])
                    self._record_cancel(train, instruction.reason)
            elif isinstance(instruction, Quarantine):
                if not self.store.is_quarantined(instruction.key):  # a rerun may find it quarantined already
                    self.store.quarantine(instruction.key, instruction.reason)
                self.checkpoints.discard(instruction.key)  # kept for inspection: retention never deletes it
            elif isinstance(instruction, Stop):
                self.stop_reason = instruction.reason
            # Promote or Evict: the machine's board is the new table, noted by `_handle`

    def _submit(self, train: Train) -> None:
        spec = segment_spec(train, self.store.url, self.config.run.budget_seconds - self._budget_spent())
        # the store it belongs to, on the scheduler's task: the Podracer page lists this run's segments only,
        # not those of another run on the cluster (monitor.py)
        with dask.annotate(**{STORE_ANNOTATION: self.store.url}):
            future = self.client.submit(self.segment_fn, spec, key=task_key(spec.key),
                                        resources=self.slots.resources, pure=False,
                                        retries=self.config.tournament.retries)
        self.futures[train.key] = (future, train)
        self.queue.add(future)

    # -- records --------------------------------------------------------------------------------
    def _record(self, key: str, agent: int | None, group: str | None, parent: str | None, adopted: bool | None,
                generation: int, hparams: dict[str, Any], result: SegmentResult | None, error: str | None,
                instructions: list[Instruction]) -> HistoryRecord:
        """The history record of a finished or failed segment, queued for the next write: what it was asked
        to do (its agent, parent, hyper-parameters), and what it did."""
        rank = next((i.rank for i in instructions if isinstance(i, Promote)), None)
        record: HistoryRecord = {
            "key": key, "agent": agent, "group": group, "parent": parent, "adopted": adopted,
            "generation": generation, "hparams": hparams,
            "status": "finished" if result else "failed", "score": result.score if result else None,
            "score_stderr": result.score_stderr if result else None, "rank": rank,
            "segment_env_steps": result.segment_env_steps if result else 0,
            "lineage_env_steps": result.lineage_env_steps if result else None,
            "run_env_steps": self.machine.counters["env_steps"], "wall_seconds": self.wall_offset + self._elapsed(),
            "train_seconds": result.train_seconds if result else None,
            "metrics": result.metrics if result else {}, "device": result.device if result else None,
            "error": error,
        }
        self.unwritten_history.append(record)
        best = self.machine.best_score()
        self.curve.append({"wall_seconds": self._elapsed(), "env_steps": self.env_steps, "best_score": best})
        self.on_progress(Progress(self._elapsed(), self.completed, self.failed, self.env_steps, best, result, rank,
                                  error, self._running_after(instructions), budget_spent=self._budget_spent()))
        return record

    def _running_after(self, instructions: list[Instruction]) -> int:
        """Segments training once `instructions` are carried out: the progress is reported just before, and a
        finished segment's replacement (a Train) is running by the time the line is read."""
        started = sum(isinstance(i, Train) for i in instructions)
        cancelled = sum(isinstance(i, Cancel) and i.key in self.futures for i in instructions)
        return len(self.futures) + started - cancelled

    def _record_cancel(self, train: Train, reason: str) -> None:
        """A cancelled segment is recorded too (never scored): the pool's decisions stay traceable."""
        agent, plan = self.machine.agents[train.agent], train.plan
        self.unwritten_history.append({
            "key": train.key, "agent": train.agent, "group": train.group, "parent": plan.parent,
            "adopted": plan.adopted, "generation": plan.generation, "hparams": plan.hparams,
            "status": "cancelled", "reason": reason, "agent_score": agent.score,
            "score": None, "rank": None, "segment_env_steps": 0, "run_env_steps": self.machine.counters["env_steps"],
            "wall_seconds": self.wall_offset + self._elapsed(), "error": None,
        })

    def _flush(self) -> None:
        """Write what changed: history first, then the board, then the state that refers to both. A store that
        cannot be written (a full disk) stops the run: each write replaces one file whole, so what was
        written before stays readable, and the next run on the store recovers the segments that finished."""
        if self.unwritable or not (self.dirty or self.unwritten_history):
            return
        try:
            self._write_tables()
        except OSError as e:
            self.unwritable = True  # never again in this invocation: a half-done append must not be repeated
            raise StoreError(f"cannot write to store '{self.store.url}' ({e.strerror or type(e).__name__}); what "
                             f"it held before is kept: make room and run again to resume") from None

    def _write_tables(self) -> None:
        self.dirty, self.flushed = False, time.monotonic()
        self.store.extend_history(self.unwritten_history)
        self.history_written += len(self.unwritten_history)
        self.trackers.record(self.unwritten_history)  # returns at once: a background thread writes them
        self.unwritten_history = []
        if self.board_changed:
            self.store.write_leaderboard(self.machine.board)
            self.board_changed = False
        if not self.stop_reason and self.flushed - self.state_written < STATE_SECONDS:
            self.dirty = True  # the state still differs from the store's
            return
        self.state_written = self.flushed
        retention = self.config.store
        self.store.write_run_state({
            "env": self.config.run.env, "env_kwargs": self.config.run.env_kwargs, "machine": self.machine.to_state(),
            "eval_env_kwargs": self.config.run.eval_env_kwargs,  # what the board was scored with (preflight.py)
            "invocations": self.invocations,
            "wall_seconds": self.wall_offset + self._elapsed(),
            "finished": self.stop_reason in FINISHED, "stop_reason": self.stop_reason or None,
            "leg": {"budget_spent": self._budget_spent(), "segments": self.machine.completed_now},
            "retention": {"on": retention.retention, "keep_per_agent": retention.keep_per_agent},
            # dates (Unix seconds): a state not finished and not stopped, written recently, is a run going now
            "invocation_started_at": self.started_at, "written_at": time.time(), "origin": self.origin,
            "heartbeat_seconds": HEARTBEAT_SECONDS, "client": self.client_id,  # one run per store (run_lease.py)
            "history_records": self.history_written,  # a resume counts the records after these (`missed`)
            # what `podracer status` and `podracer tensorboard` know of the config that ran it
            "name": self.config.run.name, "budget_seconds": self.config.run.budget_seconds,
            "max_segments": self.config.run.max_segments,
            "config": _config_named(self.config), "settings": list(self.config.settings),
        })
        if retention.retention:
            self._collect()  # after the state: a resumed run never finds an agent on a deleted checkpoint

    def _collect(self) -> None:
        """Delete the checkpoints that can no longer matter (population/retention.py). Runs right after the
        tables and the run state are written, so every deleted checkpoint's history record is stored, and no
        stored agent, entry or segment refers to it; the first pass also finishes deletions a crash cut off."""
        machine = self.machine
        holders = Holders(
            board=frozenset(e["key"] for e in machine.board),
            in_flight_parents=frozenset(t.plan.parent for _, t in self.futures.values() if t.plan.parent),
            agent_latest=frozenset(a.checkpoint for a in machine.agents.values() if a.checkpoint),
            live_lines={i: self.lines.get(i, []) for i, a in machine.agents.items() if a.active},
            pinned=frozenset(self.store.pinned()))
        keep = checkpoints_to_keep(holders, self.config.store.keep_per_agent, self.replay_sources)
        done = collect(self.store, keep, self.checkpoints, finish_cut_off=self.collections == 0)
        self.collections += 1
        for key, _ in done.deleted:
            self.checkpoints.discard(key)
            self.replay_sources.forget(key)
        self.deleted += len(done.deleted)

    def _finish(self) -> None:
        """After a budget stop, collect segments that end within a few seconds (they were capped at the
        budget); cancel whatever is left."""
        if self.stop_reason == "budget" and self.futures:
            running = [f for f, _ in self.futures.values()]
            # distributed's `wait` raises at its timeout rather than returning the unfinished: a segment still
            # running then (a long evaluation, a first iteration that never ends) is cancelled below
            with contextlib.suppress(TimeoutError):
                wait(running, timeout=BUDGET_GRACE_SECONDS)
            for future in [f for f in running if f.done()]:
                outcome = future.result() if future.status == "finished" else future.exception()
                self._segment_ended(future, outcome)  # recorded; a stopped machine starts nothing new
        if self.futures:
            self.cancelled = len(self.futures)
            with contextlib.suppress(Exception):  # the scheduler may be gone: nothing left to cancel then
                self.client.cancel([f for f, _ in self.futures.values()])
            self.futures.clear()
        self.stop_reason = self.stop_reason or "interrupted"
        self.dirty = True
        self._flush()

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _budget_spent(self) -> float:
        """Wall-clock seconds of this invocation, plus those of the interrupted invocation it continues."""
        return self.spent_before + self._elapsed()

    def _summary(self) -> RunSummary:
        board = self.machine.board
        return RunSummary(
            store=self.store.url, best_score=self.machine.best_score(), best_key=board[0]["key"] if board else None,
            wall_seconds=self._elapsed(), env_steps=self.env_steps, segments_completed=self.completed,
            segments_failed=self.failed, stop_reason=self.stop_reason, recovered=self.recovered,
            last_error=self.last_error, history=self.curve, leaderboard=board, checkpoints_deleted=self.deleted,
            segments_cancelled=self.cancelled,
        )


def describe_workers(client: Client) -> str:
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    return ", ".join(f"{w.get('name')}: {w.get('resources') or {}}" for w in workers) or "none"


def _cancelled_by_lost_scheduler(outcome: Any) -> bool:
    """Whether a task ended because the client lost its scheduler (Dask cancels every future then)."""
    exception = outcome[1] if isinstance(outcome, tuple) and len(outcome) == 3 else outcome
    return isinstance(exception, FutureCancelledError) and exception.reason == "scheduler-connection-lost"


def _damaged_checkpoint(outcome: Any) -> str | None:
    """The key of the checkpoint a failed segment found damaged, if its error is a ChecksumError."""
    exception = outcome[1] if isinstance(outcome, tuple) and len(outcome) == 3 else outcome
    return exception.key if isinstance(exception, ChecksumError) else None


def _describe_error(exception: Any) -> str:
    """One line: the exception's type and the first line of its message."""
    if isinstance(exception, tuple) and len(exception) == 3:  # as_completed(with_results) gives (type, value, tb)
        exception = exception[1]
    if not isinstance(exception, BaseException):
        return f"segment ended without a result ({type(exception).__name__})"
    message = str(exception).splitlines()[0] if str(exception) else ""
    return f"{type(exception).__name__}: {message}"[:500]
