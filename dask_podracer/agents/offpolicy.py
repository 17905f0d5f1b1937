"""What the off-policy algorithms (DDPG, TD3, SAC, the DQN family) share: an agent base, config bases, pure functions.

- `OffPolicyAgent`: the replay buffer, the normalisers, the step and update counters, the loop
  that runs worker and learner (`loop.SequentialLoop`, or `pipeline.PipelinedLoop` with
  `config.pipeline`), and the checkpoint layout around each algorithm's own networks.
- `OffPolicyConfig` and `OffPolicyOptions`: the hyper-parameters every off-policy config has,
  with their defaults and docstrings written once, and their checks (`validate_offpolicy`).
- Pure functions of tensors: TD targets, importance-weighted means (prioritised replay), exploration noise,
  TD3's target smoothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from dask_podracer.agents.base import MOST_UPDATES_PER_TRANSITION, Metrics
from dask_podracer.agents.captured import COMPILE_MODES
from dask_podracer.agents.ensemble import COMBINE_MODES
from dask_podracer.agents.loop import SequentialLoop
from dask_podracer.agents.normalization import ObservationNormalizer, RewardNormalizer
from dask_podracer.agents.pipeline import PipelinedLoop
from dask_podracer.agents.prioritized_replay import PrioritizedReplayBuffer
from dask_podracer.agents.replay import ReplayBuffer
from dask_podracer.envs import VecEnv

# -- configs -------------------------------------------------------------------------------
#
# An algorithm's config is three dataclasses, its own fields between the shared ones:
#
#     class SACConfig(OffPolicyOptions, SACFields, OffPolicyConfig)
#
# A dataclass takes its bases' fields from the last base to the first, so the fields (and the tables
# docs/configuration.md and docs/algorithms.md generate from them) read: OffPolicyConfig's,
# the algorithm's own, OffPolicyOptions'. The config's own body only restates a shared field whose
# default (or docstring) differs; a restated field keeps its place.


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    """The fields an off-policy config opens with: how the worker collects and the learner samples. The
    defaults are DDPG's; SAC and the DQN family restate the ones they change."""

    num_envs: int = 4
    """Envs stepped together by the worker."""
    steps_per_iteration: int = 1
    """Env steps (per env) collected before each round of updates."""
    utd_ratio: float = 1.0
    """Gradient updates per env step collected (summed over envs)."""
    batch_size: int = 256
    """Transitions per gradient update."""
    buffer_size: int = 100_000
    """Replay capacity in transitions (at least batch_size and num_envs * steps_per_iteration)."""
    learning_starts: int = 500
    """Env steps of uniformly random actions before the first update."""
    gamma: float = 0.99
    """Discount factor."""


@dataclasses.dataclass(frozen=True)
class OffPolicyOptions:
    """The fields an off-policy config ends with: normalisation, what a checkpoint keeps, pipeline mode,
    prioritised replay."""

    normalize_observations: bool = False
    """Feed the networks observations normalised by a running mean and variance of those collected (kept by the
    agent, carried in checkpoints; the replay buffer keeps them raw)."""
    normalize_rewards: bool = False
    """Scale rewards by the running standard deviation of the discounted return (no shift; kept by the agent,
    carried in checkpoints; the replay buffer keeps them raw, reported returns stay raw)."""
    keep_replay: bool = True
    """Save the replay buffer in checkpoints, so a child segment continues from its parent's data."""
    pipeline: bool = False
    """Run the worker (acting with a snapshot of the actor) ahead of the learner, a thread of its own."""
    max_policy_lag: int = 64
    """Pipeline mode: how stale the acting snapshot may be, in updates owed for the data so far that it lacks."""
    prioritized: bool = False
    """Prioritised replay (Schaul et al. 2016): draw transitions in proportion to priority^alpha, importance-weight
    the critic's (or Q-network's) loss and set the drawn rows' priorities to |TD error| (docs/algorithms.md)."""
    priority_alpha: float = 0.6
    """Prioritised replay: how strongly priorities skew the draw (0: uniform, 1: in proportion to |TD error|)."""
    priority_beta_start: float = 0.4
    """Prioritised replay: exponent of the importance weights at the first update (1: the draw's bias fully
    corrected)."""
    priority_beta_updates: int = 100_000
    """Prioritised replay: learner updates over which the weights' exponent grows linearly to 1."""
    priority_epsilon: float = 1e-6
    """Prioritised replay: added to |TD error|, so no transition's priority is 0."""
    compile: str = "auto"
    """Captured learner update (agents/captured.py): "auto" (the default) replays each update as one CUDA graph on
    CUDA and runs it eagerly on a CPU, where compiling does not pay; "on" captures everywhere (torch.compile on a
    CPU); "off" is eager everywhere (the reference)."""


def check(config: Any, field: str, ok: bool, allowed: str) -> None:
    """Raise ValueError("<field> must be <allowed>, got <value>") unless `ok`."""
    if not ok:
        raise ValueError(f"{field} must be {allowed}, got {getattr(config, field)!r}")


def validate_offpolicy(cfg: Any) -> None:
    """Checks of the fields every off-policy config has: the shared ones, and the `tau` and `hidden` each algorithm
    declares with its own meaning (normalises `hidden` to a tuple)."""
    object.__setattr__(cfg, "hidden", tuple(int(h) for h in cfg.hidden))
    check(cfg, "num_envs", cfg.num_envs >= 1, ">= 1")
    check(cfg, "steps_per_iteration", cfg.steps_per_iteration >= 1, ">= 1")
    check(cfg, "utd_ratio", 0 < cfg.utd_ratio <= MOST_UPDATES_PER_TRANSITION,
          f"in (0, {MOST_UPDATES_PER_TRANSITION:g}] (gradient updates per transition)")
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
    check(cfg, "priority_alpha", cfg.priority_alpha >= 0, ">= 0")
    check(cfg, "priority_beta_start", 0 <= cfg.priority_beta_start <= 1, "in [0, 1]")
    check(cfg, "priority_beta_updates", cfg.priority_beta_updates >= 1, ">= 1")
    check(cfg, "priority_epsilon", cfg.priority_epsilon > 0, "> 0")
    check(cfg, "compile", cfg.compile in COMPILE_MODES, f"one of {COMPILE_MODES}")


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


