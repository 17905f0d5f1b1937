"""The live Podracer page: a Bokeh document on the Dask dashboard, redrawn by a periodic callback.

It draws the `Snapshot`s it is handed: the leaderboard (a DataTable), the training pool
(which agent's segment runs on which worker and device, since when, with which hyper-parameters),
the seeds' two learning curves, reward vs wall-clock time and reward vs env steps,
one colour per agent plus the best score so far, the policy lag of actor-learner segments
(`policy_lag.py`; shown only once a segment reports one), and the population views
(`population.py`): the lineage tree, and each tuned hyper-parameter over wall-clock and against the score.
Read-only: nothing on the page writes.
Which scheduler, which store and how to read them is `population/dashboard_preload.py`'s
business; this module knows only Bokeh.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from bokeh.document import Document
from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, DataTable, Div, HoverTool, NumberFormatter, TableColumn
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from dask_podracer.dashboard.plots import LEGEND_AGENTS, curves  # above it, hover a point for its agent
from dask_podracer.dashboard.policy_lag import lag_columns, lag_figure
from dask_podracer.dashboard.population import agent_name, agent_order, hparam_series, lineage_graph, log_scale, tuned
from dask_podracer.dashboard.population_plots import agent_colors, colored, hparam_figures, lineage_figure
from dask_podracer.dashboard.snapshot import (Running, Snapshot, format_gpu_memory, format_hparams, runs_html,
                                              varying)

PARTS = ("leaderboard", "pool", "curves", "lag", "lineage", "hparams")
DRAWN_WITH_THE_PAGE = 2000
"""A history of up to this many records has its views drawn with the page as it opens (12 ms on the 2-core
machine); a longer one's are computed in a thread and follow a moment later (20,000 records: 0.13 s)."""
REFRESH_MS = 2000
"""How often an open page asks for a new snapshot (the store is read at most once a second anyway)."""


def build_document(doc: Document, first: Snapshot, read: Callable[[], Awaitable[Snapshot]],
                   parts: Sequence[str] = PARTS, refresh_ms: int = REFRESH_MS) -> None:
    """Fill `doc` with the `parts` of the page drawn from `first`, then redraw from `await read()` periodically."""
    view = PodracerView(parts)

    async def draw(snapshot: Snapshot) -> None:
        # computed in a thread: the page is served from the scheduler's event loop, and a long run's views (20,000
        # segments: 0.1-0.3 s on the 2-core machine, idle) stopped the scheduler for as long whenever new records
        # arrived, for each open page
        views = await asyncio.get_running_loop().run_in_executor(None, view.history_views, snapshot.history)
        view.show(snapshot, views)

    async def draw_first() -> None:
        await draw(first)

    async def refresh() -> None:
        await draw(await read())

    if len(first.history) <= DRAWN_WITH_THE_PAGE:
        view.update(first)
    else:
        view.show(first, None)  # the tables at once; the history's views a moment later, from `draw_first`
        doc.add_next_tick_callback(draw_first)
    doc.add_periodic_callback(refresh, refresh_ms)
    doc.title = "Dask: Podracer" + ("" if len(parts) > 1 else f" {parts[0]}")
    doc.add_root(view.root)


