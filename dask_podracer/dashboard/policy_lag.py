"""The policy lag of actor-learner segments (`[actors]`, docs/actor_learner.md), from a store's history.

A segment whose learner trained on its actors' rollouts reports the lag of the rollouts it trained on, in learner
updates (`policy_lag_median`, `policy_lag_p95`, `policy_lag_max`, over the whole segment) and how many actors
joined and were lost, in its history record's `metrics`. The live page draws them over wall-clock, one segment
above the other, and the plain page lists them; a run without actors reports none, and neither page shows the
section then. Pure functions of history records and Bokeh builders; no Dask, no Zarr.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from dask_podracer.dashboard.population import agent_name, finished

STATS = ("median", "p95", "max")
"""The lag statistics each actor-learner segment reports, as `policy_lag_<stat>`."""
STAT_COLORS = {"median": "#1f77b4", "p95": "#ff7f0e", "max": "#d62728"}
STAT_MARKERS = {"median": "circle", "p95": "triangle", "max": "square"}
COLUMNS = ("key", "agent", "wall", *STATS, "actors_joined", "actors_lost")
PLAIN_ROWS = 20
"""The plain page lists the newest this many actor-learner segments."""


def lag_columns(history: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """One row per finished segment whose metrics hold its policy lag, in history order: key, agent, wall
    (seconds), median, p95, max (learner updates), actors_joined, actors_lost. Empty columns when none does."""
    columns: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    for r in finished(history):
        metrics = r.get("metrics") or {}
        if "policy_lag_median" not in metrics:
            continue
        row = {"key": r.get("key"), "agent": agent_name(r), "wall": float(r.get("wall_seconds") or 0.0),
               **{stat: float(metrics.get(f"policy_lag_{stat}", metrics["policy_lag_median"])) for stat in STATS},
               "actors_joined": int(metrics.get("actors_joined", 0)), "actors_lost": int(metrics.get("actors_lost", 0))}
        for column in COLUMNS:
            columns[column].append(row[column])
    return columns


def lag_figure(source: Any, **size: Any) -> Any:
    """Each actor-learner segment at its end (wall-clock): a line from its median lag to its maximum, with the
    median, p95 and max marked; hover a mark for the segment, its agent and its actors."""
    from bokeh.models import HoverTool
    from bokeh.plotting import figure

    fig = figure(x_axis_label="wall-clock seconds", y_axis_label="policy lag (learner updates)",
                 name="podracer-policy-lag", tools="pan,wheel_zoom,box_zoom,reset", **{"height": 260, **size})
    fig.segment("wall", "median", "wall", "max", source=source, color="#999999", line_width=1.5)
    marks = [fig.scatter("wall", stat, source=source, marker=STAT_MARKERS[stat], color=STAT_COLORS[stat], size=8,
                         legend_label=stat) for stat in STATS]
    fig.add_tools(HoverTool(renderers=marks, tooltips=[
        ("", "@key (@agent)"), ("lag median / p95 / max", "@median{0.[0]} / @p95{0.[0]} / @max{0.[0]}"),
        ("actors joined / lost", "@actors_joined / @actors_lost")]))
    fig.add_layout(fig.legend[0], "right")
    fig.legend.label_text_font_size = "8pt"
    fig.toolbar.logo = None
    return fig


def lag_table_html(history: Sequence[Mapping[str, Any]], rows: int = PLAIN_ROWS) -> str:
    """The plain page's table of the newest `rows` actor-learner segments, newest first; "" when none."""
    columns = lag_columns(history)
    count = len(columns["key"])
    if not count:
        return ""
    body = "".join(
        f"<tr><td class='key'>{html.escape(str(columns['key'][i]))}</td><td>{html.escape(columns['agent'][i])}</td>"
        f"<td>{columns['wall'][i]:.0f} s</td>" + "".join(f"<td>{columns[s][i]:g}</td>" for s in STATS)
        + f"<td>{columns['actors_joined'][i]}</td><td>{columns['actors_lost'][i]}</td></tr>"
        for i in reversed(range(max(0, count - rows), count)))
    return ("<table class='policy-lag'><tr><th>segment</th><th>agent</th><th>ended at</th><th>lag median</th>"
            "<th>lag p95</th><th>lag max</th><th>actors joined</th><th>actors lost</th></tr>" + body + "</table>")
