"""`podracer status STORE`: is a run going, how far has it got, what went wrong last. One screen, from the store.

Everything comes from the store's small tables (no cluster, nothing written): the run state says
whether the last invocation finished and when it last wrote (a running loop rewrites it at least
every `heartbeat_seconds`), the leaderboard gives the best score, the history counts segments and
holds the last error.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dask_podracer.terminal_text import printable

if TYPE_CHECKING:
    from dask_podracer.store.records import HistoryRecord, LeaderboardEntry

HEARTBEATS = 3
"""A state not finished, not stopped, and written within this many heartbeats is a run going now."""
DEFAULT_HEARTBEAT = 30.0


@dataclasses.dataclass(frozen=True)
class StoreStatus:
    store: str
    state: str
    """`running`, `finished`, `stopped` (interrupted: Ctrl-C, a lost scheduler), `silent` (not finished and
    not written for more than 3 heartbeats: a killed client), `unrecorded` (a state an older dask_podracer wrote,
    which recorded neither how its invocation ended nor when: not running) or `new` (no run has written its state)."""
    stop_reason: str | None
    started_at: float | None
    """When the current (or last) invocation started, Unix seconds."""
    written_at: float | None
    checked_at: float
    invocations: int
    run_seconds: float
    """Wall-clock seconds of all invocations."""
    best: dict[str, Any] | None
    """The leaderboard's first entry: key, score, score_stderr, env_steps, group."""
    finished: int
    failed: int
    cancelled: int
    env_steps: int
    leg_segments: int
    budget_spent: float | None
    """Seconds of the current leg's budget spent (a run cut off continues its budget on the next start)."""
    budget_seconds: float | None
    """The run's budget, where the run state records it."""
    max_segments: int | None
    last_error: dict[str, Any] | None
    """The last failed segment: key, agent, error, wall_seconds (of run time), date (None when an earlier invocation
    recorded it, or the state records no dates: run time skips the gaps between invocations)."""
    heartbeat_seconds: float = DEFAULT_HEARTBEAT
    config: str | None = None
    """The config file of the last invocation, then its `--set` changes (`x.toml with --set hparams.gamma=0.9`),
    where the run state records it."""
    exited_client: int | None = None
    """The process id of a `silent` run's client that ran on this machine and has exited (killed)."""

    @property
    def budget_left(self) -> float | None:
        if self.budget_seconds is None or self.budget_spent is None:
            return None
        running_for = self.checked_at - self.written_at if self.state == "running" and self.written_at else 0.0
        return max(0.0, self.budget_seconds - self.budget_spent - running_for)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "budget_left": self.budget_left}


def store_status(state: Mapping[str, Any], board: Sequence[LeaderboardEntry], history: Sequence[HistoryRecord],
                 store: str = "", now: float | None = None) -> StoreStatus:
    """The status of a store whose tables are `state`, `board` and `history`, as seen at `now`."""
    now = time.time() if now is None else now
    counts = {s: sum(r.get("status") == s for r in history) for s in ("finished", "failed", "cancelled")}
    failed = [r for r in history if r.get("status") == "failed"]
    written, started = _number(state.get("written_at")), _number(state.get("invocation_started_at"))
    run_seconds = float(state.get("wall_seconds") or 0.0)
    last_error = None
    if failed:
        r = failed[-1]
        # a record's wall_seconds is run time, which skips the gaps between invocations: it dates a record of the
        # invocation that wrote the state (run time since its start, after the earlier invocations' `offset`), not
        # one of an earlier invocation, which is shown at its run time instead
        offset = run_seconds - (written - started) if written is not None and started is not None else None
        seconds = float(r.get("wall_seconds") or 0.0)
        date = written - run_seconds + seconds if offset is not None and seconds > offset + 1e-3 else None
        last_error = {"key": r.get("key"), "agent": r.get("agent"), "error": r.get("error"),
                      "wall_seconds": r.get("wall_seconds"), "date": date}
    leg = state.get("leg") or {}
    best = None
    if board:
        best = {k: board[0].get(k) for k in ("key", "score", "score_stderr", "env_steps", "group", "algorithm")}
    return StoreStatus(
        store=store, state=run_phase(state, now), stop_reason=state.get("stop_reason"),
        started_at=_number(state.get("invocation_started_at")), written_at=written, checked_at=now,
        invocations=int(state.get("invocations") or 0), run_seconds=run_seconds, best=best,
        finished=counts["finished"], failed=counts["failed"], cancelled=counts["cancelled"],
        env_steps=max((int(r.get("run_env_steps") or 0) for r in history), default=0),
        leg_segments=int(leg.get("segments") or 0), budget_spent=_number(leg.get("budget_spent")),
        budget_seconds=_number(state.get("budget_seconds")),
        max_segments=int(state["max_segments"]) if _number(state.get("max_segments")) else None,
        last_error=last_error, heartbeat_seconds=_number(state.get("heartbeat_seconds")) or DEFAULT_HEARTBEAT,
        config=" ".join([state["config"], *state.get("settings", [])]) if state.get("config") else None,
        exited_client=exited_client(state) if state and not state.get("finished") and not state.get("stop_reason")
        else None)


