"""The population views drawn: the lineage tree and the tuned hyper-parameters, with Bokeh and with matplotlib.

The Bokeh builders take `ColumnDataSource`s, so the live page (`live.py`) updates their data in place and
`podracer plot --view ...` fills them once; the matplotlib ones draw the same from the same data
(`population.py`) for `--out *.png`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dask_podracer.dashboard.plots import LEGEND_AGENTS, legend_label
from dask_podracer.dashboard.population import (
    KINDS,
    agent_name,
    agent_order,
    finished,
    hparam_series,
    lineage_graph,
    log_scale,
    tuned,
)

KIND_COLORS = {"fresh": "#2ca02c", "exploit": "#d62728", "continue": "#7f7f7f"}
KIND_MARKERS = {"fresh": "triangle", "exploit": "diamond", "continue": "circle"}
KIND_LABELS = {"fresh": "fresh start", "exploit": "exploit (adopted a checkpoint)", "continue": "trained on"}
TOOLS = "pan,wheel_zoom,box_zoom,reset"
LANE_TICKS = 30
"""The matplotlib lineage labels each agent's row up to this many agents (what 4.5 inches hold)."""


def agent_colors(agents: Sequence[str]) -> dict[str, str]:
    """One Category10 colour per agent, in agent order (the curves' colours)."""
    from bokeh.palettes import Category10_10

    return {name: Category10_10[i % 10] for i, name in enumerate(sorted(agents, key=agent_order))}


def colored(data: dict[str, list[Any]], colors: Mapping[str, str]) -> dict[str, list[Any]]:
    """`data` with a `color` column from its `agent` column."""
    return {**data, "color": [colors.get(a, "#333333") for a in data["agent"]]}


def lineage_figure(nodes: Any, edges: Any, **size: Any) -> Any:
    """Segments as nodes at (wall-clock, agent), parent -> child edges; fresh starts and exploits marked."""
    from bokeh.models import BasicTicker, HoverTool
    from bokeh.plotting import figure
    from bokeh.transform import factor_cmap, factor_mark

    fig = figure(x_axis_label="wall-clock seconds", y_axis_label="agent", name="podracer-lineage", tools=TOOLS,
                 **{"height": 360, **size})
    colors = factor_cmap("kind", [KIND_COLORS[k] for k in KINDS], list(KINDS))
    fig.multi_line("xs", "ys", source=edges, color=colors, alpha=0.55, line_width=1.5)
    dots = fig.scatter("wall", "lane", source=nodes, marker=factor_mark("kind", [KIND_MARKERS[k] for k in KINDS],
                                                                        list(KINDS)),
                       color=colors, size=11, alpha=0.85, legend_field="kind")
    fig.add_tools(HoverTool(renderers=[dots], tooltips=[("", "@key (@agent)"), ("", "@kind"), ("score", "@score{0.0}"),
                                                        ("parent", "@parent"), ("generation", "@generation"),
                                                        ("lineage env steps", "@steps{0,0}")]))
    fig.yaxis.ticker = BasicTicker(min_interval=1)  # agents are whole numbers
    fig.add_layout(fig.legend[0], "right")  # beside the plot: inside, it hides the first agents' fresh starts
    fig.legend.label_text_font_size = "8pt"
    fig.toolbar.logo = None
    return fig


def hparam_figures(name: str, lines: Any, points: Any, log: bool, **size: Any) -> tuple[Any, Any]:
    """(`name` over wall-clock per agent, score against `name`)."""
    from bokeh.models import HoverTool
    from bokeh.plotting import figure
    from bokeh.transform import factor_mark

    axis = "log" if log else "linear"
    marks = factor_mark("kind", [KIND_MARKERS[k] for k in KINDS], list(KINDS))
    over_time = figure(x_axis_label="wall-clock seconds", y_axis_label=name, y_axis_type=axis, tools=TOOLS,
                       name=f"podracer-hparam-{name}", title=f"{name} over wall-clock, per agent",
                       **{"height": 260, **size})
    over_time.multi_line("xs", "ys", source=lines, color="color", line_width=2, alpha=0.7)
    over_time.scatter("wall", "value", source=points, color="color", marker=marks, size=8)
    against = figure(x_axis_label=name, y_axis_label="evaluation return", x_axis_type=axis, tools=TOOLS,
                     name=f"podracer-score-vs-{name}", title=f"score against {name}", **{"height": 260, **size})
    dots = against.scatter("value", "score", source=points, color="color", marker=marks, size=8, alpha=0.8)
    tips = [("", "@key (@agent)"), (name, "@value{0.[000]e}" if log else "@value"), ("score", "@score{0.0}")]
    against.add_tools(HoverTool(renderers=[dots], tooltips=tips))
    for fig in (over_time, against):
        fig.toolbar.logo = None
    return over_time, against


def write_population_plot(history: Sequence[Mapping[str, Any]], out: str | Path, views: Sequence[str],
                          title: str = "dask_podracer") -> Path:
    """Write `views` ("curves", "lineage", "hparams") to `out`: .html with Bokeh, .png with matplotlib."""
    from dask_podracer.dashboard.plots import curves

    out = Path(out)
    if not finished(history):
        raise ValueError("the store's history has no finished segment to plot")
    if out.suffix not in (".html", ".png"):
        raise ValueError(f"cannot write {out.name!r}: the output must end in .html or .png")
    names = tuned(history) if "hparams" in views else []
    if out.suffix == ".html":
        _bokeh(history, out, views, names, title, curves(history))
    else:
        _matplotlib(history, out, views, names, title, curves(history))
    return out


