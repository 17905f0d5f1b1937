"""A Dask preload module that puts the live Podracer page on the scheduler's Bokeh dashboard.

    dask scheduler --preload dask_podracer.population.dashboard_preload

(or `distributed.scheduler.preload` in Dask's config; the embedded LocalCluster of
`podracer train` preloads it by itself). Dask imports preload modules in
`Scheduler.__init__`, before it starts the dashboard, and the dashboard serves every
entry of `distributed.dashboard.scheduler.applications` as a Bokeh app: registering
the routes below when this module is imported is therefore in time, and being Bokeh
apps named `individual-*`, dask-labextension lists them too.

    /individual-podracer              leaderboard, training pool, learning curves, policy lag (with [actors]),
                                      lineage, hyper-parameters
    /individual-podracer-leaderboard  one panel each, for dask-labextension's layouts
    /individual-podracer-pool
    /individual-podracer-curves
    /individual-podracer-lag
    /individual-podracer-lineage
    /individual-podracer-hparams

The pages read what the `PodracerPage` plugins registered by `run_tournament` know
(`monitor.py`): the run of the page's `?store=`, or the newest run still going on this
scheduler (else the newest), with links to the others; before any, they say so.
Importing this module in a process whose schedulers have already started their
dashboards changes nothing for them: they keep the plain page (`/podracer.html`).
"""

from __future__ import annotations

import functools
from typing import Any

from dask_podracer.population.monitor import ROUTE, current_snapshot, current_snapshot_now

ROUTES: dict[str, tuple[str, ...]] = {
    ROUTE: ("leaderboard", "pool", "curves", "lag", "lineage", "hparams"),
    f"{ROUTE}-leaderboard": ("leaderboard",),
    f"{ROUTE}-pool": ("pool",),
    f"{ROUTE}-curves": ("curves",),
    f"{ROUTE}-lag": ("lag",),
    f"{ROUTE}-lineage": ("lineage",),
    f"{ROUTE}-hparams": ("hparams",),
}


def register() -> bool:
    """Add the Podracer routes to the table Dask's scheduler dashboards are built from; False without Bokeh."""
    try:
        from distributed.dashboard import scheduler as dashboard  # needs Bokeh, like the dashboard itself
    except ImportError:
        return False
    for route, parts in ROUTES.items():
        dashboard.applications.setdefault(route, functools.partial(podracer_doc, parts))
    return True


def podracer_doc(parts: tuple[str, ...], scheduler: Any, extra: dict[str, Any], doc: Any) -> None:
    """One open page: a Bokeh document of `parts`, drawn now and redrawn by a periodic callback."""
    from dask_podracer.dashboard.live import build_document

    store = _store_argument(doc)
    build_document(doc, current_snapshot_now(scheduler, store), functools.partial(current_snapshot, scheduler, store),
                   parts)


def _store_argument(doc: Any) -> str | None:
    """The page's `?store=` (which run to show, when several share the scheduler), or None."""
    request = getattr(getattr(doc, "session_context", None), "request", None)
    values = (getattr(request, "arguments", None) or {}).get("store") or []
    return values[0].decode() if values else None


register()
