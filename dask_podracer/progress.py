"""The terminal's view of a running tournament: a progress bar on a TTY, one line per segment elsewhere.

On a terminal, one status line is redrawn in place after every segment::

    [#########...............]  38% of 5m00s | best -161.4 | done 14 failed 1 | running 2 | 0.12 seg/s | 410 steps/s

and a permanent line is printed above it when the best score improves or a segment
fails, so the scrollback keeps the story. The status line is cut to the terminal's width,
measured at each redraw: a line that wrapped would leave its first rows behind, as the
redraw erases one row. When the output is not a terminal (CI, a log file, cron), or is a
terminal that cannot move its cursor (`TERM=dumb`), escape codes would be noise: every
segment gets one plain line instead. Control characters of an error message (a library's
coloured text) are shown escaped, so they can neither break a log's lines nor drive the terminal.
Fed `population.Progress` objects by `run_tournament(on_progress=...)`; imports nothing
heavy, so `podracer --help` stays fast.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

from dask_podracer.terminal_text import printable

if TYPE_CHECKING:
    from dask_podracer.population.orchestrator import Progress

BAR_WIDTH = 24
_UP_AND_CLEAR = "\x1b[1A\r\x1b[2K"
"""Cursor up one line, to its start, erase it: the status line always ends with a newline, so whatever
prints after the run (the CLI's summary) starts on a line of its own without telling the bar."""


class ProgressPrinter:
    """Call it with each `Progress`; `tty` defaults to whether `stream` is a terminal that redraws (`can_redraw`)."""

    def __init__(self, budget_seconds: float, stream: TextIO | None = None, tty: bool | None = None) -> None:
        if budget_seconds <= 0:
            raise ValueError(f"budget_seconds must be > 0, got {budget_seconds}")
        self.budget_seconds = budget_seconds
        self.stream = stream if stream is not None else sys.stdout
        self.tty = can_redraw(self.stream) if tty is None else tty
        self.best: float | None = None
        self._status_shown = False

    def __call__(self, p: Progress) -> None:
        if not self.tty:
            self._write(segment_line(p, self.budget_seconds) + "\n")
            return
        lines = []
        if p.error is not None:
            lines.append(f"{_clock(p.wall_seconds)} segment failed: {printable(p.error)}")
        elif p.best_score is not None and (self.best is None or p.best_score > self.best) and p.result is not None:
            lines.append(f"{_clock(p.wall_seconds)} new best {p.best_score:.1f}: {p.result.key} "
                         f"({p.result.algorithm}, {p.env_steps:,} env steps so far)")
        if p.best_score is not None:
            self.best = p.best_score if self.best is None else max(self.best, p.best_score)
        erase = _UP_AND_CLEAR if self._status_shown else ""
        status = fit(status_line(p, self.budget_seconds), terminal_width(self.stream))
        self._write(erase + "".join(line + "\n" for line in lines) + status + "\n")
        self._status_shown = True

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def can_redraw(stream: TextIO) -> bool:
    """Whether `stream` is a terminal that moves its cursor: `TERM=dumb` (Emacs' shell, some CI consoles)
    is a terminal that prints escape codes as text."""
    return stream.isatty() and os.environ.get("TERM") != "dumb"


def terminal_width(stream: TextIO) -> int | None:
    """Columns of the terminal `stream` writes to, asked at every redraw so a resized window is followed;
    COLUMNS, when set, wins (as for `shutil.get_terminal_size`). None for a stream that is not a terminal file."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError and a ValueError
        return None
    override = os.environ.get("COLUMNS", "")
    return int(override) if override.isdigit() and int(override) > 0 else columns or None


def fit(line: str, width: int | None) -> str:
    """`line` cut to one row of a terminal `width` columns wide, its last column left free: a terminal that
    wraps on writing the last column would put the cursor on a new row, and the erase before the next redraw
    would remove that empty row instead of the status line."""
    if width is None or len(line) < width:
        return line
    return line[: max(1, width - 1)]


def _budget_spent(p: Progress) -> float:
    """Seconds of the budget spent: a resumed run continues the budget its cut-off invocation had spent (a bar of
    this invocation's time alone stopped at "43% of budget")."""
    return p.wall_seconds if p.budget_spent is None else p.budget_spent


def status_line(p: Progress, budget_seconds: float) -> str:
    """The TTY's one redrawn line: a bar of the budget spent, best score, counts and rates."""
    spent = min(1.0, _budget_spent(p) / budget_seconds)
    filled = round(spent * BAR_WIDTH)
    best = "-" if p.best_score is None else f"{p.best_score:.1f}"
    return (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {100 * spent:3.0f}% of {_clock(budget_seconds)} | "
            f"best {best} | done {p.segments_completed} failed {p.segments_failed} | running {p.running} | "
            f"{_rates(p)}")


def segment_line(p: Progress, budget_seconds: float) -> str:
    """One line per segment, for logs: what just finished (or failed) and the totals so far."""
    spent = min(100.0, 100.0 * _budget_spent(p) / budget_seconds)
    if p.result is not None:
        entered = f"rank {p.rank + 1}" if p.rank is not None else "not ranked"
        what = f"{p.result.key} {p.result.algorithm:<4} score {p.result.score:9.1f} ({entered})"
    else:
        what = f"segment failed: {printable(p.error or '')}"
    best = "-" if p.best_score is None else f"{p.best_score:.1f}"
    return (f"[{p.wall_seconds:7.1f}s {spent:3.0f}% of budget] {what} | best {best} | done {p.segments_completed} "
            f"failed {p.segments_failed} running {p.running} | {_rates(p)} | {p.env_steps:,} env steps")


def _rates(p: Progress) -> str:
    seconds = max(p.wall_seconds, 1e-9)
    done = p.segments_completed + p.segments_failed
    return f"{done / seconds:.2f} seg/s | {p.env_steps / seconds:,.0f} steps/s"


def _clock(seconds: float) -> str:
    """`4m05s`, `1h02m03s`, `12.5s`."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
