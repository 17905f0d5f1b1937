"""The population views' data, from a store's history: the lineage tree and the hyper-parameters' course.

Pure functions of history records (`docs/store-format.md`), drawn by `population_plots.py` on the live
page and by `podracer plot --view lineage|hparams`. Only finished segments count.

- **Lineage**: one node per finished segment at (its wall-clock seconds, its agent's lane); an edge from
  the segment it started from. A node is a `fresh` start (no parent: new weights, hyper-parameters from
  the prior), an `exploit` (its agent adopted another line's checkpoint, usually with perturbed
  hyper-parameters) or a `continue` (the agent trained on from its own last checkpoint).
- **Tuned hyper-parameters**: the numeric ones whose values differ between finished segments of a group; each one's
  value over wall-clock per agent (PBT's signature plot, a staircase: a segment's value holds until it ends)
  and the score of every segment against it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

KINDS = ("fresh", "exploit", "continue")


def finished(history: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in history if r.get("status") == "finished" and r.get("score") is not None]


def agent_name(record: Mapping[str, Any]) -> str:
    """`agent 3`; `agent ?` for a segment no agent is known of (a checkpoint recovered after a crash: `agent` None)."""
    agent = record.get("agent")
    return f"agent {'?' if agent is None else agent}"


def agent_order(name: str) -> tuple[int, str]:
    number = name.removeprefix("agent ")
    return (int(number), "") if number.isdigit() else (1 << 62, name)


def agent_lanes(names: Collection[str]) -> dict[str, int]:
    """Each agent's row in the lineage: its number (what the hover and the other views call it); names without
    one (`agent ?`) go on rows of their own above the highest number, never on a numbered agent's row."""
    numbered = {name: agent_order(name)[0] for name in names if not agent_order(name)[1]}
    first_free = max(numbered.values(), default=-1) + 1
    return {**numbered, **{name: first_free + i for i, name in enumerate(sorted(set(names) - set(numbered)))}}


def kind(record: Mapping[str, Any]) -> str:
    """`fresh`, `exploit` or `continue` (see the module's docstring)."""
    if not record.get("parent"):
        return "fresh"
    return "exploit" if record.get("adopted") else "continue"


def lineage_graph(history: Sequence[Mapping[str, Any]]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(nodes, edges). Nodes: key, agent, lane (the agent's row: its number), wall, steps, score,
    generation, parent, kind. Edges, parent to child: xs, ys (two points each), kind (the child's)."""
    records = finished(history)
    lanes = agent_lanes({agent_name(r) for r in records})
    nodes: dict[str, list[Any]] = {c: [] for c in ("key", "agent", "lane", "wall", "steps", "score", "generation",
                                                   "parent", "kind")}
    where: dict[str, tuple[float, int]] = {}
    for r in records:
        lane, wall = lanes[agent_name(r)], float(r.get("wall_seconds") or 0.0)
        for column, value in (("key", r.get("key")), ("agent", agent_name(r)), ("lane", lane), ("wall", wall),
                              ("steps", int(r.get("lineage_env_steps") or 0)), ("score", float(r["score"])),
                              ("generation", int(r.get("generation") or 0)), ("parent", r.get("parent") or "-"),
                              ("kind", kind(r))):
            nodes[column].append(value)
        where[str(r.get("key"))] = (wall, lane)
    edges: dict[str, list[Any]] = {"xs": [], "ys": [], "kind": []}
    for r in records:
        parent = where.get(str(r.get("parent")))
        if parent is not None:
            edges["xs"].append([parent[0], float(r.get("wall_seconds") or 0.0)])
            edges["ys"].append([parent[1], lanes[agent_name(r)]])
            edges["kind"].append(kind(r))
    return nodes, edges


def tuned(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """The numeric hyper-parameters whose values differ between finished segments of one group, sorted. Within a
    group, not across groups: the groups of a `[[groups]]` run start from different algorithms' defaults (sac's
    gamma and num_envs are not ppo's), which no search moved."""
    values: dict[tuple[str | None, str], set[float]] = {}
    for r in finished(history):
        for name, value in (r.get("hparams") or {}).items():
            if _number(value):
                values.setdefault((r.get("group"), name), set()).add(float(value))
    return sorted({name for (_, name), seen in values.items() if len(seen) > 1})


def hparam_series(history: Sequence[Mapping[str, Any]], name: str) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(lines, points) of hyper-parameter `name`. Lines, one per agent: agent, xs, ys (a staircase over
    wall-clock seconds: the value of a segment holds from the end of the agent's previous one to its own).
    Points, one per finished segment that has `name`: agent, key, wall, value, score, kind."""
    per_agent: dict[str, list[tuple[float, float]]] = {}
    points: dict[str, list[Any]] = {c: [] for c in ("agent", "key", "wall", "value", "score", "kind")}
    for r in finished(history):
        value = (r.get("hparams") or {}).get(name)
        if not _number(value):
            continue
        wall = float(r.get("wall_seconds") or 0.0)
        per_agent.setdefault(agent_name(r), []).append((wall, float(value)))
        for column, v in (("agent", agent_name(r)), ("key", r.get("key")), ("wall", wall), ("value", float(value)),
                          ("score", float(r["score"])), ("kind", kind(r))):
            points[column].append(v)
    agents = sorted(per_agent, key=agent_order)
    lines: dict[str, list[Any]] = {"agent": agents, "xs": [], "ys": []}
    for agent in agents:
        xs, ys = staircase(per_agent[agent])
        lines["xs"].append(xs)
        lines["ys"].append(ys)
    return lines, points


def staircase(points: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """[(t0, v0), (t1, v1), ...] -> the path of a value that is v_i from t_(i-1) to t_i (v0 at t0 alone)."""
    xs, ys = [], []
    for i, (t, v) in enumerate(points):
        if i:
            xs.append(points[i - 1][0])
            ys.append(v)
        xs.append(t)
        ys.append(v)
    return xs, ys


def log_scale(values: Sequence[float]) -> bool:
    """Whether values are best drawn on a log axis: all positive and spread over a factor of 20 or more."""
    return bool(values) and min(values) > 0 and max(values) / min(values) >= 20


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