def read_status(store_url: str, now: float | None = None) -> StoreStatus:
    """`store_status` of the store at `store_url` (raises StoreError when there is no store)."""
    from dask_podracer.store import PodracerStore

    store = PodracerStore(store_url)
    # the history first: a running loop writes history, board, state in that order, so the state read last
    # is never older than the history (the counts can only be behind the state, not ahead of it)
    history = store.read_history()
    board = store.read_leaderboard()
    return store_status(store.read_run_state(), board, history, store.url, now)


def format_status(s: StoreStatus) -> str:
    """The one screen of `podracer status`."""
    lines = [("store", s.store), ("run", _run_line(s))]
    if s.config:
        lines.append(("config", s.config))
    if s.best:
        stderr = f" ± {number_text(s.best['score_stderr'], '.1f')}" if s.best.get("score_stderr") else ""
        group = s.best.get("group") or s.best.get("algorithm") or "-"
        steps = number_text(s.best.get("env_steps") or 0, ",")
        lines.append(("best", f"{number_text(s.best['score'], '.1f')}{stderr}  {s.best['key']}  ({group}, {steps} "
                              f"env steps)"))
    else:
        lines.append(("best", "- (the leaderboard is empty)"))
    leg = f"; {s.leg_segments} in this leg" if s.invocations > 1 else ""  # else the same, up to the state's lag
    lines.append(("segments", f"{s.finished} finished, {s.failed} failed, {s.cancelled} cancelled{leg}"))
    lines.append(("budget", _budget_line(s)))
    lines.append(("env steps", f"{s.env_steps:,}"))
    if s.last_error:
        e = s.last_error
        when = (f"{_ago(s.checked_at - e['date'])} ago" if e.get("date")
                else f"at {_duration(e['wall_seconds'] or 0)} of run time")
        # a segment's error is its exception's text: escape codes of a library's coloured message stay text
        lines.append(("last error", f"{printable(str(e['error']))}  ({e['key']}, agent {e['agent']}, {when})"))
    else:
        lines.append(("last error", "none"))
    return "\n".join(f"{name:<11}{value}" for name, value in lines)


