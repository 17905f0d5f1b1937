"""TensorBoard event files of a tournament: one run (subdirectory) per agent.

Written on the client, from history records, with torch's `SummaryWriter` (it needs the `tensorboard`
package: the `tensorboard` extra). Each finished segment adds, at x = the lineage's env steps and
wall time = the run's clock (`Trackers.origin` + the record's `wall_seconds`), the scalars of
`scalars.segment_scalars` and a text note (`segment`) with its key, parent and hyper-parameters.
"""

from __future__ import annotations

import importlib.util
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dask_podracer.tracking.errors import TrackingError
from dask_podracer.tracking.scalars import agent_run, logged, segment_scalars, segment_text, step

STORE_SUFFIX = ".podracer-store"
"""Beside a run's directory (`DIR/<run name>.podracer-store`, outside it: it holds one directory per agent), the
store whose history the run logs."""
OPEN_WRITERS = 64
"""Agents whose event files stay open at once (each open writer holds a file and a thread); the least
recently written one is closed past this, and a later segment of it starts a new file in the same run."""


def require_tensorboard() -> None:
    """One line naming the extra when the writer cannot be imported."""
    if importlib.util.find_spec("tensorboard") is None:
        raise TrackingError("[logging] tensorboard needs the tensorboard package: "
                            "pip install 'dask-podracer[tensorboard]'")


class TensorBoardLog:
    """Writes records under `directory`, one subdirectory per agent (`agent-000`, ...)."""

    def __init__(self, directory: str | Path, origin: float, store_url: str | None = None) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self._writer_type = SummaryWriter
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if store_url is not None and self.directory.resolve().name:  # (a root directory has no place beside it)
                self._claim(store_url)
        except OSError as e:  # a file in its place, or on its path: said before any segment runs
            raise TrackingError(f"cannot write TensorBoard event files under '{self.directory}': "
                                f"{e.strerror or type(e).__name__}") from None
        self.origin = origin
        self._writers: OrderedDict[str, Any] = OrderedDict()

    def write(self, records: Sequence[Mapping[str, Any]]) -> None:
        for record in records:
            if not logged(record):
                continue
            writer = self._writer(agent_run(record))
            x, wall = step(record), self.origin + float(record.get("wall_seconds") or 0.0)
            for tag, value in segment_scalars(record).items():
                writer.add_scalar(tag, value, global_step=x, walltime=wall)
            writer.add_text("segment", segment_text(record), global_step=x, walltime=wall)
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        while self._writers:
            self._writers.popitem(last=False)[1].close()

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

    def _writer(self, run: str) -> Any:
        writer = self._writers.pop(run, None)
        if writer is None:
            if len(self._writers) >= OPEN_WRITERS:
                self._writers.popitem(last=False)[1].close()
            writer = self._writer_type(log_dir=str(self.directory / run), flush_secs=10)
        self._writers[run] = writer  # most recently used last
        return writer
