"""Serve the Podracer page on the Dask dashboard, from a scheduler plugin.

`run_tournament` registers `PodracerPage` on the scheduler of whatever cluster it runs
on (the embedded LocalCluster or a remote one), so the page is at
`<dashboard>/individual-podracer` while the run goes on. The plugin only reads: the
store's tables and the scheduler's own record of which segment runs where.
"""

from __future__ import annotations

import time
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

ROUTE = "/individual-podracer"


class PodracerPage(SchedulerPlugin):
    name = "podracer-page"

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url
        self.started: dict[str, float] = {}  # segment key -> when it began processing

    async def start(self, scheduler: Any) -> None:
        if getattr(scheduler, "_podracer_route", False):
            return  # a later run re-registered the plugin: the route already asks for the current one
        from tornado import web

        class Handler(web.RequestHandler):
            def get(self) -> None:
                plugin = scheduler.plugins.get(PodracerPage.name)  # the latest run's plugin, by name
                self.set_header("Content-Type", "text/html; charset=utf-8")
                self.write(plugin.render(scheduler) if plugin else "<p>no tournament has run here</p>")

        scheduler.http_application.add_handlers(r".*", [(ROUTE, Handler)])
        scheduler._podracer_route = True

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if isinstance(key, str) and key.startswith("segment-"):
            if finish == "processing":
                self.started[key] = time.time()
            elif start == "processing":
                self.started.pop(key, None)

    def render(self, scheduler: Any) -> str:
        from dask_podracer.dashboard.page import render_page
        from dask_podracer.store import PodracerStore, StoreError

        try:
            store = PodracerStore(self.store_url)
            board, history = store.read_leaderboard(), store.read_history()
            agents = {a["running"]: a for a in store.read_run_state().get("machine", {}).get("agents", [])
                      if a.get("running")}
        except StoreError as e:
            return f"<p>cannot read the store: {e}</p>"
        running = []
        for key, since in sorted(self.started.items(), key=lambda kv: kv[1]):
            task = scheduler.tasks.get(key)
            if task is None or task.processing_on is None:
                continue
            agent = agents.get(key.removeprefix("segment-"), {})
            running.append({"key": key.removeprefix("segment-"), "worker": task.processing_on.address,
                            "since": since, "agent": agent.get("id", "-"), "hparams": agent.get("hparams")})
        return render_page(board, history, running, self.store_url)
