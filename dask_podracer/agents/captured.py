"""Captured learner updates: one update (forward, losses, backward, optimiser steps, target update) recorded once
and replayed, on CUDA as one CUDA graph, on the CPU compiled by `torch.compile` (inductor).

An agent whose `compile` setting resolves on (`use_capture`: "on", or "auto" on CUDA) writes its update as a
function of a *workspace* (its networks, parameters and optimisers), a namespace of hyper-parameter tensors
(`hp`) and a batch. `bind` turns each such function (DDPG's and the DQN family's have two: with and without the
delayed actor or target step) into a `CapturedUpdate` on one shared workspace:

- The batch is copied in place into static input buffers; the graph reads those, so it is captured once.
- Learning rates live in 0-d tensors the optimisers read (`captured_adam`), and the other perturbed numbers the
  update reads (gamma, tau, ...) in the `hp` tensors: a child's perturbed values are written into them in place,
  and the same graph runs with them (no new capture, no recompile).
- The workspace is cached per worker process (`_CACHE`), keyed by what changes the graphs (algorithm, shapes,
  ensemble size and combine modes, device, ...). The next agent of the same key, e.g. the worker's next segment,
  adopts it: its freshly built values are copied into the cached networks and optimisers in place (a CUDA graph
  reads fixed addresses), then the agent's attributes point at them. A workspace whose agent is still alive is
  never shared: a second live agent of the same key gets one of its own.

Checkpoints stay the eager ones: `optimizer_state` writes learning rates as floats and the eager optimiser's
flags, and `load_optimizer_state` copies a saved state into the live one in place, so an eager agent loads a
captured agent's checkpoint and vice versa. Eager (`compile = "off"`) stays the reference: the captured update
runs the same function on the same tensors.
"""

from __future__ import annotations

import gc
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from dask_podracer.agents.base import adam

COMPILE_MODES = ("auto", "on", "off")

Step = Callable[[Any, Any, dict[str, Tensor]], dict[str, Tensor]]
"""`step(workspace, hp, batch) -> losses`: one update, mutating the workspace's networks and optimisers."""


def use_capture(mode: str, device: torch.device) -> bool:
    """Whether a `compile` setting captures on `device`: "on" always, "auto" on CUDA, "off" never."""
    return mode == "on" or (mode == "auto" and device.type == "cuda")


# -- optimisers the graph can replay ----------------------------------------------------------------

def captured_adam(params, lr: float, device: torch.device, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam whose learning rate is a 0-d tensor on `device` (written in place, read by the graph): on CUDA
    capturable (state and step count on the device) and multi-tensor, on a CPU the single-tensor loop (the only
    one taking a tensor rate there), which inductor fuses. Its state exists from the start (`_init_state`)."""
    cuda = device.type == "cuda"
    optim = torch.optim.Adam(params, lr=torch.tensor(float(lr), device=device), eps=eps, foreach=cuda,
                             capturable=cuda)
    _init_state(optim)
    return optim


@torch.no_grad()
def _init_state(optim: torch.optim.Optimizer) -> None:
    """Create the optimiser's state tensors now (one step on zero gradients, which moves no parameter, then
    zeroed), so a graph captured later reads them where they stay."""
    for group in optim.param_groups:
        for p in group["params"]:
            p.grad = torch.zeros_like(p)
    optim.step()
    optim.zero_grad(set_to_none=True)
    reset_optimizer_state(optim)


@torch.no_grad()
def reset_optimizer_state(optim: torch.optim.Optimizer) -> None:
    """A fresh optimiser's state (step 0, zero moments), written in place."""
    for state in optim.state.values():
        for value in state.values():
            if torch.is_tensor(value):
                value.zero_()


