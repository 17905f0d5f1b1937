"""Pieces shared by the off-policy algorithms (DDPG, TD3, SAC, the DQN family): pure functions and one loop.

The worker/learner loop is a function of any agent that follows `OffPolicyLearner`:
the worker steps every env `steps_per_iteration` times (uniform random actions until
`learning_starts`, then the agent's exploring policy), appends to the on-device replay
buffer, and the learner does `utd_ratio` updates per env step collected. With
`config.pipeline` the two overlap instead (see `agents/pipeline.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from dask_podracer.agents.base import Metrics
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
    check(cfg, "learning_starts", cfg.learning_starts >= 0, ">= 0")
    check(cfg, "gamma", 0 <= cfg.gamma <= 1, "in [0, 1]")
    check(cfg, "tau", 0 < cfg.tau <= 1, "in (0, 1]")
    check(cfg, "hidden", len(cfg.hidden) >= 1 and min(cfg.hidden) >= 1, "a non-empty list of positive widths")
    check(cfg, "max_policy_lag", cfg.max_policy_lag >= 1, ">= 1")


# -- pure functions ------------------------------------------------------------------------

def td_target(reward: Tensor, terminated: Tensor, next_value: Tensor, gamma: float) -> Tensor:
    """r + gamma * (1 - terminated) * V(s'), all `[B]`; truncated episodes still bootstrap."""
    return reward + gamma * (1 - terminated) * next_value


def gaussian_explore(action: Tensor, noise_std: float, low: Tensor, high: Tensor) -> Tensor:
    """action `[B, act_dim]` + N(0, (noise_std * half_range)^2), clipped to [low, high]."""
    noise = torch.randn_like(action) * (noise_std * (high - low) / 2)
    return torch.max(torch.min(action + noise, high), low)


def smoothed_target_action(action: Tensor, noise_std: float, noise_clip: float, low: Tensor, high: Tensor) -> Tensor:
    """TD3's target policy smoothing: action `[B, act_dim]` + clip(N(0, std), -c, c) (in half-range units), in bounds."""
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
    env_steps: int
    updates: int
    behaviour: nn.Module  # the network the worker acts with (actor, or Q-network)
    loop_stats: LoopStats

    def random_action(self, n: int) -> Tensor: ...

    def explore(self, obs: Tensor, behaviour: nn.Module) -> Tensor:
        """Exploring actions for obs `[B, obs_dim]`, acting with `behaviour` (the live network or a snapshot)."""
        ...

    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One gradient step on a sampled batch; returns detached scalar tensors."""
        ...


class LoopStats:
    """Fractional update credit carried between iterations, and how busy the learner was."""

    def __init__(self) -> None:
        self.credit = 0.0
        self.busy_seconds = 0.0  # time spent in updates
        self.wall_seconds = 0.0  # time spent in train_iteration

    def take_updates(self, amount: float) -> int:
        self.credit += amount
        n = int(self.credit)
        self.credit -= n
        return n

    def metrics(self) -> Metrics:
        return {"learner_busy_fraction": self.busy_seconds / max(self.wall_seconds, 1e-9)}


def collect(agent: OffPolicyLearner, env: VecEnv, obs: Tensor, behaviour: nn.Module,
            before_step: Callable[[], None] | None = None) -> tuple[Tensor, list[tuple]]:
    """Step every env `steps_per_iteration` times acting with `behaviour` (calling `before_step` before
    each step); return the next obs and the transitions `(obs, action, reward, final_obs, terminated)`,
    not yet stored."""
    transitions = []
    for _ in range(agent.config.steps_per_iteration):
        if before_step is not None:
            before_step()
        if agent.env_steps < agent.config.learning_starts:
            action = agent.random_action(env.num_envs)
        else:
            with torch.no_grad():
                action = agent.explore(obs, behaviour)
        next_obs, reward, terminated, _truncated, info = env.step(action)
        transitions.append((obs, action, reward, info["final_obs"], terminated))
        obs = next_obs
        agent.env_steps += env.num_envs
    return obs, transitions


def ready_to_learn(agent: OffPolicyLearner) -> bool:
    return agent.env_steps >= agent.config.learning_starts and agent.replay.size >= agent.config.batch_size


def offpolicy_iteration(agent: OffPolicyLearner, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
    """The Agent protocol's `train_iteration` for off-policy agents: collect, then update (or pipelined)."""
    if agent.config.pipeline:
        from dask_podracer.agents.pipeline import pipelined_iteration
        return pipelined_iteration(agent, env, obs)
    cfg = agent.config
    started = time.perf_counter()
    obs, transitions = collect(agent, env, obs, agent.behaviour)
    for t in transitions:
        agent.replay.add(*t)
    collected = env.num_envs * cfg.steps_per_iteration
    metrics: Metrics = {}
    if ready_to_learn(agent):
        learn_started = time.perf_counter()
        losses: dict[str, Tensor] = {}
        for _ in range(agent.loop_stats.take_updates(cfg.utd_ratio * collected)):
            losses = agent.update(agent.replay.sample(cfg.batch_size))
        metrics = {k: float(v) for k, v in losses.items()}  # one host sync per iteration, not per update
        agent.loop_stats.busy_seconds += time.perf_counter() - learn_started
    agent.loop_stats.wall_seconds += time.perf_counter() - started
    if metrics:
        metrics.update(agent.loop_stats.metrics())
    return obs, collected, metrics
