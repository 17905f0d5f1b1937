"""What the Podracer pages of the Dask dashboard read, from a scheduler plugin; and the plain page.

`run_tournament` registers a `PodracerPage` on the scheduler of whatever cluster it runs
on (the embedded LocalCluster or a remote one), one per store (`page_plugin_name`). The plugin
knows the run's store and records, from the scheduler's transitions, when each segment began
running where. `current_snapshot(scheduler, store)` combines the two for the pages: the run of
`store` (a page's `?store=` argument), or without one the newest run still going, else the newest;
each page links to the other runs the scheduler has served (several runs may share a cluster):

- the live Bokeh page at `/individual-podracer` (and its `-leaderboard`, `-pool`,
  `-curves`, `-lag`, `-lineage`, `-hparams` panels), when the scheduler preloaded
  `population/dashboard_preload.py`;
- the plain HTML page, always at `/podracer.html`, and at `/individual-podracer` too
  when the live page is absent (a scheduler started without the preload).

Everything here only reads: the store's small tables, cached for a second so that any
number of open pages cost one read a second. Refreshes read them in a thread, off the
scheduler's event loop; only a page's first drawing (Bokeh builds documents
synchronously) reads on the loop, when the cache is older than a second.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from fractions import Fraction
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado import web

from dask_podracer.dashboard.page import render_page
from dask_podracer.dashboard.snapshot import Running, Snapshot
from dask_podracer.population.task_keys import segment_key
from dask_podracer.store.records import HistoryRecord, LeaderboardEntry

ROUTE = "/individual-podracer"
PLAIN_ROUTE = "/podracer.html"
STORE_ANNOTATION = "podracer_store"
"""The Dask annotation naming the store of the run that submitted a segment (several runs may share a cluster)."""
CACHE_SECONDS = 1.0
"""The store's tables are read at most this often, whatever the number of open pages."""
MOST_PAGES = 16
"""Runs a scheduler keeps a page for (the newest; a long-lived shared scheduler serves many runs)."""


@dataclasses.dataclass(frozen=True)
class _Tables:
    board: list[LeaderboardEntry]
    history: list[HistoryRecord]
    agents: dict[str, dict[str, Any]]
    """Segment key -> the state of the agent it trains, from the run's state."""
    error: str | None = None


class PodracerPage(SchedulerPlugin):
    name = "podracer-page"

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url
        self.registered = time.time()  # the run's start: the newest run's page is the default
        self.started: dict[str, float] = {}  # segment key -> when it began processing
        self._cache: tuple[float, _Tables] | None = None

    async def start(self, scheduler: Any) -> None:
        if getattr(scheduler, "_podracer_route", False):
            return  # a later run re-registered the plugin: the handlers look the current one up by name
        routes: list[tuple[str, type, dict[str, Any]]] = [(PLAIN_ROUTE, _PlainPage, {"scheduler": scheduler})]
        if ROUTE not in bokeh_paths(scheduler):  # no preload: the plain page takes the live page's place
            routes.append((ROUTE, _PlainPage, {"scheduler": scheduler}))
        scheduler.http_application.add_handlers(r".*", routes)
        scheduler._podracer_route = True

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if segment_key(key) is not None:
            if finish == "processing":
                self.started[key] = time.time()
            elif start == "processing":
                self.started.pop(key, None)

    def read_tables(self) -> _Tables:
        """The store's leaderboard, history and running agents, at most `CACHE_SECONDS` old. Blocking."""
        cached = self._cache
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        from dask_podracer.store import PodracerStore, StoreError

        try:
            store = PodracerStore(self.store_url)  # without create=True: opening writes nothing
            agents = store.read_run_state().get("machine", {}).get("agents", [])
            tables = _Tables(store.read_leaderboard(), store.read_history(),
                             {a["running"]: a for a in agents if a.get("running")})
        except (StoreError, OSError, ValueError) as e:
            tables = _Tables([], [], {}, error=str(e).splitlines()[0] if str(e) else type(e).__name__)
        self._cache = (time.monotonic(), tables)
        return tables

    async def snapshot(self, scheduler: Any) -> Snapshot:
        """The pages' data. The store is read in a thread: the scheduler's event loop never waits on it."""
        tables = await asyncio.get_running_loop().run_in_executor(None, self.read_tables)
        return self._combine(scheduler, tables)

    def snapshot_now(self, scheduler: Any) -> Snapshot:
        """The same, reading the store on the calling thread (a page's first drawing)."""
        return self._combine(scheduler, self.read_tables())

    def _combine(self, scheduler: Any, tables: _Tables) -> Snapshot:
        running = []
        for key, since in sorted(self.started.items(), key=lambda kv: kv[1]):
            task = scheduler.tasks.get(key)
            if task is None or task.processing_on is None or not self._own(task):
                continue
            agent = tables.agents.get(segment_key(key), {})
            running.append(Running(segment_key(key), task.processing_on.address, since,
                                   agent.get("id"), agent.get("hparams"),
                                   **worker_device(task.processing_on, gpu_share(task))))
        return Snapshot(self.store_url, tables.board, tables.history, running, tables.error,
                        runs=tuple(page.store_url for page in page_plugins(scheduler)))

    def _own(self, task: Any) -> bool:
        """Whether a segment's task belongs to this run: another run on the same scheduler has segments of its own,
        and a task of the user's may have a name like theirs. Each run's tasks name their store (orchestrator)."""
        return (getattr(task, "annotations", None) or {}).get(STORE_ANNOTATION) == self.store_url