def _bokeh(history: Sequence[Mapping[str, Any]], out: Path, views: Sequence[str], names: list[str], title: str,
           curve_data: dict[str, Any]) -> None:
    from bokeh.layouts import column, row
    from bokeh.models import ColumnDataSource, Div
    from bokeh.plotting import output_file, save

    from dask_podracer.dashboard.plots import curve_figures

    items: list[Any] = [Div(text=f"<h2>{title}</h2>")]
    if "curves" in views:
        items.append(row(*curve_figures(curve_data, title)))
    if "lineage" in views:
        nodes, edges = lineage_graph(history)
        items += [Div(text="<h3>Lineage: who started from whom</h3>"),
                  lineage_figure(ColumnDataSource(nodes), ColumnDataSource(edges), width=1200)]
    if "hparams" in views:
        colors = agent_colors({agent_name(r) for r in finished(history)})
        items.append(Div(text="<h3>Tuned hyper-parameters</h3>" + ("" if names else
                                                                   "<p>(no hyper-parameter differs between segments)</p>")))
        for name in names:
            lines, points = hparam_series(history, name)
            items.append(row(*hparam_figures(name, ColumnDataSource(colored(lines, colors)),
                                             ColumnDataSource(colored(points, colors)),
                                             log_scale(points["value"]), width=600)))
    output_file(out, title=title, mode="inline")  # inline: the page opens without network access
    save(column(*items))


def _matplotlib(history: Sequence[Mapping[str, Any]], out: Path, views: Sequence[str], names: list[str], title: str,
                curve_data: dict[str, Any]) -> None:
    from dask_podracer.dashboard.plots import draw_curves, new_figure

    rows = ("curves" in views) + ("lineage" in views) + ("hparams" in views) * max(1, len(names))
    fig = new_figure((12, 4.5 * rows))
    grid = fig.subplots(rows, 2, squeeze=False)
    at = 0
    if "curves" in views:
        draw_curves(grid[at], curve_data, title)
        at += 1
    if "lineage" in views:
        for ax in grid[at][1:]:
            ax.remove()
        draw_lineage(fig.add_subplot(rows, 1, at + 1), history, title)
        grid[at][0].remove()
        at += 1
    if "hparams" in views:
        colors = agent_colors({agent_name(r) for r in finished(history)})
        if not names:
            grid[at][0].set_title("no hyper-parameter differs between segments")
        for name in names:
            draw_hparam(grid[at], history, name, colors)
            at += 1
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def draw_lineage(ax: Any, history: Sequence[Mapping[str, Any]], title: str) -> None:
    nodes, edges = lineage_graph(history)
    for xs, ys, k in zip(edges["xs"], edges["ys"], edges["kind"]):
        ax.plot(xs, ys, color=KIND_COLORS[k], alpha=0.55, linewidth=1.2, zorder=1)
    mpl_marks = {"triangle": "^", "diamond": "D", "circle": "o"}
    for k in KINDS:
        at = [i for i, nk in enumerate(nodes["kind"]) if nk == k]
        if at:
            ax.scatter([nodes["wall"][i] for i in at], [nodes["lane"][i] for i in at], color=KIND_COLORS[k],
                       marker=mpl_marks[KIND_MARKERS[k]], s=55, label=KIND_LABELS[k], zorder=2)
    if len(set(nodes["lane"])) <= LANE_TICKS:  # a row's label each; more would overlap: the lanes are agent numbers
        ax.set_yticks(sorted(set(nodes["lane"])), [f"{a}" for _, a in sorted(set(zip(nodes["lane"], nodes["agent"])))])
    else:
        ax.set_ylabel("agent")
    ax.set_xlabel("wall-clock seconds")
    ax.set_title(f"{title}: lineage (an edge from the checkpoint each segment started from)", pad=26)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize="small", frameon=False)  # above:
    # inside, it hides the first agents' fresh starts


def draw_hparam(axes: Sequence[Any], history: Sequence[Mapping[str, Any]], name: str, colors: Mapping[str, str]) -> None:
    lines, points = hparam_series(history, name)
    log = log_scale(points["value"])
    for agent, xs, ys in zip(lines["agent"], lines["xs"], lines["ys"]):
        axes[0].plot(xs, ys, color=colors[agent], linewidth=2, alpha=0.7, label=agent)
    for agent in lines["agent"]:
        at = [i for i, a in enumerate(points["agent"]) if a == agent]
        axes[0].scatter([points["wall"][i] for i in at], [points["value"][i] for i in at], color=colors[agent], s=20)
        axes[1].scatter([points["value"][i] for i in at], [points["score"][i] for i in at], color=colors[agent], s=30,
                        alpha=0.8, label=legend_label(agent, len(lines["agent"])))
    axes[0].set_xlabel("wall-clock seconds")
    axes[0].set_ylabel(name)
    axes[0].set_title(f"{name} over wall-clock, per agent")
    axes[1].set_xlabel(name)
    axes[1].set_ylabel("evaluation return")
    axes[1].set_title(f"score against {name}")
    if log:
        axes[0].set_yscale("log")
        axes[1].set_xscale("log")
    if len(lines["agent"]) <= LEGEND_AGENTS:  # hundreds of entries would cover the plot
        axes[1].legend(loc="lower right", fontsize="small")
