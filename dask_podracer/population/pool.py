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
    left_line: list[Any] | None = None
    """While it trains a segment that adopts another's checkpoint: [hparams, line_segments] of the line its own
    checkpoint is on. Its hparams are the child's meanwhile, but its checkpoint is not the child's until that
    segment finishes; one that fails or is cancelled leaves it on this line."""

    @property
    def checkpoint_hparams(self) -> dict[str, Any]:
        """The hyper-parameters its checkpoint (or, before it has one, its fresh draw) trains with: what a donor
        passes on, not those of a child it is still training."""
        return self.left_line[0] if self.left_line is not None else self.hparams
