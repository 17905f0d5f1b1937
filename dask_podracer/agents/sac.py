"""Soft Actor-Critic (Haarnoja et al. 2018) with a batched critic ensemble and automatic entropy tuning.

One iteration (the loop of `offpolicy.OffPolicyAgent`, shared with DDPG, TD3 and DQN: loop.py):
the worker steps every env `steps_per_iteration` times with the current stochastic actor,
appending to an on-device replay buffer; the learner then does `utd_ratio` gradient updates
per env step collected. TD targets combine the target critics by `target_combine` (min:
clipped double Q; redq: the min over a random subset), the actor follows their
`actor_combine` (mean). With prioritised replay (`prioritized`) the critics' loss is importance-weighted
and the drawn rows' priorities become the mean over heads of |Q_i(s, a) - y|; the actor's loss is not weighted.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import Tensor, nn

from dask_podracer.agents import captured
from dask_podracer.agents.base import AlgorithmInfo, observation_width, register_algorithm, regress
from dask_podracer.agents.ensemble import ENSEMBLE_CHOICES, ENSEMBLE_TUNABLE, combine, fit_ensemble_state
from dask_podracer.agents.networks import CriticEnsemble, SquashedGaussianActor, soft_update
from dask_podracer.agents.offpolicy import (OffPolicyAgent, OffPolicyConfig, OffPolicyOptions, batch_example, check,
                                            td_target, uniform_action, validate_ensemble, validate_offpolicy,
                                            weighted_mean)


@dataclasses.dataclass(frozen=True)
class SACFields:
    """SAC's own hyper-parameters; `SACConfig` lists them between the shared off-policy ones."""

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
    """Critics in the ensemble, held as one batched module (a child may change it: see docs/algorithms.md)."""
    target_combine: str = "min"
    """How the target critics' values combine into the TD target: min, mean, redq or weighted."""
    actor_combine: str = "mean"
    """How the critics' values combine into the value the actor follows: mean, min, redq or weighted."""
    redq_subset: int = 2
    """Heads in the random subset that "redq" takes the minimum over."""
    combine_weight: float = 0.5
    """"weighted" combines weight * min + (1 - weight) * mean (an L-estimator over the sorted heads)."""


@dataclasses.dataclass(frozen=True)
class SACConfig(OffPolicyOptions, SACFields, OffPolicyConfig):
    """SAC's hyper-parameters: the shared off-policy ones (offpolicy.py) around `SACFields`."""

    utd_ratio: float = 0.5  # SAC's default of a shared field

    def __post_init__(self) -> None:
        validate_offpolicy(self)
        for name in ("actor_lr", "critic_lr", "alpha_lr", "init_alpha", "target_entropy_scale"):
            check(self, name, getattr(self, name) > 0, "> 0")
        validate_ensemble(self)


class SACAgent(OffPolicyAgent):
    algorithm: ClassVar[str] = "sac"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: SACConfig, device: torch.device) -> None:
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"sac needs a continuous (Box) action space, got {action_space}")
        obs_dim = observation_width(observation_space, self.algorithm)
        self.act_dim = act_dim = int(action_space.shape[0])
        super().__init__(config, device, obs_dim, act_dim, observation_space.shape)
        self.low = torch.as_tensor(action_space.low, dtype=torch.float32, device=device)
        self.high = torch.as_tensor(action_space.high, dtype=torch.float32, device=device)
        self.actor = SquashedGaussianActor(obs_dim, act_dim, config.hidden, action_space.low, action_space.high).to(device)
        self.critic = CriticEnsemble(obs_dim, act_dim, config.hidden, config.num_critics).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(config.init_alpha), device=device).log().requires_grad_(True)
        make_adam = captured.optimizer_maker(config.compile, device)
        self.actor_optim = make_adam(self.actor.parameters(), config.actor_lr)
        self.critic_optim = make_adam(self.critic.parameters(), config.critic_lr)
        self.alpha_optim = make_adam([self.log_alpha], config.alpha_lr)
        self.target_entropy = -config.target_entropy_scale * act_dim
        self.behaviour = self.actor
        self._captured: captured.CapturedUpdate | None = None
        if captured.use_capture(config.compile, device):
            self._bind_update(obs_dim, act_dim)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        self.loop.pause()  # in pipeline mode: the learner's owed updates first, then still parameters
        action, _ = self.actor(self.obs_norm(obs.to(self.device, torch.float32)), deterministic=deterministic)
        return action

    def random_action(self, n: int) -> Tensor:
        return uniform_action(self.low, self.high, n)

    def explore(self, obs: Tensor, behaviour: nn.Module) -> Tensor:
        if self._captured is not None and behaviour is self.actor and obs.shape[0] == self.config.num_envs:
            return self._captured_explore({"obs": obs})["action"]  # the sequential loop's worker, captured
        return behaviour(obs.to(self.device, torch.float32), deterministic=False)[0]

    def _bind_update(self, obs_dim: int, act_dim: int) -> None:
        """Captured mode: this agent's update becomes the process's captured SAC update for its shapes."""
        cfg = self.config
        key = ("sac", obs_dim, act_dim, cfg.hidden, cfg.num_critics, cfg.batch_size, cfg.num_envs,
               cfg.target_combine, cfg.actor_combine, cfg.redq_subset, cfg.prioritized, str(self.device))
        modes = (cfg.target_combine, cfg.actor_combine, cfg.redq_subset)
        captures = captured.bind(
            self, key, SAC_STATE, vars(self._hp()),
            {"actor_optim": cfg.actor_lr, "critic_optim": cfg.critic_lr, "alpha_optim": cfg.alpha_lr},
            {"update": lambda nets, hp, batch: sac_update(nets, hp, batch, *modes), "explore": sac_explore},
            batch_example(self.replay, cfg.batch_size, cfg.prioritized),
            {"explore": {"obs": torch.zeros(cfg.num_envs, obs_dim, device=self.device)}})
        self._captured, self._captured_explore = captures["update"], captures["explore"]
        self.behaviour = self.actor

    def _hp(self) -> SimpleNamespace:
        """The numbers the update reads (floats; tensors of the same values in captured mode)."""
        cfg = self.config
        return SimpleNamespace(gamma=cfg.gamma, tau=cfg.tau, target_entropy=self.target_entropy,
                               combine_weight=cfg.combine_weight)

    def target(self, batch: dict[str, Tensor]) -> Tensor:
        """The critics' regression target y `[B]` (`sac_target`)."""
        cfg = self.config
        return sac_target(self, self._hp(), batch, cfg.target_combine, cfg.redq_subset)

    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One gradient step of critics, actor and temperature on a sampled batch (`sac_update`)."""
        cfg = self.config
        if self._captured is not None:
            losses = self._captured(batch)
        else:
            losses = sac_update(self, self._hp(), batch, cfg.target_combine, cfg.actor_combine, cfg.redq_subset)
        self.updates += 1
        return losses

    def own_state(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optim": captured.saved_optimizer(self.actor_optim),
            "critic_optim": captured.saved_optimizer(self.critic_optim),
            "alpha_optim": captured.saved_optimizer(self.alpha_optim),
        }

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        """Also loads a parent whose ensemble has another size (`ensemble.fit_ensemble_state`)."""
        state = fit_ensemble_state(state, self.config.num_critics)
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"]))
        cfg = self.config
        captured.load_optimizer(self.actor_optim, state["actor_optim"], cfg.actor_lr)
        captured.load_optimizer(self.critic_optim, state["critic_optim"], cfg.critic_lr)
        captured.load_optimizer(self.alpha_optim, state["alpha_optim"], cfg.alpha_lr)


def sac_explore(nets: Any, hp: Any, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The worker's exploring actions `[num_envs, act_dim]` for (normalised) `obs` `[num_envs, obs_dim]`, as a
    captured step (`nets.actor` sampling)."""
    with torch.no_grad():
        return {"action": nets.actor(batch["obs"], deterministic=False)[0]}


