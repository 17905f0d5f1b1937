"""An actor-learner segment: this process learns, actor processes roll out (IMPALA, Espeholt et al. 2018; Ape-X,
Horgan et al. 2018).

`run_segment` wraps the agent in an `ActorLearner` when the spec has `actors`; everything else about the
segment (parent, budget loop, evaluation, checkpoint, result) stays the one-task segment's. The learner:

1. opens a `LearnerEndpoint` (`actor_link.py`: its own host, port 0, a fresh random authkey) and asks the
   `ActorLauncher` (given by whoever runs the segment: `population/actor_tasks.py` on Dask) to start
   `spec.actors.workers` actors that call `run_actor` with the address and the key;
2. in each `train_iteration`, takes the trajectories that arrived into a `TrajectoryBook` (`trajectory_book.py`)
   and hands them to the agent's `learn` as its `learner_feed` says: IMPALA, once `batch_rollouts` are
   available (dropping those staler than `max_policy_lag`, reusing each at most `reuse` times); a replay learner
   (Ape-X), everything that arrived, each once, never dropped; then sends the new policy once `weights_every`
   gradient steps were made since the last it sent;
3. reports, as the iteration's metrics, the policy lag (median, p95, max), what was dropped, actors joined and
   lost, the ingest rate and where the learner's time went (gradient steps, waiting for rollouts, sending its
   weights): over the whole segment, and from the moment every actor had delivered a rollout (`streaming_*`).

The learner never looks inside a trajectory (the agent converts it: `agents/actor_learner.py`), except to count
its `rewards` against the step budget, which counts transitions received from actors. An actor that dies costs
the rollouts it had not sent: the learner goes on with the rest (a Dask worker's death reruns the actor task,
which joins again). With no actor connected for `connect_timeout` seconds the segment fails.
"""

from __future__ import annotations

import pickle
import queue
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch
from torch import Tensor

from dask_podracer.agents import algorithm_info, make_agent
from dask_podracer.agents.actor_learner import WEIGHTS_EVERY_PAST_LAG, LearnsFromActors
from dask_podracer.envs import VecEnv, make_vec_env
from dask_podracer.train.actor_link import (LearnerEndpoint, bound_send_wait, bound_socket_buffer, connect_to_learner,
                                            dumps, new_authkey)
from dask_podracer.train.host_memory import restore_malloc_thresholds
from dask_podracer.train.spec import SegmentError, SegmentSpec
from dask_podracer.train.trajectory_book import TrajectoryBook


ACTOR_CONNECT_SECONDS = 5.0
"""How long an actor retries its learner's address: the learner listens before it starts any actor, so a refusal
means it is gone (an actor rerun after its worker died, arriving after the segment ended)."""


class ActorLauncher(Protocol):
    """Starts the actor processes of one segment, wherever they run (Dask tasks, local processes). Whoever gives
    `run_segment` a launcher also ends it: it calls `hang_up` when the segment's task ends, however it ends, so
    actors never wait on a learner that failed."""

    host: str
    """The host the learner listens on: an address the actors can reach (127.0.0.1 on one machine)."""

    def start(self, address: tuple[str, int], authkey: bytes, hang_up: Callable[[], None]) -> None:
        """Start the actors; each calls `run_actor(spec, index, address, authkey)`."""
        ...


