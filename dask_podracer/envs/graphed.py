"""A torch env's step replayed as one CUDA graph: dynamics, auto-reset and episode statistics in one launch.

A small torch env on CUDA is bound by launches, not arithmetic: a Pendulum step is ~60 small kernels, ~0.7 ms
whatever the batch (docs/benchmarks.md). `GraphedStepEnv` records one step of a `TorchVecEnv` once and replays
it. What makes that possible, and what it costs:

- **The state at fixed addresses.** A `TorchVecEnv` rebinds its state tensors every step (`self.theta = ...`),
  but a graph reads and writes the addresses it saw at capture. So the wrapper *pins* the env's tensor
  attributes: each gets one tensor of its own, and the captured step ends by copying every rebound attribute
  back into its pinned tensor (`pinned_step`). Whatever rebinds them outside the graph (`reset`, `set_state`)
  is copied in before the next replay.
- **The env's own random stream.** Its generator is registered with the graph, so each replay draws where an
  eager step would (the CUDA step draws fresh states for every row and keeps them by mask, a fixed amount per
  step): a graphed env and an eager twin of the same seed agree step for step (tests/test_graphed_env.py).
- **Outputs are copies.** A replay overwrites the graph's output tensors, so `step` returns clones: the caller
  may keep an observation past the next step, as every training loop does.

Only envs that declare `graph_capturable = True` are graphed: their CUDA step is sync-free tensor code (no
`.item()`, no data-dependent shapes). MuJoCo Warp envs capture their own stepping (envs/warp/launch.py).
`graph_steps(env)` wraps where it applies and returns the env unchanged elsewhere (a CPU, another env).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dask_podracer.envs.base import StepResult, TorchVecEnv, VecEnv
from dask_podracer.envs.wrappers import VecEnvWrapper


def can_graph(env: VecEnv) -> bool:
    """Whether `env` is a torch env on CUDA whose step may be captured as one CUDA graph."""
    return isinstance(env, TorchVecEnv) and env.graph_capturable and env.device.type == "cuda"


def graph_steps(env: VecEnv) -> VecEnv:
    """`env` whose steps replay as a CUDA graph (`GraphedStepEnv`) where `can_graph` says so, else `env`."""
    return GraphedStepEnv(env) if can_graph(env) else env


class GraphedStepEnv(VecEnvWrapper):
    """`env.step` captured once (at the first step, or when the actions' shape or dtype changes) and replayed.

    `captures` and `replays` count what it did. `pinned_step` is the function the graph records; it also runs
    eagerly (on any device), which is how the CPU tests check the pinning.
    """

    def __init__(self, env: TorchVecEnv) -> None:
        if not isinstance(env, TorchVecEnv):
            raise TypeError(f"GraphedStepEnv wraps a TorchVecEnv, got {type(env).__name__}")
        super().__init__(env)
        self.captures = 0
        self.replays = 0
        self._pinned: dict[str, Tensor] = {}
        self._graph: torch.cuda.CUDAGraph | None = None
        self._actions: Tensor | None = None
        self._outputs: StepResult | None = None

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        out = self.env.reset(seed=seed)
        self.pin_state()
        return out

    def step(self, actions: Tensor) -> StepResult:
        if self.env._needs_reset:
            return self.env.step(actions)  # which refuses, as the env says
        actions = torch.as_tensor(actions, device=self.device)
        # Pin first: a tensor attribute the graph has not seen (new, or rebound with another shape or dtype since the
        # last step) is pinned afresh and drops the graph, which must then be captured again before it can replay.
        self.pin_state()
        if self._graph is None or actions.shape != self._actions.shape or actions.dtype != self._actions.dtype:
            self._capture(actions)
        self._actions.copy_(actions)
        self._graph.replay()
        self.replays += 1
        obs, reward, terminated, truncated, info = self._outputs
        return obs.clone(), reward.clone(), terminated.clone(), truncated.clone(), \
            {k: v.clone() for k, v in info.items()}

    # -- the state at fixed addresses -----------------------------------------------------------------

    def pin_state(self) -> None:
        """Give each of the env's tensor attributes a tensor of its own at a fixed address, and copy in any value
        rebound since (a reset, `set_state`). A tensor of another shape or dtype is pinned afresh, which the
        graph has not seen: it is captured again."""
        for name, value in vars(self.env).items():
            if not torch.is_tensor(value):
                continue
            pinned = self._pinned.get(name)
            if pinned is value:
                continue
            if pinned is None or pinned.shape != value.shape or pinned.dtype != value.dtype:
                # a copy: the value may be a tensor the env handed out (an info entry), which must not change
                self._pinned[name] = pinned = value.detach().clone()
                self._graph = None
            else:
                pinned.copy_(value)
            setattr(self.env, name, pinned)

    def pinned_step(self, actions: Tensor) -> StepResult:
        """One step of the env that leaves its state in the pinned tensors (what the graph records)."""
        result = self.env.step(actions)
        for name, pinned in self._pinned.items():
            value = getattr(self.env, name)
            if value is not pinned:
                pinned.copy_(value)
                setattr(self.env, name, pinned)
        return result

    @torch.no_grad()
    def _capture(self, actions: Tensor) -> None:
        """Warm up on a side stream (the CUDA graphs recipe), put the state and the random stream back, record."""
        self.pin_state()
        self._actions = actions.clone()
        saved = {name: t.clone() for name, t in self._pinned.items()}
        rng = self.env.generator.get_state()
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(2):
                self.pinned_step(self._actions)
        current.wait_stream(side)
        for name, pinned in self._pinned.items():
            pinned.copy_(saved[name])
        self.env.generator.set_state(rng)
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self.env.generator)
        # thread_local: other threads of the worker (a pipelined learner, a member sharing the GPU) go on launching
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._outputs = self.pinned_step(self._actions)
        self._graph = graph
        self.captures += 1