def _run_line(s: StoreStatus) -> str:
    invocations = (f"{s.invocations} invocation{'s' if s.invocations != 1 else ''}, "
                   f"{_duration(s.run_seconds)} of run time")
    written = f"state written {_ago(s.checked_at - s.written_at)} ago" if s.written_at else "state never dated"
    if s.state == "new":
        return "no run has written its state yet (a new store, or one written before run states existed)"
    if s.state == "unrecorded":
        return ("not running: its state, written by an older dask_podracer, does not record how its last invocation "
                f"ended; the next `podracer train` on this store starts a new budget; {invocations}")
    if s.state == "running":
        since = f"since {_date(s.started_at)} ({_duration(s.checked_at - s.started_at)})" if s.started_at else ""
        return f"RUNNING {since}; {written}; {invocations}"
    if s.state == "finished":
        return f"finished ({s.stop_reason}) {_date(s.written_at)}; {invocations}"
    if s.state == "stopped":
        return (f"stopped ({s.stop_reason}) {_date(s.written_at)}, not finished: the next `podracer train` on "
                f"this store continues its budget; {invocations}")
    if s.exited_client is not None:
        return (f"NOT RUNNING: not finished, but its client (process {s.exited_client} on this machine) has exited: "
                f"it was killed; the next `podracer train` on this store continues its budget; {invocations}")
    return (f"NOT RUNNING: not finished, but its {written} (a heartbeat is every "
            f"{_duration(s.heartbeat_seconds)}): its client was killed or lost its scheduler; the next "
            f"`podracer train` on this store continues its budget; {invocations}")


def _budget_line(s: StoreStatus) -> str:
    if s.budget_spent is None:
        return "- (the run state records no budget spent)"
    spent = _duration(s.budget_spent + (s.checked_at - s.written_at if s.state == "running" and s.written_at else 0))
    line = f"{spent} spent in this leg"
    if s.budget_seconds is not None:
        line += f" of {_duration(s.budget_seconds)}: {_duration(s.budget_left or 0.0)} left"
    else:
        line += " (the budget is the config's run.budget; this store does not record it)"
    if s.max_segments:
        line += f"; {s.leg_segments} of max_segments {s.max_segments} segments"
    return line


def run_phase(state: Mapping[str, Any], now: float) -> str:
    """What a run state says of its run: new, finished, stopped, running (written within HEARTBEATS heartbeats)
    or silent (its client stopped writing without ending: killed, or cut off from the store); unrecorded for a
    state of an older dask_podracer that records neither whether it finished nor when it was written."""
    if not state:
        return "new"
    if "finished" not in state and not state.get("stop_reason") and _number(state.get("written_at")) is None:
        # written by a dask_podracer before 2026-11-24, which recorded neither how an invocation ended nor when
        return "unrecorded"
    if state.get("finished"):
        return "finished"
    if state.get("stop_reason"):
        return "stopped"
    written, heartbeat = _number(state.get("written_at")), _number(state.get("heartbeat_seconds"))
    if written is not None and now - written <= HEARTBEATS * (heartbeat or DEFAULT_HEARTBEAT):
        return "silent" if exited_client(state) is not None else "running"
    return "silent"


def exited_client(state: Mapping[str, Any]) -> int | None:
    """The process id of the state's client if it ran on this machine and runs no more (a killed `podracer train`:
    the next one takes the store over at once, and no heartbeat will come), else None."""
    client = state.get("client")
    if not isinstance(client, Mapping) or client.get("host") != socket.gethostname():
        return None
    pid = client.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid() or process_alive(pid):
        return None
    return pid


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (a zombie, killed and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # someone else's process; a damaged state's pid: not known to be gone
        return True
    try:  # Linux: the field after the parenthesised command is the state, Z for a zombie
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def number_text(value: Any, spec: str) -> str:
    """`value` formatted with `spec` if it is a number, else "-": a table written by hand, or damaged, may lack
    one, and a store command shows the rest rather than a traceback."""
    if _number(value) is not None:
        return format(value, spec)
    align, width = re.match(r"([<>^]?)(\d*)", spec).groups()  # the dash keeps the number's column
    return format("-", f"{align or '>'}{width}")


def _date(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds)) if seconds is not None else "-"


def _ago(seconds: float) -> str:
    return _duration(max(0.0, seconds))


def _duration(seconds: float) -> str:
    """`42.0s`, `12m 05s`, `3h 02m`, `2d 04h`."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"