SAC_STATE = ("actor", "critic", "critic_target", "log_alpha", "actor_optim", "critic_optim", "alpha_optim")
"""The agent's attributes an update reads and writes (a captured update's workspace)."""


@torch.no_grad()
def sac_target(nets: Any, hp: Any, batch: dict[str, Tensor], target_combine: str, redq_subset: int) -> Tensor:
    """The critics' regression target y `[B]`: r + gamma * (1 - terminated) * (combine_E Q_target_i(s', a') - alpha
    * log pi(a'|s')), a' ~ pi(.|s') and s' the observation the step led to (the final one at a time limit)."""
    alpha = nets.log_alpha.exp()
    next_action, next_log_prob = nets.actor(batch["next_obs"])
    target_q = combine(nets.critic_target(batch["next_obs"], next_action), target_combine, redq_subset,
                       hp.combine_weight)
    return td_target(batch["reward"], batch["terminated"], target_q - alpha * next_log_prob, hp.gamma)


def sac_update(nets: Any, hp: Any, batch: dict[str, Tensor], target_combine: str, actor_combine: str,
               redq_subset: int) -> dict[str, Tensor]:
    """One gradient step of critics, actor and temperature on a batch (`obs` `[B, obs_dim]`, `action`
    `[B, act_dim]`, `reward` and `terminated` `[B]`, `next_obs`, and `weight` `[B]` with prioritised replay).

    `nets` holds `SAC_STATE` (an agent, or a captured update's workspace); `hp` gamma, tau, target_entropy and
    combine_weight, as floats (eager) or 0-d tensors a captured graph reads. Returns detached scalar tensors and,
    with `weight`, the rows' TD errors `td_error` `[B]`.
    """
    alpha = nets.log_alpha.exp().detach()
    target = sac_target(nets, hp, batch, target_combine, redq_subset)
    q = nets.critic(batch["obs"], batch["action"])  # [E, B]
    weight = batch.get("weight")  # importance weights `[B]`, with prioritised replay
    critic_loss = 0.5 * weighted_mean((q - target).pow(2), weight, dim=1).sum()
    regress(nets.critic_optim, critic_loss)

    action, log_prob = nets.actor(batch["obs"])
    nets.critic.requires_grad_(False)  # the actor's loss must not move the critics
    q_pi = combine(nets.critic(batch["obs"], action), actor_combine, redq_subset, hp.combine_weight)
    nets.critic.requires_grad_(True)
    actor_loss = (alpha * log_prob - q_pi).mean()
    regress(nets.actor_optim, actor_loss)

    alpha_loss = -(nets.log_alpha * (log_prob.detach() + hp.target_entropy)).mean()
    regress(nets.alpha_optim, alpha_loss)

    soft_update(nets.critic_target, nets.critic, hp.tau)
    losses = {
        "critic_loss": critic_loss.detach(),
        "actor_loss": actor_loss.detach(),
        "alpha": alpha,
        "entropy": -log_prob.detach().mean(),
        "q_mean": q.detach().mean(),
    }
    if weight is not None:
        losses["td_error"] = (q - target).detach().abs().mean(0)  # mean over heads: the rows' priorities
    return losses


register_algorithm(AlgorithmInfo(
    name="sac",
    config_cls=SACConfig,
    factory=SACAgent,
    tunable=("actor_lr", "critic_lr", "alpha_lr", "tau", "gamma", "utd_ratio", *ENSEMBLE_TUNABLE),
    choices=ENSEMBLE_CHOICES,
    action_spaces=(gym.spaces.Box,),
))