def set_lr(optim: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's learning rate: in place when it is a tensor (a captured graph reads it)."""
    for group in optim.param_groups:
        if torch.is_tensor(group["lr"]):
            group["lr"].fill_(float(lr))
        else:
            group["lr"] = lr


def optimizer_state(optim: torch.optim.Optimizer) -> dict[str, Any]:
    """`optim.state_dict()` as the eager agent's (`base.adam`) would be: float learning rates, fused, not
    capturable; the state tensors are copies."""
    state = optim.state_dict()
    groups = [{**g, "lr": float(g["lr"]), "foreach": None, "fused": True, "capturable": False}
              for g in state["param_groups"]]
    tensors = {i: {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in s.items()}
               for i, s in state["state"].items()}
    return {"state": tensors, "param_groups": groups}


@torch.no_grad()
def load_optimizer_state(optim: torch.optim.Optimizer, saved: Mapping[str, Any]) -> None:
    """Copy a saved optimiser state (`state_dict()` of an eager or a captured optimiser) into `optim`'s state in
    place, keeping its own learning rate and flags; a parameter the save has no state for starts afresh."""
    params = [p for g in optim.param_groups for p in g["params"]]
    saved_state = saved["state"]
    for index, p in enumerate(params):
        mine = optim.state[p]
        theirs = saved_state.get(index, saved_state.get(str(index)))
        for key, value in mine.items():
            if not torch.is_tensor(value):
                continue
            if theirs is None:
                value.zero_()
            else:
                value.copy_(torch.as_tensor(theirs[key]).to(value.device, value.dtype).reshape(value.shape))


def hyper(device: torch.device, **values: float) -> types.SimpleNamespace:
    """The hyper-parameters a captured update reads, as 0-d float tensors on `device`."""
    return types.SimpleNamespace(**{k: torch.tensor(float(v), device=device) for k, v in values.items()})


# -- the captured callable ---------------------------------------------------------------------------

class CapturedUpdate:
    """`step(workspace, hp, batch)` compiled (CPU) or graph-captured (CUDA) once, on static input buffers.

    `__call__(batch)` copies the batch into the buffers and runs it; the losses it returns are the graph's own
    output tensors on CUDA (read them before the next call). `runs` counts calls, `captures` captures.
    """

    def __init__(self, step: Step, workspace: Any, hp: types.SimpleNamespace, example: Mapping[str, Tensor]) -> None:
        self.step, self.workspace, self.hp = step, workspace, hp
        self.inputs = {k: torch.zeros_like(v) for k, v in example.items()}
        self.device = next(iter(example.values())).device
        self.runs = self.captures = 0
        self._graph: torch.cuda.CUDAGraph | None = None
        self._outputs: dict[str, Tensor] = {}
        self._compiled = None if self.device.type == "cuda" else torch.compile(step, dynamic=False)

    def __call__(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        for key, buffer in self.inputs.items():
            buffer.copy_(batch[key])
        self.runs += 1
        if self._compiled is not None:
            return self._compiled(self.workspace, self.hp, self.inputs)
        if self._graph is None:
            self._capture()
        self._graph.replay()
        return dict(self._outputs)

    def _capture(self) -> None:
        """Warm up on a side stream (the docs' recipe), put the workspace back as it was, capture."""
        saved = _snapshot(self.workspace)
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(3):
                self.step(self.workspace, self.hp, self.inputs)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        _restore(self.workspace, saved)
        self._graph = torch.cuda.CUDAGraph()
        # thread_local: in pipeline mode the worker thread keeps stepping its envs on the device meanwhile
        with torch.cuda.graph(self._graph, capture_error_mode="thread_local"):
            self._outputs = self.step(self.workspace, self.hp, self.inputs)
        self.captures += 1


def _tensors(workspace: Any) -> list[Tensor]:
    """Every tensor an update may change: parameters, buffers, optimiser states, plain tensors."""
    out: list[Tensor] = []
    for value in vars(workspace).values():
        if isinstance(value, nn.Module):
            out += [*value.parameters(), *value.buffers()]
        elif isinstance(value, torch.optim.Optimizer):
            out += [v for s in value.state.values() for v in s.values() if torch.is_tensor(v)]
        elif torch.is_tensor(value):
            out.append(value)
    return out


def _snapshot(workspace: Any) -> list[Tensor]:
    return [t.detach().clone() for t in _tensors(workspace)]


@torch.no_grad()
def _restore(workspace: Any, saved: list[Tensor]) -> None:
    for t, s in zip(_tensors(workspace), saved):
        t.copy_(s)


# -- the per-process cache ---------------------------------------------------------------------------

class _Entry:
    """One workspace of a key: its captured updates and the agent using it now (weakly held)."""

    def __init__(self, updates: dict[Any, CapturedUpdate], owner: Any) -> None:
        self.updates = updates
        self.owner = weakref.ref(owner)


_CACHE: dict[tuple, list[_Entry]] = {}


def cache_info() -> dict[tuple, int]:
    """Workspaces held per key (tests, benchmarks)."""
    return {key: len(entries) for key, entries in _CACHE.items()}


def clear_cache() -> None:
    _CACHE.clear()


def bind(agent: Any, key: tuple, names: tuple[str, ...], hp_values: Mapping[str, float],
         lrs: Mapping[str, float], steps: Mapping[Any, Step], example: Mapping[str, Tensor],
         examples: Mapping[Any, Mapping[str, Tensor]] | None = None) -> dict[Any, CapturedUpdate]:
    """The captured updates of `agent` for `key` (one per entry of `steps`, all on one workspace), reused from this
    process's cache when a workspace of that key is free (its agent is gone), else built from the agent's own
    objects.

    `names` are the agent's attributes the updates read and write (networks, parameter tensors, optimisers built
    by `captured_adam`); `hp_values` the hyper-parameters they read from `hp`; `lrs` each optimiser's learning
    rate; `example` a batch of the right shapes (`examples` another for some steps, e.g. acting on `[num_envs,
    obs_dim]` observations). On reuse the agent's values are copied into the workspace in place
    and its attributes then point at the workspace's objects.
    """
    entries = _CACHE.setdefault(key, [])
    entry = next((e for e in entries if e.owner() is None), None)
    if entry is None and entries:
        gc.collect()  # an agent only held by a reference cycle frees its workspace here
        entry = next((e for e in entries if e.owner() is None), None)
    if entry is None:
        workspace = types.SimpleNamespace(**{name: getattr(agent, name) for name in names})
        hp = hyper(agent.device, **hp_values)
        examples = examples or {}
        entry = _Entry({name: CapturedUpdate(step, workspace, hp, examples.get(name, example))
                        for name, step in steps.items()}, agent)
        entries.append(entry)
    else:
        first = next(iter(entry.updates.values()))
        _adopt(agent, first.workspace, names)
        entry.owner = weakref.ref(agent)
        with torch.no_grad():
            for name, value in hp_values.items():
                getattr(first.hp, name).fill_(float(value))
    for name, lr in lrs.items():
        set_lr(getattr(agent, name), lr)
    return entry.updates


@torch.no_grad()
def _adopt(agent: Any, workspace: Any, names: tuple[str, ...]) -> None:
    """Copy the agent's values into the workspace's objects in place, then point the agent's attributes at them."""
    for name in names:
        mine, theirs = getattr(agent, name), getattr(workspace, name)
        if isinstance(mine, nn.Module):
            theirs.load_state_dict(mine.state_dict())
        elif isinstance(mine, torch.optim.Optimizer):
            load_optimizer_state(theirs, optimizer_state(mine))
        else:
            theirs.copy_(mine)
        setattr(agent, name, theirs)


# -- what an agent calls in both modes -------------------------------------------------------------

def optimizer_maker(mode: str, device: torch.device) -> Callable[..., torch.optim.Adam]:
    """`make(params, lr)`: `captured_adam` on `device` when `mode` captures there, else the eager `base.adam`."""
    if use_capture(mode, device):
        return lambda params, lr, eps=1e-8: captured_adam(params, lr, device, eps)
    return adam


def saved_optimizer(optim: torch.optim.Optimizer) -> dict[str, Any]:
    """What a checkpoint keeps of an optimiser: `state_dict()`, or `optimizer_state` of a captured one."""
    return optimizer_state(optim) if _captured_lr(optim) else optim.state_dict()


def load_optimizer(optim: torch.optim.Optimizer, saved: Mapping[str, Any], lr: float) -> None:
    """Restore a checkpoint's optimiser state, then apply this agent's `lr` (a child's perturbed rate wins): eager,
    `load_state_dict`; captured, in place (`load_optimizer_state`)."""
    if _captured_lr(optim):
        load_optimizer_state(optim, saved)
    else:
        optim.load_state_dict(saved)
    set_lr(optim, lr)


def _captured_lr(optim: torch.optim.Optimizer) -> bool:
    return torch.is_tensor(optim.param_groups[0]["lr"])