def gpu_share(task: Any) -> float | None:
    """The part of a GPU a segment's task asked for (`cluster.segments_per_gpu` as threads: 1/N), or None."""
    share = (getattr(task, "resource_restrictions", None) or {}).get("GPU")
    return None if share is None else float(share)


def worker_device(worker: Any, share: float | None = None) -> dict[str, Any]:
    """What the pool table says of a worker's device, from the scheduler's `WorkerState`: `cpu`, or `cuda` with
    the GPU's name, memory in use and utilisation where the worker reports them. Dask's workers report NVML's
    figures in their heartbeats when pynvml (nvidia-ml-py) is installed and finds a GPU (`metrics`:
    `gpu_memory_used`, `gpu-memory-total`, `gpu_utilization`; `extra["gpu"]["name"]`), for the first GPU the
    worker sees (`CUDA_VISIBLE_DEVICES`); a worker that advertises a GPU resource without them shows `cuda`.
    The figures are the whole GPU's, shared by every segment on it; a segment that asked for a `share` of a GPU
    below 1 (segments sharing it as threads) shows it, as `cuda (1/2 GPU)`."""
    metrics = getattr(worker, "metrics", None) or {}
    gpu = (getattr(worker, "extra", None) or {}).get("gpu") or {}
    used = metrics.get("gpu_memory_used")
    part = f" ({Fraction(share).limit_denominator(64)} GPU)" if share is not None and share < 1 else ""
    if used is None:
        resources = getattr(worker, "resources", None) or {}
        return {"device": "cuda" + part if resources.get("GPU") else "cpu"}
    utilization = metrics.get("gpu_utilization")
    return {"device": (f"cuda: {gpu['name']}" if gpu.get("name") else "cuda") + part, "gpu_memory_used": int(used),
            "gpu_memory_total": metrics.get("gpu-memory-total") or gpu.get("memory-total"),
            "gpu_utilization": None if utilization is None else float(utilization)}


def page_plugin_name(store_url: str) -> str:
    """The name a run's `PodracerPage` is registered under: one per store, so that runs sharing a scheduler each
    keep theirs (a second run of the same store replaces the first's)."""
    return f"{PodracerPage.name} {store_url}"


def named_page_plugins(scheduler: Any) -> list[tuple[str, PodracerPage]]:
    """The scheduler's run pages with the names they are registered under, oldest run first."""
    pages = [(name, p) for name, p in list(scheduler.plugins.items()) if isinstance(p, PodracerPage)]
    return sorted(pages, key=lambda item: getattr(item[1], "registered", 0.0))  # 0: a page of an older client's run


def page_plugins(scheduler: Any) -> list[PodracerPage]:
    """The scheduler's run pages, oldest run first."""
    return [page for _, page in named_page_plugins(scheduler)]


def chosen_page(scheduler: Any, store: str | None = None) -> PodracerPage | None:
    """The page of `store`'s run; without `store`, the newest run still going, else the newest (None before any).
    A page left open thus follows the runs: when the newest ends while an earlier one goes on, it shows that one."""
    pages = page_plugins(scheduler)
    if store is not None:
        return next((page for page in pages if page.store_url == store), None)
    if len(pages) > 1:
        going = stores_going(scheduler)
        pages = [page for page in pages if page.store_url in going] or pages
    return (pages or [None])[-1]


def stores_going(scheduler: Any) -> set[str]:
    """The stores of the runs going on: those whose segments' tasks the scheduler holds (a run that ended released
    them). One pass over the tasks, whatever the number of pages."""
    return {(getattr(task, "annotations", None) or {}).get(STORE_ANNOTATION) for task in list(scheduler.tasks.values())}


def _unknown_store(scheduler: Any, store: str) -> Snapshot:
    runs = tuple(page.store_url for page in page_plugins(scheduler))
    return Snapshot(store, error="no run of this store on this scheduler", runs=runs)


async def current_snapshot(scheduler: Any, store: str | None = None) -> Snapshot:
    """What the tournament of `store` (or `chosen_page`'s) on `scheduler` looks like now (an empty snapshot
    before any)."""
    page = chosen_page(scheduler, store)
    if page is None:
        return Snapshot(None) if store is None else _unknown_store(scheduler, store)
    return await page.snapshot(scheduler)


def current_snapshot_now(scheduler: Any, store: str | None = None) -> Snapshot:
    """The same, reading the store (if the cache is stale) on the calling thread."""
    page = chosen_page(scheduler, store)
    if page is None:
        return Snapshot(None) if store is None else _unknown_store(scheduler, store)
    return page.snapshot_now(scheduler)


def bokeh_paths(scheduler: Any) -> set[str]:
    """The routes of the scheduler's Bokeh dashboard (what dask-labextension lists from)."""
    return {path for app in scheduler.http_application.applications for path in getattr(app, "app_paths", ())}


class _PlainPage(web.RequestHandler):
    def initialize(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    async def get(self) -> None:
        snapshot = await current_snapshot(self.scheduler, self.get_argument("store", None))
        # rendered in a thread: on the event loop a long run's page (20,000 segments: 1.6 s) stopped the scheduler
        # for as long, for each open tab, every time it reloads
        page = await asyncio.get_running_loop().run_in_executor(None, render_page, snapshot)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(page)
