"""The plain Podracer page, as HTML: leaderboard, training pool, learning curves, the policy lag of actor-learner
segments (when a segment reports one), lineage and tuned hyper-parameters.

The fallback of the live Bokeh page (`live.py`): it needs no Bokeh server and no preload
on the scheduler, refreshes itself by reloading, and is what a script or `curl` can read.
Pure rendering from a `Snapshot`; the scheduler plugin in `population/monitor.py` serves
it at `/podracer.html` (and at `/individual-podracer` when the live page is absent).
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dask_podracer.dashboard.policy_lag import lag_table_html
from dask_podracer.dashboard.population import agent_name, finished, hparam_series, lineage_graph, log_scale, tuned
from dask_podracer.dashboard.population_plots import agent_colors, colored, hparam_figures, lineage_figure
from dask_podracer.dashboard.snapshot import (Running, Snapshot, format_gpu_memory, format_hparams, runs_html,
                                              varying)

REFRESH_SECONDS = 5


def render_page(snapshot: Snapshot) -> str:
    """The whole page."""
    runs = f"<p class='store'>{runs_html(snapshot)}</p>" if runs_html(snapshot) else ""
    if snapshot.message:
        body = [f"<h1>Podracer</h1><p>{_e(snapshot.message)}</p>{runs}"]
    else:
        body = [(f"<h1>Podracer</h1><p class='store'>store: <code>{_e(snapshot.store_url)}</code> · refreshes every "
                 f"{REFRESH_SECONDS} s · read-only</p>{runs}"),
                "<h2>Leaderboard</h2>", _leaderboard(snapshot.board),
                "<h2>Training pool</h2>", _pool(snapshot.running, snapshot.taken),
                "<h2>Episodic reward vs wall-clock time and vs env steps</h2>", _curves(snapshot.history),
                _policy_lag(snapshot.history),
                "<h2>Lineage and tuned hyper-parameters</h2>", _population(snapshot.history)]
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Podracer</title>"
            f"<meta http-equiv='refresh' content='{REFRESH_SECONDS}'><style>{_CSS}</style></head>"
            f"<body>{''.join(body)}</body></html>")


def _leaderboard(board: Sequence[Mapping[str, Any]]) -> str:
    if not board:
        return "<p>(empty)</p>"
    rows = "".join(f"<tr><td>{i}</td><td class='key'>{_e(e['key'])}</td><td>{e['score']:.1f}</td>"
                   f"<td>{e['env_steps']:,}</td><td>{_e(e.get('group') or e['algorithm'])}</td>"
                   f"<td>{e.get('generation', 0)}</td><td>{_e(e.get('parent') or '-')}</td></tr>"
                   for i, e in enumerate(board, 1))
    return ("<table><tr><th>rank</th><th>key</th><th>score</th><th>env steps</th><th>group</th><th>gen</th>"
            f"<th>parent</th></tr>{rows}</table>")


def _pool(running: Sequence[Running], now: float) -> str:
    if not running:
        return "<p>(no segment is training)</p>"
    first = varying(running)
    rows = "".join(
        f"<tr><td class='key'>{_e(r.key)}</td><td>{'-' if r.agent is None else r.agent}</td><td>{_e(r.worker)}</td>"
        f"<td>{_e(r.device)}</td><td>{_e(format_gpu_memory(r))}</td>"
        f"<td>{'-' if r.gpu_utilization is None else f'{r.gpu_utilization:.0f}%'}</td>"
        f"<td>{time.strftime('%H:%M:%S', time.localtime(r.since))}</td><td>{max(0.0, now - r.since):.0f} s</td>"
        f"<td>{_e(format_hparams(r.hparams, first))}</td></tr>" for r in running)
    return ("<table><tr><th>segment</th><th>agent</th><th>worker</th><th>device</th><th>GPU memory</th>"
            "<th>GPU util</th><th>since</th><th>running for</th>"
            f"<th>hyper-parameters</th></tr>{rows}</table>")


def _curves(history: Sequence[Mapping[str, Any]]) -> str:
    """Both curves, each drawn from one data source: a renderer and a legend entry per agent cost Bokeh about
    30 ms each to build, 9 s for a run of 300 agents, while the scheduler's event loop waits on the page."""
    from bokeh.embed import components
    from bokeh.layouts import row
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    from dask_podracer.dashboard.live import curve_columns
    from dask_podracer.dashboard.plots import LEGEND_AGENTS

    points, lines, best = curve_columns(history)
    if not points["agent"]:
        return "<p>(no finished segment yet)</p>"
    points_source, best_source = ColumnDataSource(points), ColumnDataSource(best)
    figs = []
    for x, label in (("wall", "wall-clock seconds"), ("steps", "env steps")):
        fig = figure(x_axis_label=label, y_axis_label="evaluation return", width=520, height=340)
        dots = fig.scatter(x, "score", source=points_source, color="color", size=6, alpha=0.7, legend_field="agent")
        fig.step(x, "score", source=best_source, mode="after", line_width=3, color="black", legend_label="best so far")
        fig.add_tools(HoverTool(renderers=[dots], tooltips=[("", "@agent"), ("score", "@score{0.0}")]))
        fig.legend.location = "bottom_right"
        fig.legend.visible = len(lines["agent"]) <= LEGEND_AGENTS  # hundreds of entries would hide the plot
        figs.append(fig)
    script, div = components(row(*figs))
    return INLINE.render_js() + script + div  # inline: no network needed to draw


def _policy_lag(history: Sequence[Mapping[str, Any]]) -> str:
    """The newest actor-learner segments' policy lag; nothing for a run without actors."""
    table = lag_table_html(history)
    return table and ("<h2>Policy lag of actor-learner segments (learner updates; newest first)</h2>" + table)


def _population(history: Sequence[Mapping[str, Any]]) -> str:
    """The lineage tree and a row per tuned hyper-parameter, as one Bokeh layout (Bokeh's scripts come with the
    curves, drawn before it whenever there is a finished segment)."""
    from bokeh.embed import components
    from bokeh.layouts import column, row
    from bokeh.models import ColumnDataSource

    if not finished(history):
        return "<p>(no finished segment yet)</p>"
    nodes, edges = lineage_graph(history)
    items = [lineage_figure(ColumnDataSource(nodes), ColumnDataSource(edges), width=1040)]
    colors = agent_colors({agent_name(r) for r in finished(history)})
    for name in tuned(history):
        lines, points = hparam_series(history, name)
        items.append(row(*hparam_figures(name, ColumnDataSource(colored(lines, colors)),
                                         ColumnDataSource(colored(points, colors)), log_scale(points["value"]),
                                         width=520)))
    script, div = components(column(*items))
    return script + div


def _e(text: str) -> str:
    return html.escape(str(text))


_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
td.key { font-family: monospace; text-align: left; }
.store { color: #666; }
"""
