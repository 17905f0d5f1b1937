"""DDPG (Lillicrap et al. 2016): a deterministic actor, a Q critic, Gaussian exploration, Polyak targets.

TD3 (td3.py) is this agent with three of its knobs turned: an ensemble of critics whose
minimum is the TD target (`num_critics=2`), target policy smoothing (`target_noise`) and
delayed actor and target updates (`policy_delay=2`). The worker/learner loop is
`offpolicy.offpolicy_iteration`, shared with SAC and DQN.

One update, on a batch from the replay buffer:
    a'     = mu_target(s') [+ clip(N(0, target_noise), -target_noise_clip, target_noise_clip)]
    y      = r + gamma * (1 - terminated) * combine_E Q_target_i(s', a')   (target_combine)
    critic: sum_i 0.5 * E[(Q_i(s, a) - y)^2]
    every policy_delay updates:
        actor: -E[combine_E Q_i(s, mu(s))]   (actor_combine)
        targets <- Polyak(tau)
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import Tensor, nn

from dask_podracer.agents.base import AlgorithmInfo, Metrics, adam, register_algorithm, set_learning_rate
from dask_podracer.agents.ensemble import ENSEMBLE_CHOICES, ENSEMBLE_TUNABLE, combine, fit_ensemble_state
from dask_podracer.agents.networks import CriticEnsemble, DeterministicActor, soft_update
from dask_podracer.agents.normalization import ObservationNormalizer, RewardNormalizer
from dask_podracer.agents.offpolicy import (LoopStats, check, gaussian_explore, offpolicy_iteration, pause, regress,
                                            smoothed_target_action, td_target, uniform_action, validate_ensemble,
                                            validate_offpolicy)
from dask_podracer.agents.replay import ReplayBuffer
from dask_podracer.envs import VecEnv


@dataclasses.dataclass(frozen=True)
class DDPGConfig:
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
    tau: float = 0.005
    """Polyak rate of the target actor and critics."""
    actor_lr: float = 1e-3
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critics."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of actor and critics."""
    exploration_noise: float = 0.1
    """Std of the Gaussian added to the worker's actions, in half-action-range units."""
    num_critics: int = 1
    """Critics in the ensemble, held as one batched module (a child may change it: see docs/algorithms.md)."""
    target_combine: str = "min"
    """How the target critics' values combine into the TD target: min, mean, redq or weighted."""
    actor_combine: str = "mean"
    """How the critics' values combine into the value the actor follows: mean, min, redq or weighted."""
    redq_subset: int = 2
    """Heads in the random subset that "redq" takes the minimum over."""
    combine_weight: float = 0.5
    """"weighted" combines weight * min + (1 - weight) * mean (an L-estimator over the sorted heads)."""
    target_noise: float = 0.0
    """Std of TD3's target policy smoothing noise, in half-action-range units (0: none, as in DDPG)."""
    target_noise_clip: float = 0.5
    """Target smoothing noise is clipped to +-this, in half-action-range units."""
    policy_delay: int = 1
    """Critic updates per actor (and target) update."""
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

    def __post_init__(self) -> None:
        validate_offpolicy(self)
        for name in ("actor_lr", "critic_lr"):
            check(self, name, getattr(self, name) > 0, "> 0")
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            check(self, name, getattr(self, name) >= 0, ">= 0")
        validate_ensemble(self)
        check(self, "policy_delay", self.policy_delay >= 1, ">= 1")


