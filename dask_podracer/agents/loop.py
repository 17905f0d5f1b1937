"""The off-policy worker/learner loop, sequential: collect, then learn (DDPG, TD3, SAC, the DQN family).

Each off-policy agent runs one loop object, built from `config.pipeline`: this module's
`SequentialLoop`, or `pipeline.PipelinedLoop`, which extends it. The loop owns the order of
work (when to step the envs, when to update, when a pause may return) and the clock of how
busy the learner was; the agent owns the data it works on (networks, replay buffer,
normalisers, counters) and how to act, explore and update.

The sequential loop: the worker steps every env `steps_per_iteration` times (uniform random
actions until `learning_starts`, then the agent's exploring policy), putting each step's
transitions in the on-device replay buffer, and the learner then does `utd_ratio` updates per
transition collected.

The update schedule is one rule for both loops: a step's `num_envs` transitions earn
`utd_ratio * num_envs` updates if, once they are in the buffer, the agent is ready to
learn (`learning_starts` env steps taken and a batch's worth of transitions stored);
fractions carry over (`LoopStats.take_updates`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from dask_podracer.agents.base import Metrics
from dask_podracer.agents.normalization import ObservationNormalizer, RewardNormalizer
from dask_podracer.agents.replay import ReplayBuffer
from dask_podracer.envs import VecEnv


class OffPolicyLearner(Protocol):
    """What a loop needs of an agent (`offpolicy.OffPolicyAgent` and its subclasses)."""

    config: Any  # num_envs, steps_per_iteration, utd_ratio, batch_size, learning_starts, max_policy_lag, prioritized
    replay: ReplayBuffer
    obs_norm: ObservationNormalizer
    reward_norm: RewardNormalizer
    env_steps: int
    updates: int
    behaviour: nn.Module  # the network the worker acts with (actor, or Q-network)

    def random_action(self, n: int) -> Tensor: ...

    def explore(self, obs: Tensor, behaviour: nn.Module) -> Tensor:
        """Exploring actions for (normalised) obs `[B, obs_dim]`, acting with `behaviour` (the live network or
        a snapshot)."""
        ...

    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One gradient step on a sampled (normalised) batch; returns detached scalar tensors and, when the batch
        has importance weights (`weight`, prioritised replay), the drawn rows' TD errors `td_error` `[B]`."""
        ...