class ActorLearner:
    """The learner of an actor-learner segment, driven through the `Agent` protocol by `run_segment`."""

    def __init__(self, agent: Any, spec: SegmentSpec, launcher: ActorLauncher | None) -> None:
        if spec.actors is None or launcher is None:
            raise ValueError("an actor-learner segment needs a spec with actors and a launcher to start them")
        if not isinstance(agent, LearnsFromActors):
            raise ValueError(f"algorithm {spec.algorithm!r} cannot learn from actors")
        self.agent, self.actors, self.key = agent, spec.actors, spec.key
        self.algorithm, self.config = agent.algorithm, agent.config
        self.feed = agent.learner_feed()
        self.batch = self.feed.batch
        if not self.feed.replay and self.actors.weights_every > self.actors.max_policy_lag + 1:
            raise ValueError(WEIGHTS_EVERY_PAST_LAG.format(limit=self.actors.max_policy_lag + 1,
                                                           weights_every=self.actors.weights_every))
        # a replay learner keeps every trajectory in its replay buffer: the book only records their lags
        lag_bound, reuse = (None, 1) if self.feed.replay else (self.actors.max_policy_lag, self.actors.reuse)
        self.book: TrajectoryBook[dict[str, Any]] = TrajectoryBook(lag_bound, reuse)
        self.first_version = self.published = agent.updates
        authkey = new_authkey()
        inbox = max(2 * self.batch, 2 * self.actors.workers)  # bounded: a full inbox pushes back on the actors
        self.endpoint = LearnerEndpoint(launcher.host, authkey, inbox, self._weights())
        self.started = self.last_taken = time.monotonic()
        # where the learner's time goes: its gradient steps, blocked on the inbox for rollouts, pickling and
        # handing out its weights; the rest is its bookkeeping and the segment's loop
        self.learn_seconds = self.wait_seconds = self.publish_seconds = 0.0
        self.transitions = self.rollouts = self.bytes_received = 0
        self.episode_returns, self.episodes = 0.0, 0
        # From the moment every actor has delivered a rollout: the steady rate, without the actors' start-up
        # (a short segment with many actors counts each one's start-up in `transitions_per_s`)
        self.first_rollout_from: set[int] = set()
        self.streaming_since: float | None = None
        self.streaming_transitions = 0
        self.streaming_learn_seconds = self.streaming_wait_seconds = 0.0
        self.last_learn: dict[str, float] = {}
        self.finished = False
        launcher.start(self.endpoint.address, authkey, self.finish)

    def _weights(self) -> bytes:
        return dumps(("weights", self.agent.updates, self.agent.policy_state()))

    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        return self.agent.act(obs, deterministic)

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, dict[str, float]]:
        """Receive what arrived (waiting up to a second for enough to learn from), learn once if a batch is ready.
        `env` is unused: the actors step their own. Returns the transitions received."""
        received = self._receive(wait=1.0)
        version = self.agent.updates
        available = self.book.available(version)
        if available >= self.batch:
            batch = self.book.take(available if self.feed.replay else self.batch, version)
            started = time.perf_counter()
            agent = self.agent
            self.last_learn = agent.learn([agent.trajectory_from_arrays(e.item) for e in batch]) or self.last_learn
            learned = time.perf_counter() - started
            self.learn_seconds += learned
            if self.streaming_since is not None:
                self.streaming_learn_seconds += learned
            self.book.trained(batch)
            if agent.updates - self.published >= self.actors.weights_every:
                started = time.perf_counter()
                self.published = agent.updates
                self.endpoint.publish(self._weights())
                self.publish_seconds += time.perf_counter() - started
        self._check_actors()
        return obs, received, self.metrics()

    def _receive(self, wait: float) -> int:
        """Move arrived rollouts into the book; wait up to `wait` seconds while a batch cannot be made yet.

        A replay learner takes in everything that arrived. An IMPALA learner takes in only what its next batch
        needs (fresh rollouts first): the rest waits in the bounded inbox, so a learner that actors outpace pushes
        back on them there, and with `max_in_flight` they wait for it, rather than the book filling with rollouts
        that go stale before their turn and are dropped (the learner then idles for fresh ones)."""
        deadline = time.monotonic() + wait
        received = 0
        book, version = self.book, self.agent.updates
        while True:
            if not self.feed.replay and book.unused(version) >= self.batch:
                return received
            try:
                if book.available(version) >= self.batch:
                    arrival = self.endpoint.inbox.get_nowait()
                else:
                    waiting = time.perf_counter()
                    try:
                        arrival = self.endpoint.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
                    finally:
                        waited = time.perf_counter() - waiting
                        self.wait_seconds += waited
                        if self.streaming_since is not None:
                            self.streaming_wait_seconds += waited
            except queue.Empty:
                return received
            self.last_taken = time.monotonic()
            if self.actors.max_in_flight:  # the actor may send another
                self.endpoint.acknowledge(arrival.actor)
            transitions = _transitions(arrival.arrays)
            if self.streaming_since is not None:
                self.streaming_transitions += transitions
            else:
                self.first_rollout_from.add(arrival.actor)
                if len(self.first_rollout_from) >= self.actors.workers:  # the clock starts after this rollout
                    self.streaming_since = time.monotonic()
            book.add(arrival.arrays, arrival.version)
            received += transitions
            self.transitions += transitions
            self.rollouts += 1
            self.bytes_received += arrival.nbytes
            self.episode_returns += float(arrival.episodes[0])
            self.episodes += int(arrival.episodes[1])

    def _check_actors(self) -> None:
        endpoint = self.endpoint
        connected = endpoint.connected()
        if connected:
            # connected but silent: a stalled actor (SIGSTOP, a hung env) keeps its socket open, so only the lack of
            # rollouts tells; with nothing waiting in the inbox, none is held back by the learner itself
            quiet = time.monotonic() - max(self.last_taken, endpoint.last_joined)
            if quiet > self.actors.connect_timeout and endpoint.inbox.empty():
                raise SegmentError(f"segment {self.key}: no rollout from its {connected} connected actors for "
                                   f"{quiet:.0f}s: stalled (joined {endpoint.joined}, lost {endpoint.lost})")
            return
        # an actor that raised is never run again: once every one has, none will connect, so fail now with why
        failed = f", the last: {endpoint.last_error}" if endpoint.last_error else ""
        if endpoint.failed >= self.actors.workers:
            raise SegmentError(f"segment {self.key}: every actor failed ({endpoint.failed} of {self.actors.workers}"
                               f"{failed})")
        alone = time.monotonic() - endpoint.last_connected
        if alone > self.actors.connect_timeout:
            raise SegmentError(f"segment {self.key}: no actor connected for {alone:.0f}s (joined {endpoint.joined}, "
                               f"lost {endpoint.lost}, failed {endpoint.failed}{failed})")

    def metrics(self) -> dict[str, float]:
        """The learner's last losses, and the segment's actor-learner figures so far."""
        elapsed = max(1e-9, time.monotonic() - self.started)
        book = self.book
        out = {
            **self.last_learn, **book.lag_metrics(),
            "actors_joined": float(self.endpoint.joined), "actors_lost": float(self.endpoint.lost),
            "actors_failed": float(self.endpoint.failed),
            "rollouts_received": float(self.rollouts), "rollouts_dropped_stale": float(book.dropped_stale),
            "rollouts_never_trained": float(book.dropped_unused),
            "transitions_received": float(self.transitions), "transitions_per_s": self.transitions / elapsed,
            "socket_bytes_received": float(self.bytes_received),
            "learner_updates": float(self.agent.updates - self.first_version),
            "learner_busy_fraction": self.learn_seconds / elapsed,
            "learner_wait_fraction": self.wait_seconds / elapsed,
            "learner_publish_fraction": self.publish_seconds / elapsed,
        }
        if self.streaming_since is not None:
            streaming = max(1e-9, time.monotonic() - self.streaming_since)
            out.update(streaming_seconds=streaming, streaming_transitions_per_s=self.streaming_transitions / streaming,
                       streaming_busy_fraction=self.streaming_learn_seconds / streaming,
                       streaming_wait_fraction=self.streaming_wait_seconds / streaming)
        if self.episodes:
            out["episode_return"] = self.episode_returns / self.episodes
        return out

    def finish(self) -> None:
        """Stop the actors and close the wire (once; the launcher calls it again when the task ends)."""
        if self.finished:
            return
        self.finished = True
        self.endpoint.close()
        self.agent.finish()

    def state_dict(self) -> dict[str, Any]:
        return self.agent.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.agent.load_state_dict(state)


