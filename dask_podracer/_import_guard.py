"""A clear error for a process whose import of torch or numpy was interrupted.

A notebook's stop button (or Ctrl-C) during the first `import dask_podracer...` can interrupt torch's import
half way: Python drops the half-run `torch` module but keeps the parts it had loaded (`torch._C` and hundreds
more), and every later import of torch in that process fails with an error that names neither the cause nor
the remedy ("partially initialized module 'torch' has no attribute 'cuda'"; numpy's "cannot load module more than
once per process"). Their compiled parts cannot be loaded twice: only a new process (a restarted kernel) mends it.
The finder below, first on `sys.meta_path`, is asked only for modules not yet imported, and says so then.
"""

from __future__ import annotations

import importlib.abc
import sys

GUARDED = ("torch", "numpy")
"""Packages with compiled parts that a process can load once only. Any part of one left loaded is taken for an
interrupted import: a torch interrupted after 11 of its pure-Python parts had loaded (none compiled) failed
again too ("SystemError: ... bad call flags"), as torch loads its libraries (ctypes) before its `_C`."""


class InterruptedImportGuard(importlib.abc.MetaPathFinder):
    """Refuse, in one line naming the remedy, to import a guarded package whose earlier import was interrupted."""

    def find_spec(self, name, path=None, target=None):  # noqa: ARG002 (the finder protocol's signature)
        if name in GUARDED and any(module.startswith(f"{name}.") for module in list(sys.modules)):
            raise ImportError(f"an earlier import of {name} in this process was interrupted (a notebook's stop "
                              f"button, Ctrl-C) and left parts of it loaded, which cannot be loaded again: "
                              f"restart the Python process (the notebook's kernel)")
        return None  # the other finders find it as usual


def install() -> None:
    """Put the guard first on `sys.meta_path`, once per process."""
    if not any(isinstance(finder, InterruptedImportGuard) for finder in sys.meta_path):
        sys.meta_path.insert(0, InterruptedImportGuard())
