"""Data-parallel learners: one agent trained by K processes that average their gradients every step (`[learners]`).

Every learner (rank 0 to K-1) holds a full copy of the agent, steps its own envs (seeded `segment seed + 1000 *
rank`) and computes its own gradients; before every optimiser step the ranks sum their gradients with
`torch.distributed.all_reduce` and divide by K, so every copy takes the same step and the copies stay identical.
Rank 0 is the segment's own task (`run_segment`): it alone evaluates, writes the checkpoint and returns the result.

1. Rendezvous. Rank 0 listens on its worker's host (127.0.0.1 on the embedded cluster) on a port the OS picks, and
   serves a `torch.distributed.TCPStore` on that socket; only then does the `LearnerLauncher` start ranks 1..K-1
   with `(host, port)`. Every rank calls `init_process_group` on that store: gloo on the CPU (bound to the network
   interface carrying the host's address), NCCL when the segment's device is CUDA.
2. Same start. Rank 0 broadcasts its whole `state_dict` (networks, optimiser state, counters; its parent's when
   it has one): the other ranks load it, so they never read the store.
3. Lockstep. A step pre-hook on each of the agent's optimisers all-reduces the gradients of its parameters
   (flattened into one tensor). An algorithm may join only if every rank makes the same optimiser steps in the
   same order for the same budget (`AlgorithmInfo.data_parallel`); whatever else an agent must agree on it reduces
   through the group, which it is given as its `Peers` (`agent.join_peers(group)`, where it has one: PPO's
   `target_kl` stop and running normalisers). After each iteration the ranks agree on the env steps taken by all
   of them and on whether any ran out of time, so all stop after the same iteration.
4. End. The ranks measure how far their whole states spread (every number of `agent.state_dict()`: parameters,
   optimiser state, normaliser statistics, counters; max over elements of max - min over ranks; 0 when identical)
   and rank 0 fails the segment if they differ at all. `close` destroys the process group, also when a rank
   failed: a rank that dies or raises breaks its peers' next collective, which fails the segment.

A captured (CUDA-graph) update cannot all-reduce inside its graph: a data-parallel agent takes the eager update
(the segment builds it with `compile = "off"`). The sockets of the store and of gloo are neither authenticated nor
encrypted (torch.distributed's own): keep the workers on a network you trust.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor

from dask_podracer.train.spec import SegmentError, SegmentSpec


class LearnerLauncher(Protocol):
    """Starts ranks 1..K-1 of one segment's learners, wherever they run (Dask tasks: population/learner_tasks.py)."""

    host: str
    """The host rank 0 listens on: an address the other ranks can reach (127.0.0.1 on one machine)."""

    def start(self, address: tuple[str, int]) -> None:
        """Start the other ranks; rank r calls `run_learner(spec, r, address)`."""
        ...


def rank_seed(spec: SegmentSpec, rank: int) -> int:
    """Rank `rank`'s seed for its envs and sampling (rank 0: the segment's own)."""
    return spec.seed + 1_000 * rank


