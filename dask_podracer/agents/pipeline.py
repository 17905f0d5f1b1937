"""Pipeline parallelism for off-policy agents: the worker runs ahead while a learner thread updates.

`PipelinedLoop` is the loop an off-policy agent runs with `config.pipeline`. It extends
`loop.SequentialLoop` and keeps its update schedule (`earned_updates`) and its steps. Producer ‖
consumer: the learner is a thread of its own that lives from the first `train_iteration` until
the loop's `finish` (or until the agent is collected), so it keeps working between
`train_iteration` calls. The worker (the calling thread) steps the envs with a *snapshot* of the
behaviour network and puts each step's transitions in the replay buffer at once; each step earns
updates by the sequential loop's rule, which the learner pays one at a time, sampling from all
that was collected so far. `train_iteration` returns as soon as its env steps are taken, with
the learner still at work. So the update-to-data ratio is the sequential loop's on
average, and exactly its count of updates whenever the agent is paused.

Staleness bound (`max_policy_lag`, counted in learner updates): before each env step, the
updates owed for the data collected so far minus the updates the acting snapshot has had
must be at most `max_policy_lag` (the sequential loop acts with lag 0: every update owed
is made before the next step). When the bound would be passed, the worker waits until the
learner is within `min(max_policy_lag, updates one step earns)` of the schedule, then copies
the live network into its snapshot, and can take several steps in a row again (waiting past
the bound wakes it once per burst, not once per update, and keeps a step's worth of work
queued for the learner). So the worker runs ahead of the learner by up to
`max_policy_lag / (utd_ratio * num_envs)` env steps, and `policy_lag_max` (the largest lag
it acted with) never exceeds the bound.

Pausing: `act` and `state_dict` call the loop's `pause`, which waits until the learner has
made every update owed (at most `max_policy_lag + utd_ratio * num_envs`) and then finds it
idle, so an evaluation or a checkpoint sees still parameters. The loop's `finish` (after a
segment's last iteration, and first thing in `load_state_dict`) does the same and then ends
the learner thread; a later `train_iteration` starts a new one, with a fresh snapshot.

Locks: `replay_lock` orders the worker's `replay.add` and the learner's `replay.sample` (a
full ring overwrites rows the learner may be reading) and, with prioritised replay, its
`update_priorities` after each update (both write the sum tree; a row overwritten between
the sample and the update takes the old row's TD error, as in Ape-X); `params_lock` is held by the learner
for a whole update and by the worker while it copies the snapshot, so a snapshot never
mixes two updates; `counters_lock` guards the counters both threads wait on (the learner on
`work`, for updates owed; the worker on `progress`, woken only when the count it waits for is
reached, not after every update).

CUDA (run on one H100, where the CUDA pipeline test passed: docs/benchmarks.md, "On one H100";
pipelined training on a GPU has not been timed): the learner issues its work on a stream of its
own, the worker on its current stream, and events order what the locks order on the host: a
sample waits for the latest `replay.add` (`added`), an add for the latest sample's gather
(`sampled`), a snapshot copy for the latest update (`updated`) and the next update for that
copy (`copied`); `drain` makes the worker's stream wait for the learner's. On a GPU
`learner_busy_fraction` measures the host time inside updates (launching kernels), not device
utilisation.

Not bit-reproducible: how many updates precede each env step depends on thread timing, and
both threads draw from torch's global RNG. The sequential loop is reproducible.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import math
import threading
import weakref

import torch
from torch import Tensor

from dask_podracer.agents.base import Metrics
from dask_podracer.agents.loop import (LoopStats, OffPolicyLearner, SequentialLoop, env_step, sample_batch,
                                       store_transition, update_priorities)
from dask_podracer.envs import VecEnv


_LIVE: weakref.WeakSet[Pipeline] = weakref.WeakSet()


@atexit.register
def _stop_learners() -> None:
    """At interpreter exit, let every learner thread finish its update and end: a daemon thread still inside a
    torch kernel when the interpreter finalises aborts the process ("terminate called without an active exception")."""
    pipes = list(_LIVE)
    for pipe in pipes:
        pipe.close()
    for pipe in pipes:
        pipe.thread.join(timeout=10)


class Pipeline:
    """One running pipeline: the learner thread, the worker's snapshot, and what the two share. A
    `PipelinedLoop` starts one on its first `train_iteration` and ends it in `finish`."""

    def __init__(self, agent: OffPolicyLearner, stats: LoopStats) -> None:
        self.stats = stats  # the loop's clock: the learner thread adds its busy seconds
        self.params_lock = threading.Lock()
        self.replay_lock = threading.Lock()
        self.counters_lock = threading.Lock()
        self.work = threading.Condition(self.counters_lock)
        self.progress = threading.Condition(self.counters_lock)
        self.wake_at = math.inf  # the `done` count the worker waits for
        self.scheduled = agent.updates  # updates owed so far, counted like agent.updates
        self.done = agent.updates  # updates the learner has finished
        self.losses: dict[str, Tensor] = {}
        self.error: BaseException | None = None
        self.stopping = False
        self.snapshot = copy.deepcopy(agent.behaviour).requires_grad_(False)
        self.snapshot_version = agent.updates
        self.max_lag_seen = 0
        self.device = next(agent.behaviour.parameters()).device
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        if self.stream is not None:
            self.added, self.sampled, self.updated, self.copied = (torch.cuda.Event() for _ in range(4))
        # The thread holds the agent weakly, so the agent (and with it the thread) can be collected.
        self.thread = threading.Thread(target=_learner_main, args=(weakref.ref(agent), self, torch.get_num_threads()),
                                       name="podracer-learner", daemon=True)
        weakref.finalize(agent, self.close)
        _LIVE.add(self)
        self.thread.start()

    # -- called by the worker ----------------------------------------------------------

    def check(self) -> None:
        """Re-raise, in the worker, an exception the learner thread died of."""
        if self.error is not None:
            raise self.error

    def store(self, agent: OffPolicyLearner, transition: tuple[Tensor, ...]) -> None:
        with self.replay_lock:
            if self.stream is not None:
                torch.cuda.current_stream(self.device).wait_event(self.sampled)
            store_transition(agent, transition)
            if self.stream is not None:
                self.added.record(torch.cuda.current_stream(self.device))

    def schedule(self, n: int) -> None:
        if n:
            with self.counters_lock:
                self.scheduled += n
                self.work.notify()

    def wait_for_learner(self, target: int) -> None:
        """Block until the learner has finished `target` updates in all."""
        with self.counters_lock:
            self.wake_at = target
            self.progress.wait_for(lambda: self.error is not None or self.done >= target)
            self.wake_at = math.inf
        self.check()

    def bound_lag(self, agent: OffPolicyLearner, limit: int, per_step: int) -> None:
        """Before an env step: if the snapshot would act more than `limit` updates stale, wait until the learner
        is within `min(limit, per_step)` updates of the schedule and refresh the snapshot. Waiting past the bound
        (hysteresis) lets the worker then take several steps in a row: fewer wake-ups and copies, a less stale
        snapshot on average, and still a step's worth of updates queued so that the learner does not idle."""
        if self.scheduled - self.snapshot_version > limit:
            self.wait_for_learner(self.scheduled - min(limit, per_step))
            self.refresh(agent)
        self.max_lag_seen = max(self.max_lag_seen, self.scheduled - self.snapshot_version)

    def refresh(self, agent: OffPolicyLearner) -> None:
        """Copy the live behaviour network into the snapshot (waits for the update in progress)."""
        with self.params_lock, torch.no_grad():
            if self.stream is not None:
                torch.cuda.current_stream(self.device).wait_event(self.updated)
            for s, p in zip(self.snapshot.parameters(), agent.behaviour.parameters()):
                s.copy_(p)
            if self.stream is not None:
                self.copied.record(torch.cuda.current_stream(self.device))
            self.snapshot_version = agent.updates

    def latest_losses(self) -> dict[str, float]:
        with self.counters_lock:
            losses = dict(self.losses)
        if losses and self.stream is not None:
            # They were computed on the learner's stream.
            torch.cuda.current_stream(self.device).wait_event(self.updated)
        return {k: float(v) for k, v in losses.items()}

    def drain(self) -> None:
        """Wait until every update owed is made; the worker's stream then sees the learner's results."""
        self.wait_for_learner(self.scheduled)
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def close(self) -> None:
        """Let the learner thread end (after the update in progress, if any)."""
        with self.counters_lock:
            self.stopping = True
            self.work.notify_all()
            self.progress.notify_all()

    # -- called by the learner ---------------------------------------------------------

    def learner_context(self) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def sample(self, agent: OffPolicyLearner) -> dict[str, Tensor]:
        with self.replay_lock:
            if self.stream is not None:
                self.stream.wait_event(self.added)  # the worker's latest add, queued on its stream
            batch = sample_batch(agent)
            if self.stream is not None:
                self.sampled.record(self.stream)
        return batch

    def update(self, agent: OffPolicyLearner, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        with self.params_lock:
            if self.stream is not None:
                self.stream.wait_event(self.copied)  # don't overwrite parameters a snapshot copy is reading
            losses = agent.update(batch)
            if self.stream is not None:
                self.updated.record(self.stream)
        if "td_error" in losses:  # prioritised replay: the tree is the worker's too (its adds write leaves)
            with self.replay_lock:
                if self.stream is not None:
                    self.stream.wait_event(self.added)  # adds made since this batch was sampled
                update_priorities(agent, batch, losses)
                if self.stream is not None:
                    self.sampled.record(self.stream)  # the next add waits for this write, as for a gather
        return losses


def _learner_main(agent_ref: weakref.ref, pipe: Pipeline, threads: int) -> None:
    """The learner thread: pay the updates owed, one at a time, until told to stop or the agent is gone."""
    torch.set_num_threads(threads)  # the worker's setting, not torch's default for a new thread
    with pipe.learner_context():
        while True:
            with pipe.counters_lock:
                pipe.work.wait_for(lambda: pipe.stopping or pipe.done < pipe.scheduled)
                if pipe.stopping:
                    return
            agent = agent_ref()
            if agent is None:
                return
            try:
                started = pipe.stats.clock()
                losses = pipe.update(agent, pipe.sample(agent))
                elapsed = pipe.stats.clock() - started
            except Exception as e:  # handed to the worker, which raises it
                with pipe.counters_lock:
                    pipe.error = e
                    pipe.progress.notify_all()
                return
            with pipe.counters_lock:
                pipe.stats.busy_seconds += elapsed  # only this thread writes it in pipeline mode
                pipe.done += 1
                pipe.losses = losses
                if pipe.done >= pipe.wake_at:
                    pipe.progress.notify_all()
            del agent


class PipelinedLoop(SequentialLoop):
    """The worker runs ahead of a learner thread (see the module docstring); the sequential loop's schedule."""

    def __init__(self) -> None:
        super().__init__()
        self.pipe: Pipeline | None = None  # running from the first train_iteration until finish

    def train_iteration(self, agent: OffPolicyLearner, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        cfg = agent.config
        self.stats.open_span()
        if self.pipe is None:
            self.pipe = Pipeline(agent, self.stats)
        pipe = self.pipe
        pipe.check()
        per_step = max(1, int(cfg.utd_ratio * env.num_envs))  # the updates one env step earns, about
        for _ in range(cfg.steps_per_iteration):
            pipe.bound_lag(agent, cfg.max_policy_lag, per_step)
            obs, transition = env_step(agent, env, obs, pipe.snapshot)
            pipe.store(agent, transition)
            pipe.schedule(self.earned_updates(agent, env.num_envs))
        metrics: Metrics = pipe.latest_losses()
        if metrics:
            metrics["learner_busy_fraction"] = self.stats.busy_fraction()
            metrics["policy_lag_max"] = float(pipe.max_lag_seen)
        return obs, env.num_envs * cfg.steps_per_iteration, metrics

    def pause(self) -> None:
        """Wait until the learner has made every update owed (it is then idle), then close the training span."""
        if self.pipe is not None:
            self.pipe.drain()
        super().pause()

    def finish(self) -> None:
        """Pause, and end the learner thread: the parameters are final, or about to be replaced by a load."""
        if self.pipe is not None:
            self.pipe.drain()
            self.pipe.close()
            self.pipe = None
        super().finish()
