"""Family trees of checkpoints, from a store's history: who descends from whom, with what changes."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dask_podracer.status import number_text

if TYPE_CHECKING:
    from dask_podracer.store.records import HistoryRecord


def family_tree(history: Sequence[HistoryRecord], key: str, stored: Collection[str] | None = None) -> str:
    """`key`'s ancestors down from the root, then every descendant of `key`, one line each.

    A line shows the segment's key, generation, score, whether it adopted another
    agent's checkpoint, and the hyper-parameters that differ from its parent's. With `stored`
    (the keys whose checkpoints the store still holds), a segment whose checkpoint retention
    deleted is marked "deleted": its place in the tree comes from its history record.
    """
    records = {r["key"]: r for r in history if r.get("status") == "finished"}
    if key not in records:
        raise KeyError(f"no finished segment {key!r} in this store's history")
    chain, seen = [key], {key}
    while (parent := records[chain[-1]].get("parent")) in records and parent not in seen:  # (a damaged history
        chain.append(parent)                                                                 # could loop)
        seen.add(parent)
    chain.reverse()
    children: dict[str, list[str]] = {}
    for r in records.values():
        if r.get("parent"):
            children.setdefault(r["parent"], []).append(r["key"])

    lines = []
    root_parent = records[chain[0]].get("parent")
    if root_parent:
        lines.append(f"{root_parent} (not in the history)")
    for depth, k in enumerate(chain):
        lines.append(_line(records, k, "    " * max(depth - 1, 0) + ("└── " if depth else ""), k == key, stored))

    # depth first, with a stack of its own: a line a thousand segments long is deeper than Python's recursion limit
    pending: list[tuple[str, str, bool]] = []  # (key, its parent's prefix, last of its siblings), next on top

    def push_children(k: str, prefix: str) -> None:
        kids = sorted(children.get(k, []))
        pending.extend((child, prefix, i == len(kids) - 1) for i, child in reversed(list(enumerate(kids))))

    push_children(key, "    " * (len(chain) - 1))
    while pending:
        child, prefix, last = pending.pop()
        lines.append(_line(records, child, prefix + ("└── " if last else "├── "), False, stored))
        push_children(child, prefix + ("    " if last else "│   "))
    return "\n".join(lines)


def _line(records: Mapping[str, Mapping[str, Any]], key: str, prefix: str, marked: bool,
          stored: Collection[str] | None) -> str:
    r = records[key]
    parent = records.get(r.get("parent") or "")
    changed = {k: v for k, v in r.get("hparams", {}).items() if parent is None or parent.get("hparams", {}).get(k) != v}
    shown = " ".join(f"{k}={_fmt(v)}" for k, v in sorted(changed.items())) if parent else ""
    tags = [f"gen {r.get('generation', 0)}", f"score {number_text(r.get('score'), '.1f')}",
            f"agent {r.get('agent', '-')}"]
    if r.get("adopted"):
        tags.append("adopted")
    if stored is not None and key not in stored:
        tags.append("deleted")
    return f"{prefix}{key}  {'  '.join(tags)}{'  ' + shown if shown else ''}{'  ◀' if marked else ''}"


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
