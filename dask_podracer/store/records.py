"""The records that cross layers, each defined once: a checkpoint's attributes, a leaderboard entry, a history record.

They are TypedDicts, not classes: what the store holds is their JSON, unchanged, and a reader gets plain
dicts back (as every store ever written has them), typed. Fields marked NotRequired are absent from
records written before they existed, or from records of a kind that has none (a failed segment has no
score); readers use `.get` for those.

Step counts have one name per meaning, the same in every record:

- `segment_env_steps`: env steps one segment trained for;
- `lineage_env_steps` (called `env_steps` in checkpoint attributes and leaderboard entries, the name they
  were first written with): env steps of the checkpoint's whole lineage, its ancestors' included;
- `run_env_steps`: env steps of every segment the tournament has finished, over all its invocations.

A segment's budget is `SegmentSpec.env_step_budget` (`segment.env_steps` in a config); it is in no record.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class ReplayBase(TypedDict):
    """The older replay rows a checkpoint holds by reference (`tournament.replay = "share"`)."""

    key: str
    """The checkpoint whose buffer holds them (following its own `replay_base` in turn)."""
    rows: int


class CheckpointAttrs(TypedDict):
    """A checkpoint's user metadata (`Checkpoint.attrs`), written by `train/agent_checkpoints.py::save_agent`."""

    algorithm: str
    env: str
    """The env's name, as `make_vec_env` takes it."""
    env_kwargs: NotRequired[dict[str, Any]]
    eval_env_kwargs: NotRequired[dict[str, Any]]
    """What the env that scored it was built with on top of `env_kwargs` (`run.eval_env_kwargs`), when any."""
    hparams: dict[str, Any]
    parent: str | None
    generation: int
    """Segments in the lineage before this one."""
    seed: int
    score: float
    score_stderr: NotRequired[float]
    env_steps: int
    """The lineage's env steps (`lineage_env_steps`)."""
    segment_env_steps: int
    metrics: NotRequired[dict[str, float]]
    structure: Any
    """The skeleton of the agent's state dict (train/state.py), with array names at the leaves."""
    device: NotRequired[str]
    replay_base: NotRequired[ReplayBase]


class LeaderboardEntry(TypedDict):
    """One ranked entry of the leaderboard, written by `population/updater.py::leaderboard_entry`."""

    key: str
    group: str
    """The population group of the agent that trained it (its algorithm, in a single-group run)."""
    score: float
    score_stderr: NotRequired[float]
    env_steps: int
    """The lineage's env steps (`lineage_env_steps`)."""
    algorithm: str
    env: str
    env_kwargs: NotRequired[dict[str, Any]]
    parent: str | None
    generation: int
    hparams: dict[str, Any]


class HistoryRecord(TypedDict):
    """What happened to one segment, appended in order by the orchestrator (`population/orchestrator.py`)."""

    key: str
    agent: int | None
    """The agent that trained it (None for a recovered checkpoint whose agent no saved state knew)."""
    group: str | None
    parent: str | None
    adopted: bool | None
    """True when the parent is another agent's checkpoint (an exploit); None for a recovered one."""
    generation: int
    hparams: dict[str, Any]
    status: str
    """"finished", "failed" or "cancelled"."""
    score: float | None
    score_stderr: NotRequired[float | None]
    rank: int | None
    """Where it entered the leaderboard (0 = top), None if it did not."""
    segment_env_steps: int
    lineage_env_steps: NotRequired[int | None]
    run_env_steps: int
    wall_seconds: float
    """Seconds since the tournament's first invocation started (earlier invocations' time included)."""
    train_seconds: NotRequired[float | None]
    metrics: NotRequired[dict[str, float]]
    device: NotRequired[str | None]
    error: str | None
    recovered: NotRequired[bool]
    """True for a segment an earlier invocation finished but never recorded."""
    reason: NotRequired[str]
    """A cancelled segment's: "capacity", or the stop's reason."""
    agent_score: NotRequired[float | None]
    """A cancelled segment's agent's latest score."""