class DDPGAgent:
    """A deterministic-policy worker + learner (DDPG, and TD3 through its config); see the module docstring."""

    algorithm: ClassVar[str] = "ddpg"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: DDPGConfig, device: torch.device) -> None:
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"{self.algorithm} needs a continuous (Box) action space, got {action_space}")
        self.config = config
        self.device = device
        obs_dim = int(observation_space.shape[0])
        act_dim = int(action_space.shape[0])
        self.low = torch.as_tensor(action_space.low, dtype=torch.float32, device=device)
        self.high = torch.as_tensor(action_space.high, dtype=torch.float32, device=device)
        self.actor = DeterministicActor(obs_dim, act_dim, config.hidden, action_space.low, action_space.high).to(device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = CriticEnsemble(obs_dim, act_dim, config.hidden, config.num_critics).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optim = adam(self.actor.parameters(), config.actor_lr)
        self.critic_optim = adam(self.critic.parameters(), config.critic_lr)
        self.replay = ReplayBuffer(config.buffer_size, obs_dim, act_dim, device)
        self.obs_norm = ObservationNormalizer(obs_dim, config.normalize_observations, device)
        self.reward_norm = RewardNormalizer(config.num_envs, config.gamma, config.normalize_rewards, device)
        self.behaviour = self.actor
        self.env_steps = 0
        self.updates = 0
        self.loop_stats = LoopStats()
        self._last_actor_loss = torch.zeros((), device=device)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        pause(self)  # in pipeline mode: the learner's owed updates first, then still parameters
        obs = self.obs_norm(obs.to(self.device, torch.float32))
        return self.actor(obs) if deterministic else self.explore(obs, self.actor)

    def random_action(self, n: int) -> Tensor:
        return uniform_action(self.low, self.high, n)

    def explore(self, obs: Tensor, behaviour: nn.Module) -> Tensor:
        return gaussian_explore(behaviour(obs.to(self.device, torch.float32)), self.config.exploration_noise,
                                self.low, self.high)

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        return offpolicy_iteration(self, env, obs)

    def _combine(self, q: Tensor, how: str) -> Tensor:
        return combine(q, how, self.config.redq_subset, self.config.combine_weight)

    @torch.no_grad()
    def target(self, batch: dict[str, Tensor]) -> Tensor:
        """The critics' regression target y `[B]`: r + gamma * (1 - terminated) * combine_E Q_target_i(s', a'),
        a' the target actor's action, smoothed by clipped noise if `target_noise` > 0 (TD3)."""
        cfg = self.config
        next_action = self.actor_target(batch["next_obs"])
        if cfg.target_noise > 0:
            next_action = smoothed_target_action(next_action, cfg.target_noise, cfg.target_noise_clip,
                                                 self.low, self.high)
        target_q = self._combine(self.critic_target(batch["next_obs"], next_action), cfg.target_combine)
        return td_target(batch["reward"], batch["terminated"], target_q, cfg.gamma)

    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One critic step, and every `policy_delay` updates an actor step and the target updates."""
        cfg = self.config
        target = self.target(batch)
        q = self.critic(batch["obs"], batch["action"])  # [E, B]
        critic_loss = 0.5 * (q - target).pow(2).mean(dim=1).sum()
        regress(self.critic_optim, critic_loss)
        self.updates += 1
        if self.updates % cfg.policy_delay == 0:
            self.critic.requires_grad_(False)  # the actor's loss must not move the critics
            actor_loss = -self._combine(self.critic(batch["obs"], self.actor(batch["obs"])), cfg.actor_combine).mean()
            self.critic.requires_grad_(True)
            regress(self.actor_optim, actor_loss)
            soft_update(self.actor_target, self.actor, cfg.tau)
            soft_update(self.critic_target, self.critic, cfg.tau)
            self._last_actor_loss = actor_loss.detach()
        return {"critic_loss": critic_loss.detach(), "actor_loss": self._last_actor_loss, "q_mean": q.detach().mean()}

    def state_dict(self) -> dict[str, Any]:
        pause(self)
        state: dict[str, Any] = {
            "actor": self.actor.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "counters": {"env_steps": self.env_steps, "updates": self.updates},
        }
        self.obs_norm.save_into(state)
        self.reward_norm.save_into(state)
        if self.config.keep_replay:
            state["replay"] = self.replay.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Also loads a parent whose ensemble has another size (`ensemble.fit_ensemble_state`)."""
        pause(self, stop_learner=True)
        state = fit_ensemble_state(state, self.config.num_critics)
        self.obs_norm.load_from(state, self.algorithm)
        self.reward_norm.load_from(state)
        for name in ("actor", "actor_target", "critic", "critic_target", "actor_optim", "critic_optim"):
            getattr(self, name).load_state_dict(state[name])
        set_learning_rate(self.actor_optim, self.config.actor_lr)
        set_learning_rate(self.critic_optim, self.config.critic_lr)
        self.env_steps = int(state["counters"]["env_steps"])
        self.updates = int(state["counters"]["updates"])
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])


register_algorithm(AlgorithmInfo(
    name="ddpg",
    config_cls=DDPGConfig,
    factory=DDPGAgent,
    tunable=("actor_lr", "critic_lr", "tau", "gamma", "utd_ratio", "exploration_noise", *ENSEMBLE_TUNABLE),
    choices=ENSEMBLE_CHOICES,
))
