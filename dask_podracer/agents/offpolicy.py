"""Pieces shared by the off-policy algorithms (DDPG, TD3, SAC, the DQN family): pure functions and one loop.

The worker/learner loop is a function of any agent that follows `OffPolicyLearner`:
the worker steps every env `steps_per_iteration` times (uniform random actions until
`learning_starts`, then the agent's exploring policy), putting each step's transitions in
the on-device replay buffer, and the learner then does `utd_ratio` updates per transition
collected. With `config.pipeline` the two overlap instead (see `agents/pipeline.py`).

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
from dask_podracer.agents.ensemble import COMBINE_MODES
from dask_podracer.agents.normalization import ObservationNormalizer, RewardNormalizer
from dask_podracer.agents.replay import ReplayBuffer
from dask_podracer.envs import VecEnv


def check(config: Any, field: str, ok: bool, allowed: str) -> None:
    """Raise ValueError("<field> must be <allowed>, got <value>") unless `ok`."""
    if not ok:
        raise ValueError(f"{field} must be {allowed}, got {getattr(config, field)!r}")


def validate_offpolicy(cfg: Any) -> None:
    """Checks of the fields every off-policy config has (and normalises `hidden` to a tuple)."""
    object.__setattr__(cfg, "hidden", tuple(int(h) for h in cfg.hidden))
    check(cfg, "num_envs", cfg.num_envs >= 1, ">= 1")
    check(cfg, "steps_per_iteration", cfg.steps_per_iteration >= 1, ">= 1")
    check(cfg, "utd_ratio", cfg.utd_ratio > 0, "> 0")
    check(cfg, "batch_size", cfg.batch_size >= 1, ">= 1")
    check(cfg, "buffer_size", cfg.buffer_size >= cfg.batch_size, ">= batch_size")
    # An iteration's transitions must all fit: a smaller ring would overwrite them before any update.
    per_iteration = cfg.num_envs * cfg.steps_per_iteration
    check(cfg, "buffer_size", cfg.buffer_size >= per_iteration,
          f">= num_envs * steps_per_iteration (= {per_iteration})")
    check(cfg, "learning_starts", cfg.learning_starts >= 0, ">= 0")
    check(cfg, "gamma", 0 <= cfg.gamma <= 1, "in [0, 1]")
    check(cfg, "tau", 0 < cfg.tau <= 1, "in (0, 1]")
    check(cfg, "hidden", len(cfg.hidden) >= 1 and min(cfg.hidden) >= 1, "a non-empty list of positive widths")
    check(cfg, "max_policy_lag", cfg.max_policy_lag >= 1, ">= 1")


def validate_ensemble(cfg: Any) -> None:
    """Checks of the critic-ensemble fields of DDPG, TD3 and SAC."""
    check(cfg, "num_critics", cfg.num_critics >= 1, ">= 1")
    check(cfg, "target_combine", cfg.target_combine in COMBINE_MODES, f"one of {COMBINE_MODES}")
    check(cfg, "actor_combine", cfg.actor_combine in COMBINE_MODES, f"one of {COMBINE_MODES}")
    check(cfg, "redq_subset", cfg.redq_subset >= 1, ">= 1")
    check(cfg, "combine_weight", 0 <= cfg.combine_weight <= 1, "in [0, 1]")


# -- pure functions ------------------------------------------------------------------------

def td_target(reward: Tensor, terminated: Tensor, next_value: Tensor, gamma: float) -> Tensor:
    """r + gamma * (1 - terminated) * V(s'), all `[B]`; truncated episodes still bootstrap."""
    return reward + gamma * (1 - terminated) * next_value


def gaussian_explore(action: Tensor, noise_std: float, low: Tensor, high: Tensor) -> Tensor:
    """action `[B, act_dim]` + N(0, (noise_std * half_range)^2), clipped to [low, high]."""
    noise = torch.randn_like(action) * (noise_std * (high - low) / 2)
    return torch.max(torch.min(action + noise, high), low)


def smoothed_target_action(action: Tensor, noise_std: float, noise_clip: float, low: Tensor, high: Tensor) -> Tensor:
    """TD3's target policy smoothing: action `[B, act_dim]` + clip(N(0, std), -c, c) (half-range units), in bounds."""
    half_range = (high - low) / 2
    noise = (torch.randn_like(action) * noise_std).clamp(-noise_clip, noise_clip) * half_range
    return torch.max(torch.min(action + noise, high), low)


def uniform_action(low: Tensor, high: Tensor, n: int) -> Tensor:
    """`[n, act_dim]` actions uniform in the Box [low, high]."""
    return low + (high - low) * torch.rand(n, low.shape[0], device=low.device)


def regress(optimizer: torch.optim.Optimizer, loss: Tensor, max_grad_norm: float | None = None,
            params: list[nn.Parameter] | None = None) -> None:
    """One optimiser step on `loss` (zero grads, backward, optional global-norm clip, step)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm is not None and params is not None:
        nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()


# -- the worker/learner loop ----------------------------------------------------------------

class OffPolicyLearner(Protocol):
    """What `offpolicy_iteration` needs of an agent."""

    config: Any  # num_envs, steps_per_iteration, utd_ratio, batch_size, learning_starts, pipeline, max_policy_lag
    replay: ReplayBuffer
    obs_norm: ObservationNormalizer
    reward_norm: RewardNormalizer
    env_steps: int
    updates: int
    behaviour: nn.Module  # the network the worker acts with (actor, or Q-network)
    loop_stats: LoopStats

    def random_action(self, n: int) -> Tensor: ...

    def explore(self, obs: Tensor, behaviour: nn.Module) -> Tensor:
        """Exploring actions for (normalised) obs `[B, obs_dim]`, acting with `behaviour` (the live network or
        a snapshot)."""
        ...

    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One gradient step on a sampled (normalised) batch; returns detached scalar tensors."""
        ...


class LoopStats:
    """Fractional update credit carried between steps, and how busy the learner was.

    `learner_busy_fraction` = `busy_seconds` / the training phase's wall-clock seconds. The
    training phase runs from the first `train_iteration` call to now, *including* the time
    between calls (the caller's own bookkeeping), but not the pauses when the agent was
    handed back to its caller: from `pause` (called by `act`, `state_dict` and
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
    """A batch for one update, observations and rewards normalised with the statistics so far."""
    batch = agent.replay.sample(agent.config.batch_size)
    return agent.reward_norm.normalize_batch(agent.obs_norm.normalize_batch(batch))


def ready_to_learn(agent: OffPolicyLearner) -> bool:
    return agent.env_steps >= agent.config.learning_starts and agent.replay.size >= agent.config.batch_size


def earned_updates(agent: OffPolicyLearner, transitions: int) -> int:
    """The updates `transitions` just stored earn (see the module docstring)."""
    return agent.loop_stats.take_updates(agent.config.utd_ratio * transitions) if ready_to_learn(agent) else 0


def pause(agent: OffPolicyLearner, stop_learner: bool = False) -> None:
    """Hand the agent back to its caller with still parameters: in pipeline mode wait until the learner
    thread has made every update owed (and, with `stop_learner`, end it); close the training span."""
    pipe = agent.__dict__.get("_pipeline")
    if pipe is not None:
        pipe.drain()
        if stop_learner:
            pipe.close()
            del agent.__dict__["_pipeline"]
    agent.loop_stats.close_span()


def offpolicy_iteration(agent: OffPolicyLearner, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
    """The Agent protocol's `train_iteration` for off-policy agents: collect, then update (or pipelined)."""
    if agent.config.pipeline:
        from dask_podracer.agents.pipeline import pipelined_iteration
        return pipelined_iteration(agent, env, obs)
    cfg, stats = agent.config, agent.loop_stats
    stats.open_span()
    owed = 0
    for _ in range(cfg.steps_per_iteration):
        obs, transition = env_step(agent, env, obs, agent.behaviour)
        store_transition(agent, transition)
        owed += earned_updates(agent, env.num_envs)
    metrics: Metrics = {}
    if owed:
        started = stats.clock()
        for _ in range(owed):
            losses = agent.update(sample_batch(agent))
        metrics = {k: float(v) for k, v in losses.items()}  # one host sync per iteration, not per update
        stats.busy_seconds += stats.clock() - started
        metrics["learner_busy_fraction"] = stats.busy_fraction()
    return obs, env.num_envs * cfg.steps_per_iteration, metrics
