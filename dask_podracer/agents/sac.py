"""Soft Actor-Critic (Haarnoja et al. 2018) with a batched critic ensemble and automatic entropy tuning.

One iteration: the worker steps every env `steps_per_iteration` times with the
current stochastic actor, appending to an on-device replay buffer; the learner
then does `utd_ratio` gradient updates per env step collected.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import Tensor

from dask_podracer.agents.base import AlgorithmInfo, Metrics, adam, register_algorithm, set_learning_rate
from dask_podracer.agents.networks import CriticEnsemble, SquashedGaussianActor, soft_update
from dask_podracer.agents.replay import ReplayBuffer
from dask_podracer.envs import VecEnv


@dataclasses.dataclass(frozen=True)
class SACConfig:
    num_envs: int = 4
    """Envs stepped together by the worker."""
    steps_per_iteration: int = 1
    """Env steps (per env) collected before each round of updates."""
    utd_ratio: float = 0.5
    """Gradient updates per env step collected (summed over envs)."""
    batch_size: int = 256
    """Transitions per gradient update."""
    buffer_size: int = 100_000
    """Replay capacity in transitions."""
    learning_starts: int = 500
    """Env steps of uniformly random actions before the first update."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.01
    """Polyak rate of the target critics."""
    actor_lr: float = 1e-3
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critics."""
    alpha_lr: float = 1e-3
    """Adam learning rate of the entropy temperature."""
    init_alpha: float = 0.1
    """Entropy temperature at the start of training."""
    target_entropy_scale: float = 1.0
    """Target entropy is -scale * action_dim."""
    hidden: tuple[int, ...] = (128, 128)
    """Hidden layer widths of actor and critics."""
    num_critics: int = 2
    """Critics in the ensemble; TD targets use the minimum over them."""
    keep_replay: bool = True
    """Save the replay buffer in checkpoints, so a child segment continues from its parent's data."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        _check(self, "num_envs", self.num_envs >= 1, ">= 1")
        _check(self, "steps_per_iteration", self.steps_per_iteration >= 1, ">= 1")
        _check(self, "utd_ratio", self.utd_ratio > 0, "> 0")
        _check(self, "batch_size", self.batch_size >= 1, ">= 1")
        _check(self, "buffer_size", self.buffer_size >= self.batch_size, ">= batch_size")
        _check(self, "learning_starts", self.learning_starts >= 0, ">= 0")
        _check(self, "gamma", 0 <= self.gamma <= 1, "in [0, 1]")
        _check(self, "tau", 0 < self.tau <= 1, "in (0, 1]")
        for name in ("actor_lr", "critic_lr", "alpha_lr", "init_alpha", "target_entropy_scale"):
            _check(self, name, getattr(self, name) > 0, "> 0")
        _check(self, "hidden", len(self.hidden) >= 1 and min(self.hidden) >= 1, "a non-empty list of positive widths")
        _check(self, "num_critics", self.num_critics >= 1, ">= 1")


def _check(config: Any, field: str, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{field} must be {allowed}, got {getattr(config, field)!r}")


class SACAgent:
    algorithm: ClassVar[str] = "sac"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: SACConfig, device: torch.device) -> None:
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"sac needs a continuous (Box) action space, got {action_space}")
        self.config = config
        self.device = device
        obs_dim = int(observation_space.shape[0])
        self.act_dim = act_dim = int(action_space.shape[0])
        self.low = torch.as_tensor(action_space.low, dtype=torch.float32, device=device)
        self.high = torch.as_tensor(action_space.high, dtype=torch.float32, device=device)
        self.actor = SquashedGaussianActor(obs_dim, act_dim, config.hidden, action_space.low, action_space.high).to(device)
        self.critic = CriticEnsemble(obs_dim, act_dim, config.hidden, config.num_critics).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(config.init_alpha), device=device).log().requires_grad_(True)
        self.actor_optim = adam(self.actor.parameters(), config.actor_lr)
        self.critic_optim = adam(self.critic.parameters(), config.critic_lr)
        self.alpha_optim = adam([self.log_alpha], config.alpha_lr)
        self.target_entropy = -config.target_entropy_scale * act_dim
        self.replay = ReplayBuffer(config.buffer_size, obs_dim, act_dim, device)
        self.env_steps = 0
        self.updates = 0
        self._update_credit = 0.0  # fractional updates carried between iterations

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        action, _ = self.actor(obs.to(self.device, torch.float32), deterministic=deterministic)
        return action

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        cfg = self.config
        collected = 0
        for _ in range(cfg.steps_per_iteration):
            if self.env_steps < cfg.learning_starts:
                action = self.low + (self.high - self.low) * torch.rand(env.num_envs, self.act_dim, device=self.device)
            else:
                action = self.act(obs, deterministic=False)
            next_obs, reward, terminated, _truncated, info = env.step(action)
            self.replay.add(obs, action, reward, info["final_obs"], terminated)
            obs = next_obs
            collected += env.num_envs
        self.env_steps += collected
        metrics: Metrics = {}
        if self.env_steps >= cfg.learning_starts and self.replay.size >= cfg.batch_size:
            self._update_credit += cfg.utd_ratio * collected
            n_updates = int(self._update_credit)
            self._update_credit -= n_updates
            losses: dict[str, Tensor] = {}
            for _ in range(n_updates):
                losses = self.update(self.replay.sample(cfg.batch_size))
            metrics = {k: float(v) for k, v in losses.items()}  # one host sync per iteration, not per update
        return obs, collected, metrics

    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One gradient step of critics, actor and temperature on a sampled batch."""
        cfg = self.config
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_log_prob = self.actor(batch["next_obs"])
            target_q = self.critic_target(batch["next_obs"], next_action).min(dim=0).values
            target = batch["reward"] + cfg.gamma * (1 - batch["terminated"]) * (target_q - alpha * next_log_prob)
        q = self.critic(batch["obs"], batch["action"])  # [E, B]
        critic_loss = 0.5 * (q - target).pow(2).mean(dim=1).sum()
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optim.step()

        action, log_prob = self.actor(batch["obs"])
        self.critic.requires_grad_(False)  # the actor's loss must not move the critics
        q_pi = self.critic(batch["obs"], action).mean(dim=0)
        self.critic.requires_grad_(True)
        actor_loss = (alpha * log_prob - q_pi).mean()
        self.actor_optim.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optim.step()

        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_optim.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_optim.step()

        soft_update(self.critic_target, self.critic, cfg.tau)
        self.updates += 1
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "entropy": -log_prob.detach().mean(),
            "q_mean": q.detach().mean(),
        }

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "alpha_optim": self.alpha_optim.state_dict(),
            "counters": {"env_steps": self.env_steps, "updates": self.updates},
        }
        if self.config.keep_replay:
            state["replay"] = self.replay.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"]))
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        self.alpha_optim.load_state_dict(state["alpha_optim"])
        cfg = self.config
        set_learning_rate(self.actor_optim, cfg.actor_lr)
        set_learning_rate(self.critic_optim, cfg.critic_lr)
        set_learning_rate(self.alpha_optim, cfg.alpha_lr)
        self.env_steps = int(state["counters"]["env_steps"])
        self.updates = int(state["counters"]["updates"])
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])


register_algorithm(AlgorithmInfo(
    name="sac",
    config_cls=SACConfig,
    factory=SACAgent,
    tunable=("actor_lr", "critic_lr", "alpha_lr", "tau", "gamma", "utd_ratio"),
))