class PodracerView:
    """The page's Bokeh models; `update(snapshot)` redraws them, sending only what changed."""

    def __init__(self, parts: Sequence[str] = PARTS) -> None:
        unknown = sorted(set(parts) - set(PARTS))
        if unknown:
            raise ValueError(f"unknown page part {unknown[0]!r}: the parts are {', '.join(PARTS)}")
        self.parts = tuple(parts)
        single = len(self.parts) == 1  # a panel of its own, e.g. in dask-labextension: fill it
        self.header = Div(text="", name="podracer-header", sizing_mode="stretch_width")
        self.board = ColumnDataSource(leaderboard_columns([]), name="podracer-leaderboard-source")
        self.pool = ColumnDataSource(pool_columns([], 0.0), name="podracer-pool-source")
        self.points, self.lines, self.best = (ColumnDataSource(d) for d in curve_columns([]))
        items: list[Any] = [self.header]
        if "leaderboard" in self.parts:
            items += [_heading("Leaderboard", single),
                      _table(self.board, "podracer-leaderboard", _board_columns(), 280, single)]
        if "pool" in self.parts:
            items += [_heading("Training pool", single), _table(self.pool, "podracer-pool", _pool_columns(), 180, single)]
        self.figures: list[Any] = []
        if "curves" in self.parts:
            self.figures = [self._figure("wall", "wall-clock seconds", single), self._figure("steps", "env steps", single)]
            items += [_heading("Episodic reward vs wall-clock time and vs env steps", single),
                      row(*self.figures, sizing_mode="stretch_both" if single else "stretch_width")]
        self.lag = ColumnDataSource(lag_columns([]), name="podracer-policy-lag-source")
        self.lag_section = column(_heading("Policy lag of actor-learner segments: median, p95 and max of the rollouts "
                                           "each learner trained on, in learner updates", single),
                                  lag_figure(self.lag, sizing_mode="stretch_both" if single else "stretch_width"),
                                  name="podracer-policy-lag-section", visible=False,
                                  sizing_mode="stretch_both" if single else "stretch_width")
        self.no_lag = Div(text=NO_LAG, visible=single)  # a panel of its own says why it is empty
        if "lag" in self.parts:
            items += [self.lag_section, self.no_lag]
        self.nodes, self.edges = (ColumnDataSource(d) for d in lineage_graph([]))
        if "lineage" in self.parts:
            items += [_heading("Lineage: each segment at (wall-clock, agent), an edge from the checkpoint it started "
                               "from; fresh starts and exploits marked", single),
                      lineage_figure(self.nodes, self.edges, sizing_mode="stretch_both" if single else "stretch_width")]
        self.hparams = column(Div(text=NO_TUNED), name="podracer-hparams",
                              sizing_mode="stretch_both" if single else "stretch_width")
        self.hparam_sources: dict[str, tuple[ColumnDataSource, ColumnDataSource]] = {}
        self.hparam_layout: tuple[tuple[str, bool], ...] = ()
        if "hparams" in self.parts:
            items += [_heading("Tuned hyper-parameters: over wall-clock per agent, and score against each", single),
                      self.hparams]
        self.root = column(*items, sizing_mode="stretch_both" if single else "stretch_width", name="podracer")
        self.history: list[dict[str, Any]] | None = None
        """The history last drawn (None before the first update)."""

    def update(self, snapshot: Snapshot) -> None:
        """Redraw from `snapshot` (the first draw; a refresh computes `history_views` in a thread first)."""
        self.show(snapshot, self.history_views(snapshot.history))

    def history_views(self, history: Sequence[Mapping[str, Any]]) -> HistoryViews | None:
        """The data of the curves, the policy lag, the lineage and the tuned hyper-parameters of `history`; None
        if it is the history last shown. Touches no Bokeh model, so it may run off the event loop."""
        # recomputed only when the history changed: a long run's (20,000 segments) takes half a second, for every
        # open page every 2 s
        if history == self.history:
            return None
        views = HistoryViews(list(history))  # a copy: a caller appending to its list changes the history
        if self.figures:
            views.curves = curve_columns(history)
        if "lag" in self.parts:
            views.lag = lag_columns(history)
        if "lineage" in self.parts:
            views.lineage = lineage_graph(history)
        if "hparams" in self.parts:
            colors = agent_colors({agent_name(r) for r in history if r.get("status") == "finished"})
            series = {name: hparam_series(history, name) for name in tuned(history)}
            views.hparams = {name: (colored(lines, colors), colored(points, colors))
                             for name, (lines, points) in series.items()}
            views.hparam_layout = tuple((name, log_scale(points["value"])) for name, (_, points) in series.items())
        return views

    def show(self, snapshot: Snapshot, views: HistoryViews | None) -> None:
        """Set the models from `snapshot` and from its `history_views` (None: the history views stay)."""
        self.header.text = _header(snapshot)
        _set(self.board, leaderboard_columns(snapshot.board))
        _set(self.pool, pool_columns(snapshot.running, snapshot.taken))
        if views is not None:
            self.history = views.history
            self._show_history_views(views)

    def _show_history_views(self, views: HistoryViews) -> None:
        if views.curves is not None:
            points, lines, best = views.curves
            for source, data in ((self.points, points), (self.lines, lines), (self.best, best)):
                _set(source, data)
            for fig in self.figures:
                fig.legend.visible = len(lines["agent"]) <= LEGEND_AGENTS
        if views.lag is not None:
            _set(self.lag, views.lag)
            self.lag_section.visible = bool(views.lag["key"])  # runs without actors report no lag: nothing to show
            self.no_lag.visible = len(self.parts) == 1 and not views.lag["key"]
        if views.lineage is not None:
            nodes, edges = views.lineage
            _set(self.nodes, nodes)
            _set(self.edges, edges)
        if views.hparams is not None:
            self._show_hparams(views.hparams, views.hparam_layout)

    def _show_hparams(self, series: Mapping[str, tuple[dict[str, list[Any]], dict[str, list[Any]]]],
                      layout: tuple[tuple[str, bool], ...]) -> None:
        """One row per tuned hyper-parameter; the rows are rebuilt only when the tuned names (or an axis's
        scale) change, otherwise only their data are sent."""
        if layout != self.hparam_layout:
            self.hparam_layout = layout
            self.hparam_sources = {name: (ColumnDataSource(lines), ColumnDataSource(points))
                                   for name, (lines, points) in series.items()}
            rows = [row(*hparam_figures(name, *self.hparam_sources[name], log, sizing_mode="stretch_width"),
                        sizing_mode="stretch_width") for name, log in layout]
            self.hparams.children = rows or [Div(text=NO_TUNED)]
            return
        for name, (lines, points) in series.items():
            line_source, point_source = self.hparam_sources[name]
            _set(line_source, lines)
            _set(point_source, points)

    def _figure(self, x: str, label: str, single: bool) -> Any:
        fig = figure(x_axis_label=label, y_axis_label="evaluation return", height=340, name=f"podracer-reward-vs-{x}",
                     sizing_mode="stretch_both" if single else "stretch_width", tools="pan,wheel_zoom,box_zoom,reset")
        fig.multi_line(f"{x}_xs", "ys", color="color", source=self.lines, alpha=0.45, line_width=1.5)
        dots = fig.scatter(x, "score", color="color", source=self.points, size=7, alpha=0.8, legend_field="agent")
        fig.step(x, "score", source=self.best, mode="after", color="black", line_width=2.5, legend_label="best so far")
        fig.add_tools(HoverTool(renderers=[dots], tooltips=[("", "@agent"), ("score", "@score{0.0}"),
                                                             ("env steps", "@steps{0,0}"), ("seconds", "@wall{0.0}")]))
        fig.add_layout(fig.legend[0], "right")  # beside the plot: inside, it hides the latest points
        fig.legend.label_text_font_size = "8pt"
        fig.toolbar.logo = None
        return fig


