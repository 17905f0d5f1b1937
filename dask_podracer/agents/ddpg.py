"""DDPG (Lillicrap et al. 2016): a deterministic actor, a Q critic, Gaussian exploration, Polyak targets.

TD3 (td3.py) is this agent with three of its knobs turned: an ensemble of critics whose
minimum is the TD target (`num_critics=2`), target policy smoothing (`target_noise`) and
delayed actor and target updates (`policy_delay=2`). What it shares with SAC and the DQN
family (replay buffer, worker/learner loop, checkpoint layout) is `offpolicy.OffPolicyAgent`.

One update, on a batch from the replay buffer:
    a'     = mu_target(s') [+ clip(N(0, target_noise), -target_noise_clip, target_noise_clip)]
    y      = r + gamma * (1 - terminated) * combine_E Q_target_i(s', a')   (target_combine)
    critic: sum_i 0.5 * E[(Q_i(s, a) - y)^2]   (prioritised replay: E[w * ...], priorities mean_i |Q_i - y|)
    every policy_delay updates:
        actor: -E[combine_E Q_i(s, mu(s))]   (actor_combine)
        targets <- Polyak(tau)

With `[actors]` DDPG and TD3 are Ape-X (Horgan et al. 2018; `apex.py`): actors on the rungs of a ladder of Gaussian
noise scales (`apex_noise_largest` to `apex_noise_smallest`) send chunks of transitions with initial priorities, the
mean over heads of |Q_i(s, a) - y| under their own networks, and this agent, as the learner, stores them in its
replay buffer and makes the same updates as above.
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

from dask_podracer.agents import apex, captured
from dask_podracer.agents.base import AlgorithmInfo, observation_width, register_algorithm, regress
from dask_podracer.agents.ensemble import ENSEMBLE_CHOICES, ENSEMBLE_TUNABLE, combine, fit_ensemble_state
from dask_podracer.agents.ladders import noise_ladder
from dask_podracer.agents.networks import CriticEnsemble, DeterministicActor, soft_update
from dask_podracer.agents.offpolicy import (OffPolicyConfig, OffPolicyOptions, batch_example, check, gaussian_explore,
                                            smoothed_target_action, td_target, uniform_action, validate_ensemble,
                                            validate_offpolicy, weighted_mean)


@dataclasses.dataclass(frozen=True)
class DDPGFields:
    """DDPG's own hyper-parameters; `DDPGConfig` lists them between the shared off-policy ones."""

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
    apex_noise_largest: float = 0.5
    """Ape-X (`[actors]`): the top of the actors' ladder of exploration noise scales (half-action-range units);
    actor i of N acts with largest * (smallest / largest)^(i / (N - 1)), a lone actor with this."""
    apex_noise_smallest: float = 0.02
    """Ape-X (`[actors]`): the bottom of the ladder, the last actor's noise scale (half-action-range units)."""
    apex_send_steps: int = 20
    """Ape-X (`[actors]`): env steps (per env) an actor collects before it computes their initial priorities and
    sends them to the learner."""


@dataclasses.dataclass(frozen=True)
class DDPGConfig(OffPolicyOptions, DDPGFields, OffPolicyConfig):
    """DDPG's hyper-parameters: the shared off-policy ones (offpolicy.py) around `DDPGFields`."""

    def __post_init__(self) -> None:
        validate_offpolicy(self)
        for name in ("actor_lr", "critic_lr"):
            check(self, name, getattr(self, name) > 0, "> 0")
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            check(self, name, getattr(self, name) >= 0, ">= 0")
        validate_ensemble(self)
        check(self, "policy_delay", self.policy_delay >= 1, ">= 1")
        check(self, "apex_noise_smallest", self.apex_noise_smallest > 0, "> 0 (the ladder is geometric)")
        check(self, "apex_noise_largest", self.apex_noise_largest >= self.apex_noise_smallest,
              f">= apex_noise_smallest (= {self.apex_noise_smallest!r})")
        check(self, "apex_send_steps", self.apex_send_steps >= 1, ">= 1")


