"""Pipeline parallelism for off-policy agents: the worker collects while the learner updates.

Producer ‖ consumer, one iteration deep. In iteration k the learner (a thread of its own)
does the updates owed for the data collected up to iteration k-1, while the worker (the
calling thread) collects iteration k with a *snapshot* of the behaviour network; the two
meet at the end of the iteration, when the worker's transitions enter the replay buffer.
So the replay buffer is only written while the learner is idle (no lock needed for it),
and the worker never reads parameters the optimiser is writing.

Staleness bound: the snapshot is refreshed at the start of every iteration, and within
one (with `steps_per_iteration > 1`) whenever the learner is more than `max_policy_lag`
updates ahead of it; a refresh waits for the update in progress (one lock, held by the
learner per update and by the worker per refresh).

On a GPU the learner thread issues its updates on a CUDA stream of its own, so they
overlap the worker's env steps on the default stream; the default stream waits for the
learner's stream before the replay buffer is written and before a snapshot is copied (not
yet run on a GPU: the development machine has none). On a CPU
the two threads share the cores torch has (on the 2-vCPU development machine, about one):
the learner's busy fraction is reported as `learner_busy_fraction` either way, the share of
the iteration's wall-clock time spent inside updates.

Pipeline mode is not bit-reproducible: both threads draw from torch's global RNG.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from dask_podracer.agents.base import Metrics
from dask_podracer.agents.offpolicy import OffPolicyLearner, collect, ready_to_learn
from dask_podracer.envs import VecEnv


class _Pipeline:
    """Per-agent pipeline state: a one-thread executor (the learner), the snapshot and the lock."""

    def __init__(self, agent: OffPolicyLearner) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="podracer-learner")
        weakref.finalize(agent, self.executor.shutdown, wait=False)  # the thread ends with its agent
        self.lock = threading.Lock()
        self.snapshot = copy.deepcopy(agent.behaviour).requires_grad_(False)
        self.snapshot_version = agent.updates
        self.max_lag_seen = 0
        device = next(agent.behaviour.parameters()).device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def learner_context(self) -> contextlib.AbstractContextManager:
        """Where the learner's kernels go: its own CUDA stream on a GPU, nothing special on a CPU."""
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def sync(self) -> None:
        """Make the calling thread's (default) stream wait for the learner's work queued so far."""
        if self.stream is not None:
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)

    def refresh(self, agent: OffPolicyLearner) -> None:
        """Copy the live behaviour network into the snapshot (waits for the update in progress)."""
        with self.lock, torch.no_grad():
            self.sync()
            for s, p in zip(self.snapshot.parameters(), agent.behaviour.parameters()):
                s.copy_(p)
            self.snapshot_version = agent.updates


def _learn(agent: OffPolicyLearner, pipe: _Pipeline, n_updates: int) -> tuple[dict[str, Tensor], float]:
    """The learner's job: `n_updates` updates, each under the lock. Returns the last losses and busy seconds."""
    started = time.perf_counter()
    losses: dict[str, Tensor] = {}
    with pipe.learner_context():
        for _ in range(n_updates):
            batch = agent.replay.sample(agent.config.batch_size)
            with pipe.lock:
                losses = agent.update(batch)
    return losses, time.perf_counter() - started


def pipelined_iteration(agent: OffPolicyLearner, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
    """`train_iteration` with the worker and the learner overlapped (see the module docstring)."""
    cfg = agent.config
    started = time.perf_counter()
    collected = env.num_envs * cfg.steps_per_iteration
    if not ready_to_learn(agent):  # warm-up: nothing to learn from yet
        obs, transitions = collect(agent, env, obs, agent.behaviour)
        for t in transitions:
            agent.replay.add(*t)
        agent.loop_stats.wall_seconds += time.perf_counter() - started
        return obs, collected, {}
    pipe: _Pipeline | None = getattr(agent, "_pipeline", None)
    if pipe is None:
        pipe = agent._pipeline = _Pipeline(agent)
    pipe.refresh(agent)
    n_updates = agent.loop_stats.take_updates(cfg.utd_ratio * collected)
    job = pipe.executor.submit(_learn, agent, pipe, n_updates)

    def bound_staleness() -> None:
        lag = agent.updates - pipe.snapshot_version
        if lag > cfg.max_policy_lag:
            pipe.refresh(agent)
            lag = agent.updates - pipe.snapshot_version
        pipe.max_lag_seen = max(pipe.max_lag_seen, lag)

    obs, transitions = collect(agent, env, obs, pipe.snapshot, bound_staleness)
    losses, busy = job.result()
    pipe.sync()  # the learner's queued kernels read the replay buffer: let them finish before writing it
    for t in transitions:
        agent.replay.add(*t)
    agent.loop_stats.busy_seconds += busy
    agent.loop_stats.wall_seconds += time.perf_counter() - started
    metrics: Metrics = {k: float(v) for k, v in losses.items()}
    if metrics:
        metrics.update(agent.loop_stats.metrics())
        metrics["policy_lag_max"] = float(pipe.max_lag_seen)
    return obs, collected, metrics
