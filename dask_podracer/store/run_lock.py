"""One run at a time on a local store: an exclusive `flock` on a file in the store's directory.

The run state's lease (population/run_lease.py) is written by a run once it starts, so two clients that both read
the store before either wrote its state both ran on it, each rewriting the tables from what it had read. A lock
taken before either reads closes that moment. The kernel releases it when the process holding it ends, however it
ends (a SIGKILL, a lost machine's reboot), so a crashed run never leaves its store locked. Remote stores (S3, GCS)
have no such lock: the lease alone holds them between processes. Where the file system refuses `flock` (some network
file systems), the run goes on under the lease alone too. Within one process (two threads, two notebook cells run at
once) every store, remote ones included, is held in `_HELD` as well: the lease cannot tell two runs of one process
apart (same host and pid).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from .format import StoreError

try:
    import fcntl
except ImportError:  # Windows: the lease alone
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = "run.lock"
"""The lock file in a local store's directory; it holds the host and process id of the run that last held it."""

_HELD: dict[str, str] = {}
"""The stores a holder of this process holds now (resolved URL -> the holder), for remote stores' sake."""
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def hold_run(path: Path | None, url: str, holder: str = "a run") -> Iterator[None]:
    """Hold the store at `path` (None: a remote store, nothing to hold) while the block runs, for `holder` (a run,
    `podracer gc`); a StoreError naming the holder if another process (or another thread of this one) holds it."""
    with _held_here(url, holder):
        if path is None or fcntl is None:
            yield
            return
        with _flocked(path, url, holder):
            yield


@contextlib.contextmanager
def _held_here(url: str, holder: str) -> Iterator[None]:
    with _HELD_LOCK:
        if url in _HELD:
            raise StoreError(f"store '{url}' is in use: {_HELD[url]} of this process holds it; wait for it to end, "
                             f"or give another store (--store)")
        _HELD[url] = holder
    try:
        yield
    finally:
        with _HELD_LOCK:
            del _HELD[url]


@contextlib.contextmanager
def _flocked(path: Path, url: str, holder: str) -> Iterator[None]:
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:  # a read-only store: named here, not taken for a lost scheduler by the CLI
        raise StoreError(f"store '{url}': cannot open its {LOCK_NAME} ({e.strerror or type(e).__name__})") from None
    try:
        if _locked(fd, url):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{holder} of process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _locked(fd: int, url: str) -> bool:
    """Whether this process holds `fd`'s lock now: False on a file system without locks (ENOLCK, EOPNOTSUPP: the
    run goes on under the lease alone), a StoreError naming the holder when another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        other = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        raise StoreError(f"store '{url}' is in use: {other} holds its {LOCK_NAME}; wait for it to end, or give "
                         f"another store (--store)") from None
    return True