class DDPGAgent(apex.ApexAgent):
    """A deterministic-policy worker + learner (DDPG, and TD3 through its config); see the module docstring. As Ape-X
    actors, on the rungs of a ladder of noise scales (`apex.ApexAgent`)."""

    algorithm: ClassVar[str] = "ddpg"
    policy_parts: ClassVar[tuple[str, ...]] = ("actor", "actor_target", "critic", "critic_target")  # y needs all
    rung_name: ClassVar[str] = "noise_scale"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: DDPGConfig, device: torch.device) -> None:
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"{self.algorithm} needs a continuous (Box) action space, got {action_space}")
        obs_dim = observation_width(observation_space, self.algorithm)
        act_dim = int(action_space.shape[0])
        super().__init__(config, device, obs_dim, act_dim, observation_space.shape)
        self.low = torch.as_tensor(action_space.low, dtype=torch.float32, device=device)
        self.high = torch.as_tensor(action_space.high, dtype=torch.float32, device=device)
        self.actor = DeterministicActor(obs_dim, act_dim, config.hidden, action_space.low, action_space.high).to(device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = CriticEnsemble(obs_dim, act_dim, config.hidden, config.num_critics).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        make_adam = captured.optimizer_maker(config.compile, device)
        self.actor_optim = make_adam(self.actor.parameters(), config.actor_lr)
        self.critic_optim = make_adam(self.critic.parameters(), config.critic_lr)
        self.behaviour = self.actor
        self._last_actor_loss = torch.zeros((), device=device)
        self._captured: dict[bool, captured.CapturedUpdate] | None = None
        if captured.use_capture(config.compile, device):
            self._bind_update(obs_dim, act_dim)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        self.loop.pause()  # in pipeline mode: the learner's owed updates first, then still parameters
        obs = self.obs_norm(obs.to(self.device, torch.float32))
        return self.actor(obs) if deterministic else self.explore(obs, self.actor)

    def random_action(self, n: int) -> Tensor:
        return uniform_action(self.low, self.high, n)

    def explore(self, obs: Tensor, behaviour: nn.Module) -> Tensor:
        """The actor's actions plus Gaussian noise of `exploration_noise`, or of an Ape-X actor's rung."""
        if self.rung is None and self._captured is not None and behaviour is self.actor \
                and obs.shape[0] == self.config.num_envs:
            return self._captured_explore({"obs": obs})["action"]  # the sequential loop's worker, captured
        noise = self.config.exploration_noise if self.rung is None else self.rung
        return gaussian_explore(behaviour(obs.to(self.device, torch.float32)), noise, self.low, self.high)

    def ladder(self, workers: int) -> list[float]:
        return noise_ladder(workers, self.config.apex_noise_largest, self.config.apex_noise_smallest)

    @torch.no_grad()
    def initial_priorities(self, batch: dict[str, Tensor]) -> Tensor:
        """Mean over heads of |Q_i(s, a) - y|, y `ddpg_target` (TD3: its smoothed, combined target): the priorities
        `ddpg_update` gives the rows it draws."""
        return (self.critic(batch["obs"], batch["action"]) - self.target(batch)).abs().mean(0)

    def _hp(self) -> SimpleNamespace:
        """The numbers the update reads (floats; tensors of the same values in captured mode)."""
        cfg = self.config
        return SimpleNamespace(gamma=cfg.gamma, tau=cfg.tau, combine_weight=cfg.combine_weight,
                               target_noise=cfg.target_noise, target_noise_clip=cfg.target_noise_clip,
                               exploration_noise=cfg.exploration_noise)

    def _modes(self) -> tuple[bool, str, str, int]:
        """What `ddpg_update` branches on besides the actor step (part of a captured update's key)."""
        cfg = self.config
        return cfg.target_noise > 0, cfg.target_combine, cfg.actor_combine, cfg.redq_subset

    def _bind_update(self, obs_dim: int, act_dim: int) -> None:
        """Captured mode: two captured updates of the process's cache for these shapes, the critic's alone and the
        critic's with the actor's and the targets' (every `policy_delay` updates)."""
        cfg = self.config
        modes = self._modes()
        example = batch_example(self.replay, cfg.batch_size, cfg.prioritized)
        lrs = {"actor_optim": cfg.actor_lr, "critic_optim": cfg.critic_lr}
        key = ("ddpg", obs_dim, act_dim, cfg.hidden, cfg.num_critics, cfg.batch_size, cfg.num_envs, *modes,
               cfg.prioritized, str(self.device))
        steps = {step: lambda nets, hp, batch, step=step: ddpg_update(nets, hp, batch, step, *modes)
                 for step in (False, True)}
        captures = captured.bind(self, key, DDPG_STATE, vars(self._hp()), lrs, {**steps, "explore": ddpg_explore},
                                 example, {"explore": {"obs": torch.zeros(cfg.num_envs, obs_dim, device=self.device)}})
        self._captured = {step: captures[step] for step in (False, True)}
        self._captured_explore = captures["explore"]
        self.behaviour = self.actor

    def target(self, batch: dict[str, Tensor]) -> Tensor:
        """The critics' regression target y `[B]` (`ddpg_target`)."""
        smooth, target_combine, _, redq_subset = self._modes()
        return ddpg_target(self, self._hp(), batch, smooth, target_combine, redq_subset)

    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One critic step, and every `policy_delay` updates an actor step and the target updates (`ddpg_update`)."""
        actor_step = (self.updates + 1) % self.config.policy_delay == 0
        if self._captured is not None:
            losses = self._captured[actor_step](batch)
        else:
            losses = ddpg_update(self, self._hp(), batch, actor_step, *self._modes())
        self.updates += 1
        if actor_step:
            self._last_actor_loss = losses["actor_loss"]
        return {"critic_loss": losses["critic_loss"], "actor_loss": self._last_actor_loss,
                **{k: v for k, v in losses.items() if k not in ("critic_loss", "actor_loss")}}

    def own_state(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optim": captured.saved_optimizer(self.actor_optim),
            "critic_optim": captured.saved_optimizer(self.critic_optim),
        }

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        """Also loads a parent whose ensemble has another size (`ensemble.fit_ensemble_state`)."""
        state = fit_ensemble_state(state, self.config.num_critics)
        for name in ("actor", "actor_target", "critic", "critic_target"):
            getattr(self, name).load_state_dict(state[name])
        captured.load_optimizer(self.actor_optim, state["actor_optim"], self.config.actor_lr)
        captured.load_optimizer(self.critic_optim, state["critic_optim"], self.config.critic_lr)


DDPG_STATE = ("actor", "actor_target", "critic", "critic_target", "actor_optim", "critic_optim", "low", "high")
"""The agent's attributes an update reads and writes (a captured update's workspace)."""


def ddpg_explore(nets: Any, hp: Any, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The worker's exploring actions `[num_envs, act_dim]` for (normalised) `obs` `[num_envs, obs_dim]`, as a
    captured step: the actor's, plus Gaussian noise of `hp.exploration_noise` (half-range units), in bounds."""
    with torch.no_grad():
        return {"action": gaussian_explore(nets.actor(batch["obs"]), hp.exploration_noise, nets.low, nets.high)}


