"""One run per store: the client of a run going on a store is recorded in its run state, and a second
`podracer train` on that store is refused while that client lives.

Two clients on one store would both rewrite its tables from what they read, and each one's retention pass could
delete the other's in-flight parents. A client that was killed is taken over at once on the machine it ran on
(its process is gone), and from another machine once its run state is HEARTBEATS heartbeats old
(`podracer status` calls it silent then). Two runs of one process (two threads, or two notebook cells run at
once, on one cluster) share the process's id: the store's hold (`PodracerStore.hold_run`) tells them apart.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from dask_podracer.config import ConfigError
from dask_podracer.status import DEFAULT_HEARTBEAT, HEARTBEATS, run_phase


def this_client() -> dict[str, Any]:
    """Who is writing a run state: this machine's name and this process's id."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def check_no_run_going(url: str, state: Mapping[str, Any], now: float | None = None,
                       remedy: str = "stop it first, or give another store (--store)") -> None:
    """Raise ConfigError (one line, ending with `remedy`) if the run state `state` of store `url` belongs to a run
    going now whose client is not this process and is not known to be dead."""
    now = time.time() if now is None else now
    if run_phase(state, now) != "running":  # not running: also a client killed on this machine (its process is gone)
        return
    client = state.get("client")
    if not isinstance(client, Mapping):  # written before clients were recorded: nothing to tell them apart by
        return
    host, pid = client.get("host"), client.get("pid")
    here = host == socket.gethostname()
    if here and pid == os.getpid():
        return  # this process's own earlier run
    heartbeat = float(state.get("heartbeat_seconds") or DEFAULT_HEARTBEAT)
    ago = now - float(state["written_at"])
    where = f"process {pid}" + ("" if here else f" on {host}")
    raise ConfigError(f"store '{url}' has a run going ({where}, state written {ago:.0f}s ago): {remedy}; a client "
                      f"killed on another machine is taken over once its state is {HEARTBEATS * heartbeat:.0f}s old")