class LearnerGroup:
    """This process's membership of one segment's K learners: rendezvous, gradient averaging, agreement, end."""

    def __init__(self, spec: SegmentSpec, rank: int, store: dist.Store, device: torch.device, host: str) -> None:
        if spec.learners is None:
            raise ValueError("a learner group needs a spec with learners")
        if dist.is_initialized():
            raise SegmentError(f"segment {spec.key}: torch.distributed is already in use in this worker process (two "
                               f"segments sharing it as threads?): each learner needs a worker process of its own")
        self.key, self.rank, self.size = spec.key, rank, spec.learners.workers
        if device.type == "cuda" and device.index is None:  # NCCL binds one GPU: name it
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        self.hooks: list[Any] = []
        timeout = datetime.timedelta(seconds=spec.learners.connect_timeout)
        try:
            with _gloo_interface(host):
                dist.init_process_group(self.backend, store=store, rank=rank, world_size=self.size, timeout=timeout,
                                        device_id=device if self.backend == "nccl" else None)
        except RuntimeError as e:  # torch.distributed's errors (a store's timeout included) are RuntimeErrors
            raise SegmentError(f"segment {spec.key}: learner {rank} of {self.size} could not join the others within "
                               f"{spec.learners.connect_timeout:.0f}s: {str(e).splitlines()[0]}") from e

    @classmethod
    def open(cls, spec: SegmentSpec, launcher: LearnerLauncher, device: torch.device) -> LearnerGroup:
        """Rank 0: serve the rendezvous on the launcher's host, start the other ranks, join them."""
        listener = socket.create_server((launcher.host, 0))
        port = listener.getsockname()[1]
        store = dist.TCPStore(launcher.host, port, spec.learners.workers, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=spec.learners.connect_timeout),
                              master_listen_fd=listener.detach())
        launcher.start((launcher.host, port))
        return cls(spec, 0, store, device, launcher.host)

    @classmethod
    def join(cls, spec: SegmentSpec, rank: int, address: tuple[str, int], device: torch.device) -> LearnerGroup:
        """Rank 1..K-1: connect to rank 0's rendezvous and join."""
        try:
            store = dist.TCPStore(address[0], address[1], spec.learners.workers, is_master=False,
                                  timeout=datetime.timedelta(seconds=spec.learners.connect_timeout))
        except RuntimeError as e:  # rank 0 is gone (this task is a rerun after it ended)
            raise SegmentError(f"segment {spec.key}: learner {rank} cannot reach learner 0 at {address[0]}:"
                               f"{address[1]}: {str(e).splitlines()[0]}") from e
        return cls(spec, rank, store, device, address[0])

    def start_identical(self, agent: Any) -> None:
        """Give every rank rank 0's agent, then average gradients before each of its optimisers' steps."""
        optimizers = _optimizers(agent)
        if not optimizers:  # nothing to average: the copies would drift apart
            raise SegmentError(f"segment {self.key}: {type(agent).__name__} has no optimiser attribute to average "
                               f"the gradients of")
        state = [_to_cpu(agent.state_dict()) if self.rank == 0 else None]
        with self._peers():
            dist.broadcast_object_list(state, src=0, device=self._collective_device())
        if self.rank != 0:
            agent.load_state_dict(state[0])
        join = getattr(agent, "join_peers", None)
        if join is not None:
            join(self)
        for optimizer in optimizers:
            self.hooks.append(optimizer.register_step_pre_hook(self._average_gradients))

    def _average_gradients(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        with self._peers():
            dist.all_reduce(flat)
        flat /= self.size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def agree(self, steps: int, out_of_time: bool) -> tuple[int, bool]:
        """(env steps all ranks took in this iteration, whether any rank is out of time): the same on every rank."""
        both = torch.tensor([float(steps), float(out_of_time)], dtype=torch.float64, device=self._collective_device())
        with self._peers():
            dist.all_reduce(both)
        return int(both[0].item()), bool(both[1].item() > 0)

    def mean(self, value: Tensor) -> Tensor:
        """`Peers.mean`: `value`'s mean over the ranks, the same on each (an all-reduce)."""
        total = value.detach().to(self._collective_device(), copy=True)
        with self._peers():
            dist.all_reduce(total)
        return (total / self.size).to(value.device)

    def gather(self, value: Tensor) -> Tensor:
        """`Peers.gather`: `[K, *value.shape]`, every rank's `value` in rank order, the same on each."""
        mine = value.detach().to(self._collective_device()).contiguous()
        every = [torch.empty_like(mine) for _ in range(self.size)]
        with self._peers():
            dist.all_gather(every, mine)
        return torch.stack(every).to(value.device)

    def spread(self, agent: Any) -> float:
        """The largest difference between the ranks' copies of any number in the agent's state (parameters,
        optimiser state, normaliser statistics, counters: what rank 0 saves); 0.0 when they are identical."""
        flat = torch.cat([t.detach().reshape(-1).double().cpu() for t in _numbers(agent.state_dict())])
        flat = flat.to(self._collective_device())
        high, low = flat.clone(), flat.clone()
        with self._peers():
            dist.all_reduce(high, op=dist.ReduceOp.MAX)
            dist.all_reduce(low, op=dist.ReduceOp.MIN)
        return float((high - low).max().item())

    def close(self) -> None:
        """Leave the group (once; also after a failure, so that the peers' next collective fails, not hangs)."""
        for hook in self.hooks:
            hook.remove()
        self.hooks = []
        if dist.is_initialized():
            dist.destroy_process_group()

    @contextlib.contextmanager
    def _peers(self) -> Iterator[None]:
        """A collective whose failure (a learner died, raised or timed out) fails the segment, saying so."""
        try:
            yield
        except RuntimeError as e:  # gloo's errors (a timeout, a closed connection) are plain RuntimeErrors
            raise SegmentError(f"segment {self.key}: learner {self.rank} of {self.size} lost its peers: "
                               f"{str(e).splitlines()[0]}") from e

    def _collective_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


def _optimizers(agent: Any) -> list[torch.optim.Optimizer]:
    return [v for v in vars(agent).values() if isinstance(v, torch.optim.Optimizer)]


def _numbers(state: Any) -> Iterator[Tensor]:
    """Every tensor and number in `state` (nested dicts, lists, tuples), as tensors, in a fixed order."""
    if isinstance(state, Tensor):
        yield state
    elif isinstance(state, (bool, int, float)):
        yield torch.tensor(float(state))
    elif isinstance(state, Mapping):
        for value in state.values():
            yield from _numbers(value)
    elif isinstance(state, (list, tuple)):
        for value in state:
            yield from _numbers(value)


def _to_cpu(state: Any) -> Any:
    """`state` (nested dicts, lists, tensors, plain values) with every tensor on the CPU, to pickle it anywhere."""
    if isinstance(state, Tensor):
        return state.detach().cpu()
    if isinstance(state, Mapping):
        return {k: _to_cpu(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_to_cpu(v) for v in state)
    return state


@contextlib.contextmanager
def _gloo_interface(host: str) -> Iterator[None]:
    """Bind gloo to the network interface carrying `host`'s address (the loopback one for 127.0.0.1) while the
    process group is made, through gloo's `GLOO_SOCKET_IFNAME`; left to gloo where no interface carries it or the
    variable is set already."""
    name = None if "GLOO_SOCKET_IFNAME" in os.environ else _interface_of(host)
    if name:
        os.environ["GLOO_SOCKET_IFNAME"] = name
    try:
        yield
    finally:
        if name:
            del os.environ["GLOO_SOCKET_IFNAME"]


def _interface_of(host: str) -> str | None:
    import psutil  # a dependency of distributed's, so always there

    try:
        address = socket.gethostbyname(host)
    except OSError:
        return None
    return next((name for name, addresses in psutil.net_if_addrs().items()
                 if any(a.family == socket.AF_INET and a.address == address for a in addresses)), None)