@torch.no_grad()
def ddpg_target(nets: Any, hp: Any, batch: dict[str, Tensor], smooth: bool, target_combine: str,
                redq_subset: int) -> Tensor:
    """The critics' regression target y `[B]`: r + gamma * (1 - terminated) * combine_E Q_target_i(s', a'),
    a' the target actor's action, smoothed by clipped noise if `smooth` (TD3's `target_noise` > 0)."""
    next_action = nets.actor_target(batch["next_obs"])
    if smooth:
        next_action = smoothed_target_action(next_action, hp.target_noise, hp.target_noise_clip, nets.low, nets.high)
    target_q = combine(nets.critic_target(batch["next_obs"], next_action), target_combine, redq_subset,
                       hp.combine_weight)
    return td_target(batch["reward"], batch["terminated"], target_q, hp.gamma)


def ddpg_update(nets: Any, hp: Any, batch: dict[str, Tensor], actor_step: bool, smooth: bool, target_combine: str,
                actor_combine: str, redq_subset: int) -> dict[str, Tensor]:
    """One critic step on a batch (`obs` `[B, obs_dim]`, `action` `[B, act_dim]`, `reward`, `terminated` `[B]`,
    `next_obs`, and `weight` `[B]` with prioritised replay) and, with `actor_step`, an actor step and the targets'
    Polyak update. `nets` holds `DDPG_STATE` (an agent, or a captured update's workspace); `hp` gamma, tau,
    combine_weight, target_noise and target_noise_clip, floats or 0-d tensors. Returns detached scalars
    (`actor_loss` only with `actor_step`) and, with `weight`, the rows' TD errors `td_error` `[B]`."""
    target = ddpg_target(nets, hp, batch, smooth, target_combine, redq_subset)
    q = nets.critic(batch["obs"], batch["action"])  # [E, B]
    weight = batch.get("weight")  # importance weights `[B]`, with prioritised replay
    critic_loss = 0.5 * weighted_mean((q - target).pow(2), weight, dim=1).sum()
    regress(nets.critic_optim, critic_loss)
    losses = {"critic_loss": critic_loss.detach()}
    if actor_step:
        nets.critic.requires_grad_(False)  # the actor's loss must not move the critics
        actor_loss = -combine(nets.critic(batch["obs"], nets.actor(batch["obs"])), actor_combine, redq_subset,
                              hp.combine_weight).mean()
        nets.critic.requires_grad_(True)
        regress(nets.actor_optim, actor_loss)
        soft_update(nets.actor_target, nets.actor, hp.tau)
        soft_update(nets.critic_target, nets.critic, hp.tau)
        losses["actor_loss"] = actor_loss.detach()
    losses["q_mean"] = q.detach().mean()
    if weight is not None:
        losses["td_error"] = (q - target).detach().abs().mean(0)  # mean over heads: the rows' priorities
    return losses


register_algorithm(AlgorithmInfo(
    name="ddpg",
    config_cls=DDPGConfig,
    factory=DDPGAgent,
    tunable=("actor_lr", "critic_lr", "tau", "gamma", "utd_ratio", "exploration_noise", *ENSEMBLE_TUNABLE),
    choices=ENSEMBLE_CHOICES,
    action_spaces=(gym.spaces.Box,),
))
