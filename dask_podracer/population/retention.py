"""Retention: which checkpoints the store keeps, so that a long or nightly-resumed run's store stays bounded.

A checkpoint is kept while it can still matter, and deleted once it cannot:
- it is on the leaderboard (a future segment may start from it);
- it is the parent of a segment in flight (a worker may be loading it now);
- it is an agent's latest, live or retired (a retired agent comes back when the pool grows);
- it is one of the newest `keep_per_agent` of a live agent's own segments;
- it is pinned (an exported champion, or one a user chose);
- no history record names it yet, or only one written after the run state: a segment that finished after the
  last table write (or after its client died), which the next run records and continues from (`podracer gc`
  only: a run records these first);
- a kept checkpoint reads replay rows from it (`tournament.replay = "share"`).

The rule is a pure function of those facts (`checkpoints_to_keep`), used by the orchestrator as a run
goes and by `podracer gc` on a store at rest. Deleting is the store's (`PodracerStore.delete_checkpoint`,
crash-safe); a deleted checkpoint's history record keeps its place in the lineage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from dask_podracer.store import CheckpointNotFound, PodracerStore, StoreError
from dask_podracer.train import replay_layout, replay_sources


@dataclasses.dataclass(frozen=True)
class Holders:
    """What holds checkpoints in a store at one moment (keys only)."""

    board: frozenset[str]
    """Leaderboard entries."""
    in_flight_parents: frozenset[str]
    """Parents of the segments running now."""
    agent_latest: frozenset[str]
    """Every agent's latest checkpoint, live or retired."""
    live_lines: Mapping[int, Sequence[str]]
    """Each live agent's own checkpoints (the segments it trained), oldest first."""
    pinned: frozenset[str]
    unrecorded: frozenset[str] = frozenset()
    """At rest: published checkpoints no history record names, or named only by records written after the run
    state: the next run recovers them, and moves their agents on to them."""


def checkpoints_to_keep(holders: Holders, keep_per_agent: int, sources: Callable[[str], Iterable[str]]) -> set[str]:
    """The keys the store must keep: everything that holds one, and what those read their replay rows from
    (`sources(key)`: the checkpoints `key`'s shared buffer refers to)."""
    kept = set(holders.board | holders.in_flight_parents | holders.agent_latest | holders.pinned | holders.unrecorded)
    for line in holders.live_lines.values():
        kept.update(line[-keep_per_agent:])
    for key in list(kept):
        kept.update(sources(key))
    return kept


def own_lines(history: Iterable[Mapping[str, Any]]) -> dict[int, list[str]]:
    """Each agent's own checkpoints, oldest first, from history records (finished segments it trained)."""
    lines: dict[int, list[str]] = {}
    for record in history:
        if record.get("status") == "finished" and record.get("agent") is not None:
            lines.setdefault(int(record["agent"]), []).append(record["key"])
    return lines


def missed_records(saved: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The history records written after the run state `saved` (the history is written every second, the state
    every few: a client killed in between leaves them): those past the count it records, or (a state written before
    it recorded one) those of a later run time than its own."""
    known = saved.get("history_records")
    if isinstance(known, int) and not isinstance(known, bool):
        return list(history[known:])
    if not isinstance(saved.get("wall_seconds"), (int, float)):  # no state, or one too old to tell
        return []
    wall = float(saved["wall_seconds"])
    return [r for r in history if float(r.get("wall_seconds") or 0.0) > wall]


class ReplaySources:
    """`replay_sources` of a store, remembering each checkpoint's replay layout (it never changes)."""

    def __init__(self, store: PodracerStore) -> None:
        self.store = store
        self.layouts: dict[str, tuple[int, str | None, int]] = {}

    def __call__(self, key: str) -> list[str]:
        try:
            return replay_sources(self.store, key, self.layout)
        except StoreError:  # a pin or board entry without its checkpoint: nothing it reads to keep
            return []

    def layout(self, key: str) -> tuple[int, str | None, int]:
        if key not in self.layouts:
            self.layouts[key] = replay_layout(self.store, key)
        return self.layouts[key]

    def forget(self, key: str) -> None:
        self.layouts.pop(key, None)


def holders_at_rest(store: PodracerStore) -> Holders:
    """What holds checkpoints in a store no run is using, from its tables: the run state's agents (the segments
    they were running are lost, and their parents are those agents' latest), the board, the history, the pins; and
    the published checkpoints no history record names, which the next run recovers (a client killed between a
    segment's end and its next table write leaves them), and those the history recorded after the state was written
    (the next run moves their agents on to them); with what they all read their replay rows from."""
    state = store.read_run_state()
    agents = (state.get("machine") or {}).get("agents", [])
    history = store.read_history()
    lines = own_lines(history)
    recorded = {r.get("key") for r in history}
    recorded_late = {r["key"] for r in missed_records(state, history) if r.get("status") == "finished"}
    live = {int(a["id"]) for a in agents if a.get("active", True)}
    return Holders(board=frozenset(e["key"] for e in store.read_leaderboard()), in_flight_parents=frozenset(),
                   agent_latest=frozenset(a["checkpoint"] for a in agents if a.get("checkpoint")),
                   live_lines={agent: line for agent, line in lines.items() if agent in live},
                   pinned=frozenset(store.pinned()),
                   unrecorded=frozenset(k for k in store.checkpoint_keys() if k not in recorded) | recorded_late)


@dataclasses.dataclass(frozen=True)
class Collection:
    """What a retention pass removed (or would remove)."""

    deleted: list[tuple[str, int]]
    """Published checkpoints deleted: (key, bytes)."""
    finished: list[tuple[str, int]]
    """Deletions an earlier pass left half done (marked, not removed): (key, bytes)."""
    kept: int
    """Published checkpoints kept."""

    @property
    def bytes_freed(self) -> int:
        return sum(n for _, n in self.deleted) + sum(n for _, n in self.finished)


def collect(store: PodracerStore, keep: set[str], candidates: Iterable[str], dry_run: bool = False,
            finish_cut_off: bool = True) -> Collection:
    """Delete every candidate not in `keep`, and (`finish_cut_off`) finish deletions a crash cut off; with
    `dry_run`, only say what would go."""
    candidates = sorted(set(candidates))
    doomed = [key for key in candidates if key not in keep]
    deleted = [(key, freed) for key in doomed if (freed := _delete(store, key, dry_run)) is not None]
    leftovers = store.deleted_checkpoints() if finish_cut_off else []
    finished = [(key, store.checkpoint_bytes(key) if dry_run else store.remove_deleted(key)) for key in leftovers]
    return Collection(deleted=deleted, finished=finished, kept=len(candidates) - len(doomed))


def _delete(store: PodracerStore, key: str, dry_run: bool) -> int | None:
    """The bytes deleting `key` frees (with `dry_run`, would free); None when it is gone already: named by a record
    whose checkpoint was removed by hand, or by a segment function of one's own that saves none
    (benchmarks/orchestrator_overhead.py's). Deleting it raised CheckpointNotFound, which ended the run at its
    last table write."""
    try:
        return store.checkpoint_bytes(key) if dry_run else store.delete_checkpoint(key)
    except CheckpointNotFound:
        return None
