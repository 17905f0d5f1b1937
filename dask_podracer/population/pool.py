"""One member of the population, as the tournament state machine keeps it (and saves it in the run state)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class AgentState:
    id: int
    group: str
    hparams: dict[str, Any]
    checkpoint: str | None = None
    """Its latest checkpoint."""
    score: float | None = None
    """The evaluation score of that checkpoint."""
    score_stderr: float = 0.0
    """That score's standard error."""
    generation: int = 0
    """Segments in that checkpoint's lineage before its last one."""
    running: str | None = None
    """Key of the segment it is training now."""
    active: bool = True
    """False while capacity has no slot for it (it keeps its checkpoint and may come back)."""
    segments: int = 0
    line_segments: int = 0
    """Segments finished since it last started fresh or adopted (compared with tournament.ready)."""
