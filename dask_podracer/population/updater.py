"""The updater: does a finished segment enter the leaderboard, and where?"""

from __future__ import annotations

from collections.abc import Sequence

from dask_podracer.store.records import LeaderboardEntry
from dask_podracer.train import SegmentResult


def leaderboard_entry(result: SegmentResult, group: str | None = None) -> LeaderboardEntry:
    entry: LeaderboardEntry = {
        "key": result.key,
        "group": group or result.algorithm,
        "score": result.score,
        "score_stderr": result.score_stderr,
        "env_steps": result.lineage_env_steps,
        "algorithm": result.algorithm,
        "env": result.env,
        "parent": result.parent,
        "generation": result.generation,
        "hparams": result.hparams,
    }
    if result.env_kwargs:
        entry["env_kwargs"] = result.env_kwargs
    return entry


def update_leaderboard(board: Sequence[LeaderboardEntry], result: SegmentResult, size: int,
                       group: str | None = None) -> tuple[list[LeaderboardEntry], int | None]:
    """The new ranked board and the rank (0 = best) the result got, or None if it did not enter.

    A result enters if the board has room or it beats the K-th entry. A key that is
    already on the board (Dask ran the segment twice) is not entered again.
    """
    entries = [LeaderboardEntry(**e) for e in board]
    if any(e["key"] == result.key for e in entries):
        return entries, None
    if len(entries) >= size and result.score <= entries[size - 1]["score"]:
        return entries[:size], None
    rank = next((i for i, e in enumerate(entries) if result.score > e["score"]), len(entries))
    entries.insert(rank, leaderboard_entry(result, group))
    return entries[:size], rank
