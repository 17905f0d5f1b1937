"""Keep torch's CPU tensors off a fresh mmap per allocation where glibc's malloc was tuned by environment.

Dask's nanny starts every worker process with `MALLOC_TRIM_THRESHOLD_=65536` (its config
`distributed.nanny.pre-spawn-environ`), so that pandas-style workloads hand memory back to the
system. Setting any glibc malloc threshold by environment also turns off glibc's *dynamic* mmap
threshold, which otherwise rises to fit a program's large allocations. It stays at 128 KiB, so
every tensor of 128 KiB or more (one 256x256 float32 activation is 256 KiB) becomes an mmap and
a munmap, with all its pages faulted in and zeroed again, at every layer of every update. On
machine A one SAC update (256x256 networks, batch 256, one thread) took 7.2 ms in a plain
process and 12.5 ms under that variable; `benchmarks/malloc_thresholds.py` measures it.

`restore_malloc_thresholds` sets both thresholds to the ceilings glibc's dynamic rule would reach
on a 64-bit machine (mmap 32 MiB, trim twice that), which brings the update back to 7.1 ms. A
segment calls it first thing, as it sets torch's thread count: both are settings of the
worker process the segment runs in. A process whose environment sets `MALLOC_MMAP_THRESHOLD_`
has chosen its own and is left alone, and so is one with no threshold set (glibc's dynamic rule
is already on).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit glibc
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc's dynamic rule pairs with it
TUNING_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
"""glibc variables that, set, turn off the dynamic mmap threshold (as MALLOC_MMAP_THRESHOLD_ does, which we respect)."""

_restored = False


def restore_malloc_thresholds(environ: Mapping[str, str] | None = None) -> bool:
    """Raise glibc's mmap and trim thresholds where the environment froze them; True if this call did.

    Idempotent; does nothing off Linux, off glibc, or where `MALLOC_MMAP_THRESHOLD_` is set.
    """
    global _restored
    env = os.environ if environ is None else environ
    if _restored or not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in env:
        return False
    if not any(name in env for name in TUNING_VARIABLES):
        return False
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:  # not glibc (musl has no mallopt)
        return False
    _restored = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _restored


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)  # the process's own symbols: libc's among them, without searching for its file
