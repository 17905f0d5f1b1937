"""Many MuJoCo simulations of one model, each an MjData of its own, stepped with gymnasium's calls on threads.

MuJoCo's Python bindings release the GIL inside `mj_step`, so threads that take the
simulations one by one run the physics on every core; only the few Python
statements around each call (a few µs against ~40-370 µs of physics per env step) take turns.
Each simulation gets exactly the calls a gymnasium MuJoCo env makes on its MjData (`ctrl`
written, `mj_step` `frame_skip` times, then `mj_rnePostConstraint`; on reset `mj_resetData`,
qpos/qvel written, `mj_forward`), so its numbers are gymnasium's, whatever the thread count.

Why not `mujoco.batch.Batch` (MuJoCo 4's threaded batch) or `mujoco.rollout`: neither can
call `mj_rnePostConstraint` after a step, and gymnasium's Ant and Humanoid observe the
`cfrc_ext` it computes from what RK4's last stage left in MjData. A force sensor makes
`mj_step` compute `cfrc_ext` itself, but from the first stage's contacts: different numbers
from the first contact on. A persistent `Batch` keeps each simulation's MjData, and copying it
out (`get_data`, ~5 µs) to call `mj_rnePostConstraint` there does give gymnasium's numbers, but
costs more than the Python it saves (Ant-v5, 16 envs, one thread, 2026-11-27: 190-194 CPU µs per
env step against 185-190 here; `Batch.step` alone, without `cfrc_ext`, 170-179). Where the time
goes (same measurement): MuJoCo's physics is ~90% of an Ant step, the Python around each
simulation a few %, and the batched numpy and torch of `envs/mujoco_batched.py` ~7%.

The profiler clock that MuJoCo 4's bindings install cost 7-10% of an Ant step's CPU time, and no
number depends on it: the simulations step without it (`ProfilerClockOff`).
"""

from __future__ import annotations

import ctypes
import glob
import itertools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

import numpy as np


def _mjcb_time() -> ctypes.c_void_p | None:
    """MuJoCo's C global `mjcb_time` in the library the bindings loaded, or None where ctypes cannot reach it."""
    import mujoco

    folder = os.path.dirname(mujoco.__file__)
    for pattern in ("libmujoco.so*", "libmujoco*.dylib", "mujoco.dll"):
        for path in sorted(glob.glob(os.path.join(folder, pattern))):
            try:  # dlopen of a loaded library's path gives that same library
                return ctypes.c_void_p.in_dll(ctypes.CDLL(path), "mjcb_time")
            except (OSError, ValueError):
                continue
    return None


class ProfilerClockOff:
    """While entered, MuJoCo's profiler goes without the clock that MuJoCo's Python bindings give it.

    MuJoCo times each stage of `mj_step` into `MjData.timer` when its C global `mjcb_time` holds a
    clock. MuJoCo 4's bindings install a clock of their own at import, and `mujoco.set_mjcb_time(None)`
    puts that clock back rather than clearing it; its calls cost 7-10% of an Ant-v5 env step's CPU time
    (docs/benchmarks.md, 2026-11-27). Only `MjData.timer` depends on it, no number of the physics, so
    the simulations here step with `mjcb_time` NULL, as a C program's do by default.

    Process-wide while anyone is inside (a count under a lock, so envs stepped from several threads
    nest); the bindings' clock is back when the last one leaves, unless a clock was set meanwhile. A
    clock set with `mujoco.set_mjcb_time` (someone profiling) is left alone. MuJoCo code on other
    threads of the process at that moment (a gymnasium env) goes untimed meanwhile, or times one stage
    wrongly; its physics is unchanged. Does nothing where ctypes cannot reach the global.
    """

    _lock = threading.Lock()
    _inside = 0
    _saved: int | None = None  # the bindings' clock while it is off
    _slot: ctypes.c_void_p | None = None
    _looked = False

    def __enter__(self) -> None:
        cls = ProfilerClockOff
        with cls._lock:
            if not cls._looked:
                cls._slot, cls._looked = _mjcb_time(), True
            if cls._inside == 0 and cls._slot is not None and cls._slot.value:
                import mujoco

                if mujoco.get_mjcb_time() is None:  # the bindings' own clock, not a caller's
                    cls._saved, cls._slot.value = cls._slot.value, None
            cls._inside += 1

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        cls = ProfilerClockOff
        with cls._lock:
            cls._inside -= 1
            if cls._inside == 0 and cls._saved is not None:
                if cls._slot is not None and not cls._slot.value:  # nobody set a clock meanwhile
                    cls._slot.value = cls._saved
                cls._saved = None


