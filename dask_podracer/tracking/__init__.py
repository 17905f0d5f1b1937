"""Where RL users already look: a tournament's finished segments, logged to TensorBoard and to MLflow.

    trackers = open_trackers(config.logging, run_name, store_url)   # raises TrackingError before any work
    trackers.record(records)      # history records, as they are appended to the store's history
    trackers.close()              # flushes and ends the runs

The client writes; workers never do. Both libraries are optional extras and are imported only when
`[logging]` names them. Writes happen on a background thread, so a slow tracking server never holds
up the tournament's loop; a tracker that fails while the run goes is reported once (a warning) and
then left alone: the store is the record, and `podracer tensorboard STORE --out DIR` rewrites the
TensorBoard files from it at any time.

The wall-clock of every point is the run's clock: the date the store's first run started plus the
record's `wall_seconds` (the run's seconds over all invocations, gaps between them left out), so a
live log and one written later from the store put every point at the same date.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, Self

from dask_podracer.config import LoggingConfig
from dask_podracer.store import resolve_url
from dask_podracer.tracking.errors import TrackingError

logger = logging.getLogger(__name__)

CHUNK = 100
"""History records handed to the trackers at once."""

__all__ = ["Trackers", "TrackingError", "default_run_name", "open_trackers", "run_origin", "state_origin"]


class Writer(Protocol):
    def write(self, records: Sequence[Mapping[str, Any]]) -> None: ...

    def close(self) -> None: ...


class Trackers:
    """The open trackers of one run; `record` hands them history records, `close` flushes and ends them."""

    def __init__(self, writers: Sequence[Writer] = (), origin: float = 0.0) -> None:
        self.writers = list(writers)
        self.origin = origin
        """Unix date of wall_seconds 0 (see the module's docstring)."""
        self._queue: queue.Queue[list[dict[str, Any]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._failed: set[int] = set()
        self._queued = 0  # records handed to `record` (counted by the caller's thread)
        self._written = 0  # records every writer has been given in turn (counted by the writing thread)

    def record(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Log `records` (any status: only finished segments are logged). Returns at once."""
        if not self.writers or not records:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name="podracer-trackers", daemon=True)
            self._thread.start()
        # agent by agent, each one's records in their order (the trackers keep no other order): a long history's
        # agents took turns, so a chunk held one record of each, MLflow got one call per record (6,000 records of
        # 100 agents: 93 s)
        records = sorted((dict(r) for r in records), key=lambda record: str(record.get("agent")))
        for i in range(0, len(records), CHUNK):  # in chunks, so that `close` can tell slow from stuck
            self._queue.put(records[i:i + CHUNK])
        self._queued += len(records)

    def close(self, timeout: float = 120.0) -> None:
        """Write what is queued, then close every tracker. Waits as long as the trackers keep writing, but at most
        `timeout` seconds for any one chunk (a tracking server that stopped answering); what is left unwritten then
        is said in a warning."""
        if self._thread is not None:
            self._queue.put(None)
            written = -1
            while self._thread.is_alive() and self._written != written:  # a whole history (`podracer tensorboard`
                written = self._written                                     # of a long run) takes minutes
                self._thread.join(timeout)
            if self._thread.is_alive():
                names = ", ".join(type(w).__name__ for i, w in enumerate(self.writers) if i not in self._failed)
                logger.warning("podracer: %d history records were not logged (%s wrote none in %.0fs): the store "
                               "keeps every record", self._queued - self._written, names, timeout)
            self._thread = None
        for i, writer in enumerate(self.writers):
            if i not in self._failed:
                self._call(i, writer.close)
        self.writers = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drain(self) -> None:
        while (records := self._queue.get()) is not None:
            for i, writer in enumerate(self.writers):
                if i not in self._failed:
                    self._call(i, writer.write, records)
            self._written += len(records)

    def _call(self, i: int, method: Any, *args: Any) -> None:
        try:
            method(*args)
        except Exception as e:  # noqa: BLE001 - a tracker must not stop the tournament
            self._failed.add(i)
            first = str(e).splitlines()[0] if str(e) else ""
            logger.warning("podracer: %s stopped logging: %s: %s (the store keeps every record)",
                           type(self.writers[i]).__name__, type(e).__name__, first)


def open_trackers(logging: LoggingConfig, run_name: str, store_url: str, *, origin: float | None = None) -> Trackers:
    """The trackers `logging` names (none: a `Trackers` that does nothing and imports neither library).

    `run_name` names the TensorBoard subdirectory (`DIR/<run_name>/agent-000`) and the MLflow experiment;
    `origin` (default: `run_origin(store_url)`) is the date of the run's second 0.
    Raises `TrackingError` (one line) when a library is missing or a tracking store cannot be opened.
    """
    if not (logging.tensorboard or logging.mlflow):
        return Trackers()
    origin = run_origin(store_url) if origin is None else origin
    # the store as PodracerStore names it: `runs/x.zarr` of two directories (every config's default is relative) is
    # two stores, whose runs must not log into one MLflow run or TensorBoard directory
    store_url = resolve_url(store_url)
    writers: list[Writer] = []
    try:
        if logging.tensorboard:
            from dask_podracer.tracking.tensorboard_log import TensorBoardLog

            writers.append(TensorBoardLog(Path(logging.tensorboard) / run_name if run_name else
                                          Path(logging.tensorboard), origin, store_url))
        if logging.mlflow:
            from dask_podracer.tracking.mlflow_log import MLflowLog

            writers.append(MLflowLog(logging.mlflow, run_name or "dask_podracer", store_url, origin))
    except BaseException:
        for writer in writers:
            writer.close()
        raise
    return Trackers(writers, origin)


def run_origin(store_url: str) -> float:
    """The Unix date of the run's second 0 (`state_origin` of the store's run state); now, for a store that has
    no state yet (a new run) or none that says when it was written (an older store)."""
    from dask_podracer.store import PodracerStore, StoreError

    try:
        if PodracerStore.exists(store_url):
            origin = state_origin(PodracerStore(store_url).read_run_state())
            if origin is not None:
                return origin
    except (StoreError, OSError, ValueError):
        pass
    return time.time()


def state_origin(state: Mapping[str, Any]) -> float | None:
    """The Unix date of the run's second 0 that a run state records: its `origin`, kept from the first
    invocation on; in a state written before that was recorded, its last write date less its `wall_seconds`
    (which moves on by every gap between invocations). None when the state says neither."""
    if isinstance(state.get("origin"), (int, float)):
        return float(state["origin"])
    if isinstance(state.get("written_at"), (int, float)):
        return float(state["written_at"]) - float(state.get("wall_seconds") or 0.0)
    return None


def default_run_name(store_url: str) -> str:
    """A run's name from its store: the store's last path part without `.zarr` (`runs/pendulum.zarr` -> `pendulum`)."""
    name = store_url.rstrip("/").rsplit("/", 1)[-1]
    return name.removesuffix(".zarr") or "dask_podracer"
