"""The seeds' two learning curves, from a store's history: reward vs wall-clock time and vs env steps.

One line per agent (its segments' evaluation scores) and the best score so far.
`podracer plot STORE --out curves.html` writes them as a standalone Bokeh page;
`--out curves.png` uses matplotlib if it is installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dask_podracer.dashboard.population import agent_name, agent_order

LEGEND_AGENTS = 12
"""Above this many agents the curves drop their legend: hundreds of entries cover the plots."""


def curves(history: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Series to plot: {"agent N" | "best": {"wall_seconds": [...], "env_steps": [...], "score": [...]}}."""
    series: dict[str, dict[str, list[float]]] = {}
    best = None
    for record in history:
        if record.get("status") != "finished" or record.get("score") is None:
            continue
        point = (float(record["wall_seconds"]), float(record["run_env_steps"]), float(record["score"]))
        agent = agent_name(record)
        for name, score in ((agent, point[2]),):
            line = series.setdefault(name, {"wall_seconds": [], "env_steps": [], "score": []})
            line["wall_seconds"].append(point[0])
            line["env_steps"].append(point[1])
            line["score"].append(score)
        best = point[2] if best is None else max(best, point[2])
        line = series.setdefault("best", {"wall_seconds": [], "env_steps": [], "score": []})
        line["wall_seconds"].append(point[0])
        line["env_steps"].append(point[1])
        line["score"].append(best)
    return series


def write_plot(history: Sequence[Mapping[str, Any]], out: str | Path, title: str = "dask_podracer") -> Path:
    """Write both curves to `out` (.html with Bokeh, .png with matplotlib)."""
    out = Path(out)
    data = curves(history)
    if not data:
        raise ValueError("the store's history has no finished segment to plot")
    if out.suffix == ".html":
        _bokeh(data, out, title)
    elif out.suffix == ".png":
        _matplotlib(data, out, title)
    else:
        raise ValueError(f"cannot write {out.name!r}: the output must end in .html or .png")
    return out


def _bokeh(data: dict[str, dict[str, list[float]]], out: Path, title: str) -> None:
    from bokeh.layouts import row
    from bokeh.plotting import output_file, save

    output_file(out, title=title, mode="inline")  # inline: the page opens without network access
    save(row(*curve_figures(data, title)))


def curve_figures(data: dict[str, dict[str, list[float]]], title: str) -> list[Any]:
    """The two curves as Bokeh figures (reward vs wall-clock seconds, vs env steps)."""
    from bokeh.models import ColumnDataSource
    from bokeh.plotting import figure

    agents = [name for name in data if name != "best"]
    plots = []
    for x, label in (("wall_seconds", "wall-clock seconds"), ("env_steps", "env steps")):
        fig = figure(title=f"{title}: episodic reward vs {label}", x_axis_label=label, y_axis_label="evaluation return",
                     width=600, height=400)
        if len(agents) <= LEGEND_AGENTS:
            _draw_each_agent(fig, data, x)
        else:
            _draw_agents_together(fig, data, x)
        if "best" in data:
            fig.line(x, "score", source=ColumnDataSource(data["best"]), line_width=3, color="black",
                     legend_label="best so far")
        fig.legend.location = "bottom_right"
        fig.legend.click_policy = "hide"
        plots.append(fig)
    return plots


def _draw_each_agent(fig: Any, data: dict[str, dict[str, list[float]]], x: str) -> None:
    """A line and points per agent, each with its legend entry (a click hides it)."""
    from bokeh.models import ColumnDataSource
    from bokeh.palettes import Category10_10

    for i, (name, line) in enumerate(sorted(data.items())):
        if name != "best":
            source = ColumnDataSource(line)
            fig.scatter(x, "score", source=source, color=Category10_10[i % 10], legend_label=name, size=6)
            fig.line(x, "score", source=source, color=Category10_10[i % 10], alpha=0.5, legend_label=name)


def _draw_agents_together(fig: Any, data: dict[str, dict[str, list[float]]], x: str) -> None:
    """Every agent's lines, and every agent's points, from one source each, without a legend (hover a point for its
    agent): a renderer per agent took Bokeh 29 s to build for 300 agents."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.palettes import Category10_10

    agents = sorted((name for name in data if name != "best"), key=agent_order)
    colors = {name: Category10_10[i % 10] for i, name in enumerate(agents)}
    fig.multi_line("xs", "ys", color="color", alpha=0.5, source=ColumnDataSource(
        {"xs": [data[a][x] for a in agents], "ys": [data[a]["score"] for a in agents], "color": list(colors.values())}))
    points = ColumnDataSource({x: [v for a in agents for v in data[a][x]],
                               "score": [v for a in agents for v in data[a]["score"]],
                               "agent": [a for a in agents for _ in data[a]["score"]],
                               "color": [colors[a] for a in agents for _ in data[a]["score"]]})
    dots = fig.scatter(x, "score", color="color", size=6, source=points)
    fig.add_tools(HoverTool(renderers=[dots], tooltips=[("", "@agent"), ("score", "@score{0.0}")]))


def _matplotlib(data: dict[str, dict[str, list[float]]], out: Path, title: str) -> None:
    fig = new_figure((12, 4.5))
    draw_curves(fig.subplots(1, 2), data, title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def new_figure(size: tuple[float, float]) -> Any:
    """A matplotlib Figure without pyplot: it draws with no GUI and leaves the caller's backend (a notebook's) alone."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ValueError("writing PNG needs matplotlib (pip install 'dask-podracer[plot]'), or write .html") from None
    return Figure(figsize=size)


def draw_curves(axes: Sequence[Any], data: dict[str, dict[str, list[float]]], title: str) -> None:
    """Both curves on two matplotlib axes."""
    for ax, (x, label) in zip(axes, (("wall_seconds", "wall-clock seconds"), ("env_steps", "env steps"))):
        for name, line in sorted(data.items()):
            style = {"color": "black", "linewidth": 2.5} if name == "best" else {"marker": "o", "alpha": 0.6}
            ax.plot(line[x], line["score"], label=legend_label(name, len(data) - 1), **style)
        ax.set_xlabel(label)
        ax.set_ylabel("evaluation return")
        ax.set_title(f"{title}: reward vs {label}")
    axes[1].legend(loc="lower right", fontsize="small")


def legend_label(name: str, agents: int) -> str | None:
    """A curve's legend entry: each agent's, or with more than `LEGEND_AGENTS` agents the best so far's alone."""
    if name == "best":
        return "best so far"
    return name if agents <= LEGEND_AGENTS else None