class LoopStats:
    """Fractional update credit carried between steps, and how busy the learner was.

    `learner_busy_fraction` = `busy_seconds` / the training phase's wall-clock seconds. The
    training phase runs from the first `train_iteration` call to now, *including* the time
    between calls (the caller's own bookkeeping), but not the pauses when the agent was
    handed back to its caller: from the loop's `pause` (called by `act`, `state_dict` and
    `load_state_dict`, e.g. for an evaluation between iterations) to the next
    `train_iteration`. `busy_seconds` is the time spent inside updates (sampling a batch
    and `agent.update`), by the calling thread or, in pipeline mode, the learner thread.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.credit = 0.0
        self.busy_seconds = 0.0
        self.wall_seconds = 0.0  # of the training spans already closed
        self.span_started: float | None = None

    def take_updates(self, amount: float) -> int:
        self.credit += amount
        n = int(self.credit)
        self.credit -= n
        return n

    def open_span(self) -> None:
        if self.span_started is None:
            self.span_started = self.clock()

    def close_span(self) -> None:
        if self.span_started is not None:
            self.wall_seconds += self.clock() - self.span_started
            self.span_started = None

    def busy_fraction(self) -> float:
        wall = self.wall_seconds + (self.clock() - self.span_started if self.span_started is not None else 0.0)
        return self.busy_seconds / max(wall, 1e-9)


# -- the steps both loops take on an agent's data ------------------------------------------

def env_step(agent: OffPolicyLearner, env: VecEnv, obs: Tensor, behaviour: nn.Module) -> tuple[Tensor, tuple]:
    """Step every env once acting with `behaviour` (uniformly random until `learning_starts`). Returns the next
    obs and the transition `(obs, action, reward, final_obs, terminated, truncated)`, not yet stored."""
    if agent.env_steps < agent.config.learning_starts:
        action = agent.random_action(env.num_envs)
    else:
        with torch.no_grad():
            action = agent.explore(agent.obs_norm(obs), behaviour)
    next_obs, reward, terminated, truncated, info = env.step(action)
    agent.env_steps += env.num_envs
    return next_obs, (obs, action, reward, info["final_obs"], terminated, truncated)


def store_transition(agent: OffPolicyLearner, transition: tuple) -> None:
    """Put a step's transitions in the replay buffer (raw) and its observations and rewards into the
    normalisation statistics: one critical section in pipeline mode, so a batch sampled after it sees both."""
    obs, action, reward, final_obs, terminated, truncated = transition
    agent.obs_norm.update(obs)
    agent.reward_norm.update(reward, terminated | truncated)
    agent.replay.add(obs, action, reward, final_obs, terminated)


def sample_batch(agent: OffPolicyLearner) -> dict[str, Tensor]:
    """A batch for one update, observations and rewards normalised with the statistics so far. With prioritised
    replay it is drawn by priority and has `index` and `weight` (at the beta of the updates made so far)."""
    cfg = agent.config
    if cfg.prioritized:
        batch = agent.replay.sample(cfg.batch_size, updates=agent.updates)
    else:
        batch = agent.replay.sample(cfg.batch_size)
    return agent.reward_norm.normalize_batch(agent.obs_norm.normalize_batch(batch))


def update_priorities(agent: OffPolicyLearner, batch: dict[str, Tensor], losses: dict[str, Tensor]) -> None:
    """Prioritised replay, after an update: the drawn rows' priorities become |TD error| + epsilon. Takes
    `td_error` out of `losses` (what is left are the scalar metrics); nothing without it."""
    td_error = losses.pop("td_error", None)
    if td_error is not None:
        agent.replay.update_priorities(batch["index"], td_error)


def ready_to_learn(agent: OffPolicyLearner) -> bool:
    return agent.env_steps >= agent.config.learning_starts and agent.replay.size >= agent.config.batch_size


# -- the loop ------------------------------------------------------------------------------

class SequentialLoop:
    """Collect `steps_per_iteration` steps, then make every update they earned, in the calling thread.

    Reproducible: the same seed gives the same updates in the same order. The loop holds no
    reference to its agent (the agent holds the loop), so every method is given it.
    """

    def __init__(self) -> None:
        self.stats = LoopStats()

    def earned_updates(self, agent: OffPolicyLearner, transitions: int) -> int:
        """The updates `transitions` just stored earn (see the module docstring)."""
        return self.stats.take_updates(agent.config.utd_ratio * transitions) if ready_to_learn(agent) else 0

    def train_iteration(self, agent: OffPolicyLearner, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        """The Agent protocol's `train_iteration` for off-policy agents."""
        cfg, stats = agent.config, self.stats
        stats.open_span()
        owed = 0
        for _ in range(cfg.steps_per_iteration):
            obs, transition = env_step(agent, env, obs, agent.behaviour)
            store_transition(agent, transition)
            owed += self.earned_updates(agent, env.num_envs)
        metrics: Metrics = {}
        if owed:
            started = stats.clock()
            for _ in range(owed):
                batch = sample_batch(agent)
                losses = agent.update(batch)
                update_priorities(agent, batch, losses)
            metrics = {k: float(v) for k, v in losses.items()}  # one host sync per iteration, not per update
            stats.busy_seconds += stats.clock() - started
            metrics["learner_busy_fraction"] = stats.busy_fraction()
        return obs, env.num_envs * cfg.steps_per_iteration, metrics

    def pause(self) -> None:
        """Hand the agent back to its caller (an evaluation, a checkpoint) with still parameters: every update
        owed is made by now, so this only closes the training span of the busy-fraction clock."""
        self.stats.close_span()

    def finish(self) -> None:
        """After the last `train_iteration` (or before loading other parameters): nothing runs between
        iterations, so finishing is pausing."""
        self.pause()