class ThreadedSimulations:
    """`num_sims` MjData of `model`, advanced `frame_skip` substeps a step on `threads` threads.

    `fields[name]` is a `[num_sims, *shape]` float64 copy of each MjData field named in
    `field_names` (qpos, qvel and ctrl always), taken after every step and reset; it is
    rewritten in place, so copy what must outlive the next call.
    """

    def __init__(self, model: Any, num_sims: int, frame_skip: int, threads: int,
                 field_names: tuple[str, ...] = (), post_constraint: bool = False) -> None:
        import mujoco  # the `mujoco` extra; imported where used so the registry loads without it

        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._mujoco = mujoco
        self.model = model
        self.num_sims = int(num_sims)
        self.frame_skip = int(frame_skip)
        self.post_constraint = post_constraint
        self.datas = [mujoco.MjData(model) for _ in range(self.num_sims)]
        names = ("qpos", "qvel", "ctrl", *(n for n in field_names if n not in ("qpos", "qvel", "ctrl")))
        self.fields: dict[str, np.ndarray] = {
            name: np.zeros((self.num_sims, *getattr(self.datas[0], name).shape)) for name in names}
        # Each MjData's arrays are views of its own buffer that live as long as it: look them up once.
        self._views = [[getattr(d, name) for name in names] for d in self.datas]
        self._outputs = [self.fields[name] for name in names]
        self.threads = max(1, min(int(threads), self.num_sims))
        self._pool = ThreadPoolExecutor(self.threads - 1, "mujoco-step") if self.threads > 1 else None
        self._clock_off = ProfilerClockOff()

    def step(self, ctrl: np.ndarray) -> None:
        """Write `ctrl` `[num_sims, nu]` into every simulation and advance each by `frame_skip` substeps."""
        # The threads (the caller's among them) take simulations one at a time from a shared counter rather than
        # fixed shares: a thread that the OS pauses (on a machine shared with other work) holds up one
        # simulation, not a share of them. Which thread steps which simulation does not change its numbers.
        queue = itertools.count()
        with self._clock_off:
            pending = [self._pool.submit(self._advance, queue, ctrl)
                       for _ in range(self.threads - 1)] if self._pool else []
            try:
                self._advance(queue, ctrl)
            finally:
                for future in pending:
                    future.result()  # re-raises a thread's error here

    def _advance(self, queue: Iterator[int], ctrl: np.ndarray) -> None:
        mj, model, n, last = self._mujoco, self.model, self.frame_skip, self.num_sims
        for i in queue:  # next() on itertools.count is atomic under the GIL
            if i >= last:
                return
            data = self.datas[i]
            data.ctrl[:] = ctrl[i]
            mj.mj_step(model, data, nstep=n)  # releases the GIL
            if self.post_constraint:
                mj.mj_rnePostConstraint(model, data)
            for out, view in zip(self._outputs, self._views[i]):
                out[i] = view

    def reset(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Restart simulations `ids` `[k]` at `qpos` `[k, nq]`, `qvel` `[k, nv]`, as gymnasium's reset does."""
        mj, model = self._mujoco, self.model
        with self._clock_off:
            for i, q, v in zip(ids, qpos, qvel):
                data = self.datas[i]
                mj.mj_resetData(model, data)
                data.qpos[:] = q
                data.qvel[:] = v
                mj.mj_forward(model, data)  # leaves cfrc_ext at the zeros mj_resetData wrote, as in gymnasium
                for out, view in zip(self._outputs, self._views[i]):
                    out[i] = view

    def close(self) -> None:
        """Stop the threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
