"""A Dask preload module for the embedded LocalCluster's worker processes: Ctrl-C stops the client alone.

At a terminal, Ctrl-C sends SIGINT to the whole foreground process group, and the embedded cluster's worker
processes are in it. Each raised KeyboardInterrupt inside distributed's event loop and printed two tracebacks
under the run's summary, while the client was cancelling their segments and closing the cluster anyway. Workers
ignore SIGINT instead; the client's close stops them (SIGTERM, and a kill after its timeout), and a client killed
outright takes them with it as before (their nanny lives in its process). Workers of a cluster of your own
(`--scheduler`) are left as they are: their terminal is yours.
"""

from __future__ import annotations

import signal
import threading
from typing import Any


def dask_setup(worker: Any) -> None:
    """Called by Dask in each worker process as it starts; signals can be set on the main thread only."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
