"""What the Podracer pages show at one moment, as plain data: no Dask, no Bokeh, no Zarr.

The scheduler plugin (`population/monitor.py`) fills it from the store's tables and the
scheduler's record of which segment runs where; the plain page (`page.py`) and the live
Bokeh page (`live.py`) only draw it.
"""

from __future__ import annotations

import dataclasses
import html
import time
import urllib.parse
from collections.abc import Collection, Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Running:
    """One segment of the training pool."""

    key: str
    """The segment's checkpoint key (its Dask task is `segment-<key>`)."""
    worker: str
    """Address of the worker it runs on."""
    since: float
    """When it began running there (epoch seconds, the scheduler's clock)."""
    agent: int | None = None
    """The agent it trains; None until the run's state naming it is written (at most 5 s)."""
    hparams: Mapping[str, Any] | None = None
    device: str = "cpu"
    """Where the worker trains: `cpu`, or `cuda` and the GPU's name where the worker reports it (NVML)."""
    gpu_memory_used: int | None = None
    """Bytes of the worker's GPU memory in use, where NVML is available (Dask's worker metrics)."""
    gpu_memory_total: int | None = None
    gpu_utilization: float | None = None
    """Percent, where NVML is available."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The leaderboard, the history (for the curves) and the training pool of one tournament."""

    store_url: str | None
    """None when no tournament has run on this scheduler yet."""
    board: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    running: list[Running] = dataclasses.field(default_factory=list)
    error: str | None = None
    """Why the store could not be read, if it could not."""
    taken: float = dataclasses.field(default_factory=time.time)
    runs: tuple[str, ...] = ()
    """The stores of every run the scheduler keeps a page for, oldest first (this one among them): the page links
    to the others (`?store=`)."""

    @property
    def message(self) -> str | None:
        """A line to show instead of the tables, or None when there is something to show."""
        if self.store_url is None:
            return "no tournament has run on this scheduler yet: the page fills in once one starts"
        if self.error:
            return f"cannot read the store: {self.error}"
        return None


def format_hparams(hparams: Mapping[str, Any] | None, first: Collection[str] = ()) -> str:
    """`actor_lr=0.0003, hidden=[64, 64]`: the names in `first`, then the others, each sorted; floats to 3 digits."""
    items = sorted((hparams or {}).items(), key=lambda kv: (kv[0] not in first, kv[0]))
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in items)


def varying(running: Sequence[Running]) -> set[str]:
    """The hyper-parameters whose values differ between the running segments (what the search changed)."""
    names = {name for r in running for name in (r.hparams or {})}
    return {name for name in names if len({repr((r.hparams or {}).get(name)) for r in running}) > 1}


def format_gpu_memory(r: Running) -> str:
    """`3.2 / 79.6 GiB` where the worker reports its GPU's memory (NVML), else `-`."""
    if r.gpu_memory_used is None:
        return "-"
    total = f" / {r.gpu_memory_total / 2**30:.1f}" if r.gpu_memory_total else ""
    return f"{r.gpu_memory_used / 2**30:.1f}{total} GiB"


def runs_html(snapshot: Snapshot) -> str:
    """`runs on this scheduler: a.zarr · b.zarr`, each other run a link to its page (`?store=`), this one bold;
    empty when the scheduler has served one run only."""
    if len(snapshot.runs) < 2:
        return ""
    links = [f"<b>{html.escape(url)}</b>" if url == snapshot.store_url else
             f"<a href='?store={urllib.parse.quote(url, safe='')}'>{html.escape(url)}</a>" for url in snapshot.runs]
    return f"runs on this scheduler: {' · '.join(links)}"