def make_replay(config: Any, obs_dim: int, act_dim: int, device: torch.device) -> ReplayBuffer:
    """The agent's replay buffer: uniform, or prioritised with `config.prioritized`."""
    if not config.prioritized:
        return ReplayBuffer(config.buffer_size, obs_dim, act_dim, device)
    return PrioritizedReplayBuffer(config.buffer_size, obs_dim, act_dim, device, config.priority_alpha,
                                   config.priority_beta_start, config.priority_beta_updates,
                                   config.priority_epsilon)


def weighted_mean(x: Tensor, weight: Tensor | None, dim: int = -1) -> Tensor:
    """The mean of `x` over `dim` (the batch's), each sample times its importance weight `[B]` if one is given
    (prioritised replay). Without weights, exactly `x.mean(dim)`."""
    return x.mean(dim) if weight is None else (x * weight).mean(dim)


def batch_example(replay: ReplayBuffer, batch_size: int, prioritized: bool) -> dict[str, Tensor]:
    """Zeros shaped like a sampled batch (what a captured update reads): the replay's fields, and the importance
    weights `[B]` with prioritised replay."""
    example = {k: torch.zeros((batch_size, *v.shape[1:]), dtype=v.dtype, device=v.device)
               for k, v in replay.data.items()}
    if prioritized:
        example["weight"] = torch.ones(batch_size, device=replay.device)
    return example


# -- the agent base ------------------------------------------------------------------------

class OffPolicyAgent:
    """What every off-policy agent holds and does alike (see the module docstring).

    A subclass checks its action space, calls this `__init__`, builds its networks and names the
    one the worker acts with (`behaviour`); it provides `act` (which pauses the loop first),
    `random_action`, `explore` and `update` (`loop.OffPolicyLearner`), and its own part of a
    checkpoint: `own_state` and `load_own_state`.
    """

    algorithm: ClassVar[str]
    behaviour: nn.Module

    def __init__(self, config: Any, device: torch.device, obs_dim: int, act_dim: int,
                 obs_shape: tuple[int, ...] | None = None) -> None:
        self.config = config
        self.device = device
        self.replay = make_replay(config, obs_dim, act_dim, device)  # rows of flat observations
        # every observation reaches the networks through obs_norm, which flattens an `obs_shape` Box to `obs_dim`
        self.obs_norm = ObservationNormalizer(obs_dim, config.normalize_observations, device, obs_shape)
        self.reward_norm = RewardNormalizer(config.num_envs, config.gamma, config.normalize_rewards, device)
        self.env_steps = 0
        self.updates = 0
        self.loop: SequentialLoop = PipelinedLoop() if config.pipeline else SequentialLoop()

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        """Collect and learn as the loop says (`loop.SequentialLoop`, `pipeline.PipelinedLoop`)."""
        return self.loop.train_iteration(self, env, obs)

    def finish(self) -> None:
        """`Agent.finish`: in pipeline mode the learner makes the updates it owes, and its thread ends."""
        self.loop.finish()

    def own_state(self) -> dict[str, Any]:
        """This algorithm's entries of a checkpoint (networks, optimizers, ...), in the order they are saved."""
        raise NotImplementedError

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `own_state` saved, then re-apply this agent's learning rates (a child segment's win)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """`own_state()`, then what every off-policy checkpoint ends with: the counters, the normalisers'
        statistics and, with `keep_replay`, the replay buffer."""
        self.loop.pause()  # in pipeline mode the learner's owed updates first: a checkpoint of still parameters
        state = self.own_state()
        # the fraction of an update earned and not yet made: a child segment owes it on (utd_ratio * num_envs < 1
        # earns one update over several steps, and a lineage of short segments that each dropped it never updated)
        state["counters"] = {"env_steps": self.env_steps, "updates": self.updates,
                             "update_credit": self.loop.stats.credit}
        self.obs_norm.save_into(state)
        self.reward_norm.save_into(state)
        if self.config.keep_replay:
            state["replay"] = self.replay.state_dict()
            if isinstance(self.replay, PrioritizedReplayBuffer):  # may be above every row's: a row's priority falls
                state["counters"]["max_priority"] = float(self.replay.max_priority)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a `state_dict()`: the normalisers' statistics (refusing the other observation setting), then
        `load_own_state`, the counters (the fraction of an update earned, and with prioritised replay the largest
        priority seen) and the replay buffer if the checkpoint has one."""
        self.finish()  # no learner thread may update the parameters being replaced; the next iteration starts one
        self.obs_norm.load_from(state, self.algorithm)  # refuses a checkpoint of the other setting, before any change
        self.reward_norm.load_from(state)
        self.load_own_state(state)
        self.env_steps = int(state["counters"]["env_steps"])
        self.updates = int(state["counters"]["updates"])
        self.loop.stats.credit = float(state["counters"].get("update_credit", 0.0))  # older checkpoints: none
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
            if isinstance(self.replay, PrioritizedReplayBuffer) and "max_priority" in state["counters"]:
                # new rows get the largest priority seen so far, not only the largest the rows kept now hold
                saved = torch.tensor(float(state["counters"]["max_priority"]), device=self.device)
                self.replay.max_priority = torch.maximum(self.replay.max_priority, saved)