def _transitions(arrays: Mapping[str, Any]) -> int:
    return int(arrays["rewards"].size)


def run_actor(spec: SegmentSpec, index: int, address: tuple[str, int], authkey: bytes) -> dict[str, float]:
    """One actor of `spec`'s segment: act with the newest policy received, send each rollout, until told to stop
    or the learner hangs up. Runs on the CPU, one torch thread. Returns what it sent and the settings it took
    (`start_acting`: an Ape-X actor's epsilon), small."""
    if spec.actors is None:
        raise ValueError("run_actor needs a spec with actors")
    torch.set_num_threads(1)
    restore_malloc_thresholds()
    seed = spec.seed + 1_000 * (index + 1)  # each actor explores on its own stream
    torch.manual_seed(seed)
    hparams = algorithm_info(spec.algorithm).config_cls(**spec.hparams)
    env = make_vec_env(spec.env, hparams.num_envs, device="cpu", seed=seed, **spec.env_kwargs)
    agent = make_agent(spec.algorithm, env.single_observation_space, env.single_action_space, spec.hparams, "cpu")
    report = {"rollouts_sent": 0.0, "rollouts_taken": 0.0, "bytes_sent": 0.0, "weights_received": 0.0,
              **agent.start_acting(index, spec.actors.workers)}
    try:
        conn = connect_to_learner(address, authkey, ACTOR_CONNECT_SECONDS)
    except OSError:  # the learner is gone already
        return report
    bound = spec.actors.max_in_flight
    bounded = False
    try:
        version = _apply(agent, pickle.loads(conn.recv_bytes()), report)
        obs, _ = env.reset(seed=seed)
        while version is not None:
            # with a bound, wait (reading weights meanwhile) until the learner has taken enough of this actor's
            # rollouts in: the next one is then acted with weights at most the bound's rollouts old
            while bound and version is not None and report["rollouts_sent"] - report["rollouts_taken"] >= bound:
                if not conn.poll(spec.actors.connect_timeout):  # a stalled learner (its worker stopped) keeps its
                    return report  # socket open: free this slot, which a rerun of its segment may need
                version = _apply(agent, pickle.loads(conn.recv_bytes()), report, version)
            if version is None:
                break
            obs, rollout, episodes = agent.collect(env, obs)
            payload = dumps(("rollout", version, agent.trajectory_arrays(rollout), episodes))
            if not bounded:  # the kernel's send buffer, sized by the first rollout (actor_link.bound_socket_buffer)
                bound_socket_buffer(conn, socket.SO_SNDBUF, len(payload))
                bound_send_wait(conn, spec.actors.connect_timeout)
                bounded = True
            conn.send_bytes(payload)
            report["rollouts_sent"] += 1
            report["bytes_sent"] += len(payload)
            while version is not None and conn.poll():
                version = _apply(agent, pickle.loads(conn.recv_bytes()), report, version)
    except (EOFError, OSError):  # the learner hung up (or died): this actor's part is over
        pass
    except Exception as error:  # its env or its policy failed: say why, so the learner need not wait it out
        first_line = next(iter(str(error).splitlines()), "")  # torch's NaN errors go on with the tensor
        try:
            conn.send_bytes(dumps(("error", f"actor {index}: {type(error).__name__}: {first_line}")))
        except OSError:
            pass
        raise
    finally:
        conn.close()
    return report


def _apply(agent: Any, message: tuple, report: dict[str, float], version: int | None = None) -> int | None:
    """Act on a message from the learner: load weights into `agent`, or count the rollouts it took in. Returns
    the policy version to tag rollouts with (`version`, the current one, unless new weights came), None after
    a stop."""
    if message[0] == "stop":
        return None
    if message[0] == "taken":
        report["rollouts_taken"] = float(message[1])
        return version
    _, new_version, state = message
    agent.load_policy_state(state)
    report["weights_received"] += 1
    return int(new_version)