@dataclasses.dataclass
class HistoryViews:
    """What `PodracerView.history_views` computes from a history, for `show` to put in the models."""

    history: list[Mapping[str, Any]]
    curves: tuple[dict[str, list[Any]], ...] | None = None
    """(points, lines, best) of `curve_columns`."""
    lag: dict[str, list[Any]] | None = None
    lineage: tuple[dict[str, list[Any]], dict[str, list[Any]]] | None = None
    """(nodes, edges)."""
    hparams: dict[str, tuple[dict[str, list[Any]], dict[str, list[Any]]]] | None = None
    """Each tuned hyper-parameter's (lines, points), coloured by agent."""
    hparam_layout: tuple[tuple[str, bool], ...] = ()
    """(name, log scale) of each tuned hyper-parameter."""


def leaderboard_columns(board: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The leaderboard table's columns, best first."""
    return {"rank": list(range(1, len(board) + 1)), "key": [e["key"] for e in board],
            "score": [float(e["score"]) for e in board], "env_steps": [int(e["env_steps"]) for e in board],
            "group": [str(e.get("group") or e.get("algorithm", "")) for e in board],
            "generation": [int(e.get("generation", 0)) for e in board],
            "parent": [e.get("parent") or "-" for e in board]}


def pool_columns(running: Sequence[Running], now: float) -> dict[str, list[Any]]:
    """The training pool's columns, longest-running first; `now` (epoch seconds) gives "running for"."""
    running = sorted(running, key=lambda r: r.since)
    first = varying(running)  # the differences between the agents lead; the long tail is cut at the table's edge
    return {"key": [r.key for r in running], "agent": ["-" if r.agent is None else str(r.agent) for r in running],
            "worker": [r.worker for r in running], "device": [r.device for r in running],
            "gpu_memory": [format_gpu_memory(r) for r in running],
            "gpu_utilization": ["-" if r.gpu_utilization is None else f"{r.gpu_utilization:.0f}%" for r in running],
            "since": [time.strftime("%H:%M:%S", time.localtime(r.since)) for r in running],
            "seconds": [round(max(0.0, now - r.since), 1) for r in running],
            "hparams": [format_hparams(r.hparams, first) for r in running]}


def curve_columns(history: Sequence[Mapping[str, Any]]) -> tuple[dict[str, list[Any]], ...]:
    """(points, lines, best): one point per finished segment, one line per agent, the best score so far."""
    series = curves(history)
    best = series.pop("best", {"wall_seconds": [], "env_steps": [], "score": []})
    agents = sorted(series, key=agent_order)
    colors = {name: Category10_10[i % 10] for i, name in enumerate(agents)}
    points: dict[str, list[Any]] = {"agent": [], "wall": [], "steps": [], "score": [], "color": []}
    for name in agents:
        line = series[name]
        points["agent"] += [name] * len(line["score"])
        points["wall"] += line["wall_seconds"]
        points["steps"] += line["env_steps"]
        points["score"] += line["score"]
        points["color"] += [colors[name]] * len(line["score"])
    lines = {"agent": agents, "wall_xs": [series[a]["wall_seconds"] for a in agents],
             "steps_xs": [series[a]["env_steps"] for a in agents], "ys": [series[a]["score"] for a in agents],
             "color": [colors[a] for a in agents]}
    return points, lines, {"wall": best["wall_seconds"], "steps": best["env_steps"], "score": best["score"]}


NO_TUNED = "<p>(no hyper-parameter differs between the finished segments yet)</p>"
NO_LAG = "<p>(no finished segment has reported a policy lag: only segments with [actors] do)</p>"


def _header(snapshot: Snapshot) -> str:
    runs = f"<p style='color:#555'>{runs_html(snapshot)}</p>" if runs_html(snapshot) else ""
    if snapshot.message:
        return f"<h2 style='margin:0.3em 0'>Podracer</h2><p>{html.escape(snapshot.message)}</p>{runs}"
    finished = sum(r.get("status") == "finished" for r in snapshot.history)
    failed = sum(r.get("status") == "failed" for r in snapshot.history)
    best = f"{snapshot.board[0]['score']:.1f}" if snapshot.board else "-"
    return (f"<h2 style='margin:0.3em 0'>Podracer</h2><p style='color:#555'>store <code>"
            f"{html.escape(str(snapshot.store_url))}</code> · best {best} · {finished} segments finished, {failed} "
            f"failed · {len(snapshot.running)} training · updated "
            f"{time.strftime('%H:%M:%S', time.localtime(snapshot.taken))} · read-only</p>{runs}")


def _heading(text: str, single: bool) -> Any:
    return Div(text=f"<h3 style='margin:0.2em 0'>{text}</h3>", visible=not single, sizing_mode="stretch_width")


def _table(source: ColumnDataSource, name: str, columns: list[TableColumn], height: int, single: bool) -> DataTable:
    return DataTable(source=source, columns=columns, name=name, index_position=None, height=height,
                     sizing_mode="stretch_both" if single else "stretch_width", reorderable=False)


def _set(source: ColumnDataSource, data: dict[str, list[Any]]) -> None:
    if dict(source.data) != data:  # assigning sends the whole table to every browser: only when it changed
        source.data = data


# functions, not lists: a Bokeh model belongs to one document, and every open page is its own document
def _board_columns() -> list[TableColumn]:  # widths are proportions: the table fills its width
    return [TableColumn(field="rank", title="rank", width=35), TableColumn(field="key", title="key", width=130),
            TableColumn(field="score", title="score", formatter=NumberFormatter(format="0.0"), width=70),
            TableColumn(field="env_steps", title="env steps", formatter=NumberFormatter(format="0,0"), width=80),
            TableColumn(field="group", title="group", width=60),
            TableColumn(field="generation", title="gen", width=35),
            TableColumn(field="parent", title="parent", width=130)]


def _pool_columns() -> list[TableColumn]:
    return [TableColumn(field="key", title="segment", width=130), TableColumn(field="agent", title="agent", width=40),
            TableColumn(field="worker", title="worker", width=140), TableColumn(field="device", title="device", width=90),
            TableColumn(field="gpu_memory", title="GPU memory", width=80),
            TableColumn(field="gpu_utilization", title="GPU util", width=50),
            TableColumn(field="since", title="since", width=60),
            TableColumn(field="seconds", title="running for (s)", formatter=NumberFormatter(format="0"), width=80),
            TableColumn(field="hparams", title="hyper-parameters", width=450)]
