"""NVIDIA's Multi-Process Service (MPS) for the embedded cluster: the kernels of several worker processes run on one
GPU side by side instead of in turns.

Without MPS the CUDA contexts of different processes time-slice a GPU. Eight Pendulum SAC members sharing one
H100 as processes made 2.3-2.5x one member's env steps/s; under MPS on an H200 they made 6.4x (docs/benchmarks.md,
"On one H200, 2026-11-28"). A process joins MPS when it makes its CUDA context, so the daemon must be running
before the worker processes start: `cluster.mps = true` starts it then, and stops it when the cluster closes,
unless it was already running (someone else's, left as it was).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

from dask_podracer.population.cluster import ClusterError

logger = logging.getLogger(__name__)

MPS_CONTROL = "nvidia-cuda-mps-control"
"""NVIDIA's MPS control program, installed with the driver."""


class MPSError(ClusterError):
    """`cluster.mps = true` on a machine whose GPUs cannot be shared through MPS."""


def _control(command: str | None, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Runs the control program: with `command` on its stdin (it answers and exits), or with `-d` (start the
    daemon) when `command` is None."""
    argv = [MPS_CONTROL] if command is not None else [MPS_CONTROL, "-d"]
    try:
        if command is not None:
            return subprocess.run(argv, input=command, capture_output=True, text=True, timeout=timeout, check=False)
        # The daemon it forks may keep the output it inherited open: a pipe would then wait for the daemon's end,
        # so its words go to a file, read once the program itself has exited.
        with tempfile.TemporaryFile(mode="w+") as said:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=said, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
            said.seek(0)
            return subprocess.CompletedProcess(argv, done.returncode, said.read(), "")
    except subprocess.TimeoutExpired:
        raise MPSError(f"cluster.mps = true, but `{' '.join(argv)}` did not answer within {timeout:g} s") from None


def daemon_running(wait_seconds: float = 0.0) -> bool:
    """Whether an MPS control daemon answers `get_server_list` (asking again for up to `wait_seconds`: a daemon
    just started may not have made its pipe yet). Without a daemon the program says "Cannot find MPS control
    daemon process"; its exit status alone is not relied on."""
    deadline = time.monotonic() + wait_seconds
    while True:
        answer = _control("get_server_list")
        if answer.returncode == 0 and "cannot find" not in (answer.stdout + answer.stderr).lower():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


@contextlib.contextmanager
def mps_daemon(wanted: bool, gpus: int) -> Iterator[str]:
    """Keeps an MPS control daemon running while the block runs, when `wanted` and this machine has GPUs.

    Yields what it did: "off" (not wanted), "no GPU", "running" (a daemon was already running: it is left running)
    or "started" (started here, and stopped on the way out). An `MPSError` of one line when it is wanted on a
    machine with GPUs but the control program is missing or the daemon does not start.
    """
    if not wanted:
        yield "off"
        return
    if gpus == 0:
        logger.info("cluster.mps = true: no GPU here, so no MPS daemon")
        yield "no GPU"
        return
    if shutil.which(MPS_CONTROL) is None:
        raise MPSError(f"cluster.mps = true, but {MPS_CONTROL} is not on PATH (it comes with NVIDIA's driver); "
                       "set cluster.mps = false to share GPUs by time-slicing")
    if daemon_running():
        logger.info("cluster.mps = true: an MPS daemon was already running; it is left running")
        yield "running"
        return
    started = _control(None)
    if started.returncode != 0 or not daemon_running(wait_seconds=5.0):
        said = (started.stderr or started.stdout).strip().splitlines()
        raise MPSError(f"cluster.mps = true, but `{MPS_CONTROL} -d` did not start a daemon"
                       + (f": {said[-1]}" if said else "") + "; set cluster.mps = false to share GPUs by time-slicing")
    logger.info("cluster.mps = true: MPS daemon started")
    try:
        yield "started"
    finally:
        stopped = _control("quit")
        if stopped.returncode != 0:
            logger.warning("cluster.mps: `echo quit | %s` failed: %s", MPS_CONTROL, stopped.stderr.strip())
