"""Where an env's Warp work runs: eagerly on the CPU; on CUDA in torch's stream order, and as CUDA graphs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class WarpLaunches:
    """Runs functions of Warp launches for an env on `device`.

    On CUDA they go on torch's current stream, so Warp kernels run after the torch ops that wrote
    their inputs and before those that read their outputs, with no host sync. On the CPU they run
    eagerly (Warp captures CUDA only).
    """

    def __init__(self, device: torch.device) -> None:
        import warp as wp

        self.wp = wp
        self.device = device
        self.wp_device = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"

    def scope(self) -> Any:
        """A context in which Warp launches go where this env's torch work goes."""
        if self.device.type == "cpu":
            return self.wp.ScopedDevice("cpu")
        return self.wp.ScopedStream(self.torch_stream(), sync_enter=False)

    def run(self, launches: Callable[[], None]) -> None:
        """Call `launches` once, eagerly."""
        with self.scope():
            launches()

    def torch_stream(self) -> Any:
        """torch's current CUDA stream, as a Warp stream."""
        return self.wp.stream_from_torch(torch.cuda.current_stream(self.device))


class CapturedCall:
    """`launches` as a call that, on CUDA, runs eagerly the first time and replays one captured CUDA graph after.

    Launched eagerly, each MuJoCo step is hundreds of kernel launches from Python, and its solver
    loop reads its convergence flag back to the host every iteration: an H100 took ~0.26 s per Ant
    env step whatever the number of worlds. Captured, the solver loop is a conditional graph node
    and the whole call one launch. The first call runs eagerly so that every kernel is compiled and
    loaded before the capture. `launches` must read and write the same Warp arrays on every call
    (the graph keeps their addresses) and do nothing but launch. On the CPU every call is eager.
    """

    def __init__(self, launches: Callable[[], None], where: WarpLaunches) -> None:
        self.launches = launches
        self.where = where
        self.graph: Any = None
        self.calls = 0

    def __call__(self) -> None:
        where, wp = self.where, self.where.wp
        if where.device.type == "cpu":
            where.run(self.launches)
            return
        if self.graph is None and self.calls > 0:
            # Captured on Warp's own stream: torch's default stream is the legacy one, which
            # cannot be captured. Capturing runs nothing; the launch below does.
            with wp.ScopedCapture(device=where.wp_device) as capture:
                self.launches()
            self.graph = capture.graph
        self.calls += 1
        if self.graph is None:
            where.run(self.launches)
        else:
            wp.capture_launch(self.graph, stream=where.torch_stream())
