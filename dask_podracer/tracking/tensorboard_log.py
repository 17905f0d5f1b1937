"""TensorBoard event files of a tournament: one run (subdirectory) per agent.

Written on the client, from history records (it needs the `tensorboard` package: the `tensorboard` extra). Each
finished segment adds, at x = the lineage's env steps and wall time = the run's clock (`Trackers.origin` + the
record's `wall_seconds`), the scalars of `scalars.segment_scalars` and a text note (`segment`) with its key, parent
and hyper-parameters.

Each agent's run gets one event file a process, appended to at each write and closed in between, with the record
framing of tensorboard's own `RecordWriter`. torch's `SummaryWriter` holds a file and a thread for each agent and
cannot reopen a file: kept for at most 64 agents at once, a larger pool opened a new file at nearly every segment
(a file per record when the agents took turns).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dask_podracer.tracking.errors import TrackingError
from dask_podracer.tracking.scalars import agent_run, logged, segment_scalars, segment_text, step

STORE_SUFFIX = ".podracer-store"
"""Beside a run's directory (`DIR/<run name>.podracer-store`, outside it: it holds one directory per agent), the
store whose history the run logs."""
_FILE_NUMBERS = itertools.count()
"""Tells apart the files of one second of one process, as torch's writer does."""


def require_tensorboard() -> None:
    """One line naming the extra when the writer cannot be imported."""
    if importlib.util.find_spec("tensorboard") is None:
        raise TrackingError("[logging] tensorboard needs the tensorboard package: "
                            "pip install 'dask-podracer[tensorboard]'")


class TensorBoardLog:
    """Writes records under `directory`, one subdirectory per agent (`agent-000`, ...)."""

    def __init__(self, directory: str | Path, origin: float, store_url: str | None = None) -> None:
        require_tensorboard()
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if store_url is not None and self.directory.resolve().name:  # (a root directory has no place beside it)
                self._claim(store_url)
        except OSError as e:  # a file in its place, or on its path: said before any segment runs
            raise TrackingError(f"cannot write TensorBoard event files under '{self.directory}': "
                                f"{e.strerror or type(e).__name__}") from None
        self.origin = origin
        self._files: dict[str, Path] = {}
        """Each agent run's event file of this process (made at its first record)."""

    def write(self, records: Sequence[Mapping[str, Any]]) -> None:
        from torch.utils.tensorboard.summary import scalar, text

        events: dict[str, list[Any]] = {}
        for record in records:
            if not logged(record):
                continue
            x, wall = step(record), self.origin + float(record.get("wall_seconds") or 0.0)
            mine = events.setdefault(agent_run(record), [])
            mine += [_event(scalar(tag, value), x, wall) for tag, value in segment_scalars(record).items()]
            mine.append(_event(text("segment", segment_text(record)), x, wall))
        for run, run_events in events.items():
            self._append(run, run_events)

    def close(self) -> None:
        """Nothing stays open between writes."""

    def _append(self, run: str, events: Sequence[Any]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.summary.writer.record_writer import RecordWriter

        path = self._files.get(run)
        if path is None:
            (self.directory / run).mkdir(exist_ok=True)
            name = f"{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_NUMBERS)}"
            path = self._files[run] = self.directory / run / f"events.out.tfevents.{name}"
            events = [Event(wall_time=time.time(), file_version="brain.Event:2"), *events]  # a file's first event
        with open(path, "ab") as file:
            records = RecordWriter(file)
            for event in events:
                records.write(event.SerializeToString())

    def _claim(self, store_url: str) -> None:
        """Record that this directory logs `store_url`'s run; refuse one that logs another store's (two runs of one
        `run.name`, e.g. one config's on two stores, would draw their agents' points as one line)."""
        directory = self.directory.resolve()  # `.` has no name to add to
        marker = directory.with_name(directory.name + STORE_SUFFIX)
        recorded = marker.read_text().strip() if marker.is_file() else None
        if recorded is None or (recorded != store_url and not any(self.directory.rglob("events.out.tfevents.*"))):
            marker.write_text(store_url + "\n")  # a new directory, or one logged before stores were recorded
        elif recorded != store_url:
            raise TrackingError(f"'{self.directory}' holds the TensorBoard logs of another store's run "
                                f"('{recorded}'): give another directory or run.name")


def _event(summary: Any, x: int, wall: float) -> Any:
    from tensorboard.compat.proto.event_pb2 import Event

    return Event(wall_time=wall, step=x, summary=summary)
