"""The DQN family for Discrete actions: DQN (Mnih et al. 2015), Double DQN, Dueling Double DQN (D3QN).

One config, three registered names that differ only in defaults: "dqn", "double_dqn"
(`double=True`) and "d3qn" (`double=True, dueling=True`). What they share with DDPG, TD3 and
SAC (replay buffer, worker/learner loop, checkpoint layout) is `offpolicy.OffPolicyAgent`; the
worker acts epsilon-greedily with epsilon decaying linearly over `exploration_steps` env steps.

One update, on a batch from the replay buffer:
    a*  = argmax_a Q(s', a)         if double, else argmax_a Q_target(s', a)
    y   = r + gamma * (1 - terminated) * Q_target(s', a*)
    loss = Huber(Q(s, a) - y); targets <- Polyak(tau) (tau = 1 with target_update_interval: a hard copy)
    (prioritised replay: the mean of the Huber terms times the batch's importance weights, and the drawn
    rows' priorities become |Q(s, a) - y|)
Dueling: Q(s, a) = V(s) + A(s, a) - mean_a A(s, a), from one shared body.

With `[actors]` the family is Ape-X (Horgan et al. 2018; `apex.py`): actors on the rungs of an epsilon ladder
(`apex_epsilon`, `apex_alpha`) send chunks of transitions with initial priorities |TD error|, and this agent, as
the learner, stores them in its replay buffer and makes the same updates as above.
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
from torch.nn import functional as F

from dask_podracer.agents import apex, captured
from dask_podracer.agents.base import AlgorithmInfo, Metrics, observation_width, register_algorithm, regress
from dask_podracer.agents.ladders import epsilon_ladder
from dask_podracer.agents.networks import mlp, soft_update
from dask_podracer.agents.offpolicy import (OffPolicyConfig, OffPolicyOptions, batch_example, check, td_target,
                                            validate_offpolicy)
from dask_podracer.envs import VecEnv


@dataclasses.dataclass(frozen=True)
class DQNFields:
    """The DQN family's own hyper-parameters; `DQNConfig` lists them between the shared off-policy ones."""

    tau: float = 0.01
    """Polyak rate of the target network, applied every `target_update_interval` updates (1.0: a hard copy)."""
    target_update_interval: int = 1
    """Updates between target network updates."""
    learning_rate: float = 1e-3
    """Adam learning rate of the Q-network."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the Q-network."""
    eps_start: float = 1.0
    """Exploration epsilon at the first env step."""
    eps_end: float = 0.05
    """Exploration epsilon after `exploration_steps` (at most eps_start: epsilon decays)."""
    exploration_steps: int = 10_000
    """Env steps (summed over envs) over which epsilon decays linearly."""
    max_grad_norm: float = 10.0
    """Global gradient norm clip."""
    double: bool = False
    """Double DQN: the online network picks the next action, the target network values it."""
    dueling: bool = False
    """Dueling heads: Q = V + A - mean(A)."""
    apex_epsilon: float = 0.4
    """Ape-X (`[actors]`): the top of the actors' epsilon ladder; actor i of N acts with
    apex_epsilon^(1 + apex_alpha * i / (N - 1)), a lone actor with apex_epsilon."""
    apex_alpha: float = 7.0
    """Ape-X (`[actors]`): the spread of the epsilon ladder (the last actor acts with
    apex_epsilon^(1 + apex_alpha))."""
    apex_send_steps: int = 20
    """Ape-X (`[actors]`): env steps (per env) an actor collects before it computes their initial priorities and
    sends them to the learner."""


@dataclasses.dataclass(frozen=True)
class DQNConfig(OffPolicyOptions, DQNFields, OffPolicyConfig):
    """The DQN family's hyper-parameters: the shared off-policy ones (offpolicy.py) around `DQNFields`."""

    # The DQN family's defaults of shared fields.
    num_envs: int = 8
    utd_ratio: float = 0.25
    batch_size: int = 128
    buffer_size: int = 50_000
    learning_starts: int = 1000
    pipeline: bool = False
    """Run the worker (acting with a snapshot of the Q-network) ahead of the learner, a thread of its own."""

    def __post_init__(self) -> None:
        validate_offpolicy(self)
        check(self, "target_update_interval", self.target_update_interval >= 1, ">= 1")
        check(self, "learning_rate", self.learning_rate > 0, "> 0")
        check(self, "eps_start", 0 <= self.eps_start <= 1, "in [0, 1]")
        check(self, "eps_end", 0 <= self.eps_end <= 1, "in [0, 1]")
        # epsilon decays from eps_start to eps_end: an end above the start made exploration grow, silently
        check(self, "eps_end", self.eps_end <= self.eps_start, f"<= eps_start (= {self.eps_start!r})")
        check(self, "exploration_steps", self.exploration_steps >= 1, ">= 1")
        check(self, "max_grad_norm", self.max_grad_norm > 0, "> 0")
        check(self, "apex_epsilon", 0 <= self.apex_epsilon <= 1, "in [0, 1]")
        check(self, "apex_alpha", self.apex_alpha >= 0, ">= 0")
        check(self, "apex_send_steps", self.apex_send_steps >= 1, ">= 1")


@dataclasses.dataclass(frozen=True)
class DoubleDQNConfig(DQNConfig):
    double: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""


@dataclasses.dataclass(frozen=True)
class D3QNConfig(DQNConfig):
    double: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    dueling: bool = True
    """Dueling heads: Q = V + A - mean(A)."""


class QNetwork(nn.Module):
    """obs `[B, obs_dim]` -> Q values `[B, n_actions]`, plain or dueling."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...], dueling: bool) -> None:
        super().__init__()
        self.dueling = dueling
        if dueling:
            self.body = nn.Sequential(mlp([obs_dim, *hidden]), nn.ReLU())
            self.value = nn.Linear(hidden[-1], 1)
            self.advantage = nn.Linear(hidden[-1], n_actions)
        else:
            self.body = mlp([obs_dim, *hidden, n_actions])

    def forward(self, obs: Tensor) -> Tensor:
        if not self.dueling:
            return self.body(obs)
        h = self.body(obs)
        advantage = self.advantage(h)
        return self.value(h) + advantage - advantage.mean(dim=-1, keepdim=True)


def q_learning_target(reward: Tensor, terminated: Tensor, next_q_target: Tensor, next_q_online: Tensor | None,
                      gamma: float) -> Tensor:
    """y = r + gamma * (1 - terminated) * Q_target(s', a*), a* = argmax of `next_q_online` (Double DQN) if given,
    else of `next_q_target` (DQN). reward, terminated `[B]`; next Q values `[B, n_actions]`; returns `[B]`."""
    chooser = next_q_target if next_q_online is None else next_q_online
    next_value = next_q_target.gather(-1, chooser.argmax(-1, keepdim=True)).squeeze(-1)
    return td_target(reward, terminated, next_value, gamma)


@torch.no_grad()
def td_errors(q_net: nn.Module, q_target: nn.Module, batch: Mapping[str, Tensor], gamma: float,
              double: bool) -> Tensor:
    """|Q(s, a) - y| `[B]` for transitions (`obs`, `next_obs` `[B, obs_dim]` as the networks take them, `action`
    `[B]` or `[B, 1]`, `reward`, `terminated` `[B]`: `apex.chunk_batch`), y the target `dqn_update` regresses to: an
    Ape-X actor's initial priorities."""
    q = q_net(batch["obs"]).gather(-1, batch["action"].long().reshape(-1, 1)).squeeze(-1)
    next_q_online = q_net(batch["next_obs"]) if double else None
    target = q_learning_target(batch["reward"], batch["terminated"].float(), q_target(batch["next_obs"]),
                               next_q_online, gamma)
    return (q - target).abs()


def linear_epsilon(step: int, start: float, end: float, duration: int) -> float:
    """Epsilon after `step` env steps: from `start` to `end` linearly over `duration`, then `end`."""
    return end + (start - end) * max(0.0, 1.0 - step / duration)


class DQNAgent(apex.ApexAgent):
    """An epsilon-greedy worker + Q-learning learner; see the module docstring. As Ape-X actors, on the rungs of an
    epsilon ladder (`apex.ApexAgent`)."""

    algorithm: ClassVar[str] = "dqn"
    policy_parts: ClassVar[tuple[str, ...]] = ("q_net", "q_target")  # an actor's priorities need both
    rung_name: ClassVar[str] = "epsilon"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: DQNConfig, device: torch.device) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"{self.algorithm} needs a Discrete action space, got {action_space}")
        self.n_actions = int(action_space.n)
        obs_dim = observation_width(observation_space, self.algorithm)
        # the replay buffer keeps the action's index
        super().__init__(config, device, obs_dim, act_dim=1, obs_shape=observation_space.shape)
        self.q_net = QNetwork(obs_dim, self.n_actions, config.hidden, config.dueling).to(device)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)
        make_adam = captured.optimizer_maker(config.compile, device)
        self.optimizer = make_adam(self.q_net.parameters(), config.learning_rate)
        self.behaviour = self.q_net
        self._captured: dict[bool, captured.CapturedUpdate] | None = None
        if captured.use_capture(config.compile, device):
            self._bind_update(obs_dim)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        self.loop.pause()  # in pipeline mode: the learner's owed updates first, then still parameters
        obs = self.obs_norm(obs.to(self.device, torch.float32))
        return self.q_net(obs).argmax(-1) if deterministic else self.explore(obs, self.q_net)

    def random_action(self, n: int) -> Tensor:
        return torch.randint(0, self.n_actions, (n,), device=self.device)

    def epsilon(self) -> float:
        cfg = self.config
        if self.rung is not None:  # an Ape-X actor's
            return self.rung
        return linear_epsilon(self.env_steps, cfg.eps_start, cfg.eps_end, cfg.exploration_steps)

    def explore(self, obs: Tensor, behaviour: nn.Module) -> Tensor:
        greedy = behaviour(obs.to(self.device, torch.float32)).argmax(-1)
        explore = torch.rand(obs.shape[0], device=self.device) < self.epsilon()
        return torch.where(explore, self.random_action(obs.shape[0]), greedy)

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        obs, steps, metrics = super().train_iteration(env, obs)
        if metrics:
            metrics["epsilon"] = self.epsilon()
        return obs, steps, metrics

    # -- Ape-X (apex.ApexAgent) ----------------------------------------------------------------
    def ladder(self, workers: int) -> list[float]:
        return epsilon_ladder(workers, self.config.apex_epsilon, self.config.apex_alpha)

    def initial_priorities(self, batch: dict[str, Tensor]) -> Tensor:
        return td_errors(self.q_net, self.q_target, batch, self.config.gamma, self.config.double)

    def _bind_update(self, obs_dim: int) -> None:
        """Captured mode: two captured updates of the process's cache for these shapes, without and with the
        target network's update (every `target_update_interval` updates)."""
        cfg = self.config
        key = (self.algorithm, obs_dim, self.n_actions, cfg.hidden, cfg.dueling, cfg.double, cfg.max_grad_norm,
               cfg.batch_size, cfg.prioritized, str(self.device))
        double, clip = cfg.double, cfg.max_grad_norm
        self._captured = captured.bind(
            self, key, DQN_STATE, {"gamma": cfg.gamma, "tau": cfg.tau}, {"optimizer": cfg.learning_rate},
            {step: lambda nets, hp, batch, step=step: dqn_update(nets, hp, batch, step, double, clip)
             for step in (False, True)},
            batch_example(self.replay, cfg.batch_size, cfg.prioritized))
        self.behaviour = self.q_net

    def target(self, batch: dict[str, Tensor]) -> Tensor:
        """The Q-network's regression target y `[B]` (`dqn_target`)."""
        return dqn_target(self, SimpleNamespace(gamma=self.config.gamma), batch, self.config.double)

    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One Q-learning step on a batch (`dqn_update`)."""
        cfg = self.config
        target_step = (self.updates + 1) % cfg.target_update_interval == 0
        if self._captured is not None:
            losses = self._captured[target_step](batch)
        else:
            hp = SimpleNamespace(gamma=cfg.gamma, tau=cfg.tau)
            losses = dqn_update(self, hp, batch, target_step, cfg.double, cfg.max_grad_norm)
        self.updates += 1
        return losses

    def own_state(self) -> dict[str, Any]:
        return {
            "q_net": self.q_net.state_dict(),
            "q_target": self.q_target.state_dict(),
            "optimizer": captured.saved_optimizer(self.optimizer),
        }

    def load_own_state(self, state: Mapping[str, Any]) -> None:
        self.q_net.load_state_dict(state["q_net"])
        self.q_target.load_state_dict(state["q_target"])
        captured.load_optimizer(self.optimizer, state["optimizer"], self.config.learning_rate)


DQN_STATE = ("q_net", "q_target", "optimizer")
"""The agent's attributes an update reads and writes (a captured update's workspace)."""


@torch.no_grad()
def dqn_target(nets: Any, hp: Any, batch: dict[str, Tensor], double: bool) -> Tensor:
    """The Q-network's regression target y `[B]` (`q_learning_target`) for a batch: the next action picked by the
    online network (`double`) or the target one, valued by the target one at `next_obs`."""
    next_q_online = nets.q_net(batch["next_obs"]) if double else None
    return q_learning_target(batch["reward"], batch["terminated"], nets.q_target(batch["next_obs"]), next_q_online,
                             hp.gamma)


def dqn_update(nets: Any, hp: Any, batch: dict[str, Tensor], target_step: bool, double: bool,
               max_grad_norm: float) -> dict[str, Tensor]:
    """One Q-learning step on a batch (`obs` `[B, obs_dim]`, actions as floats `[B, 1]`, `reward`, `terminated`
    `[B]`, `next_obs`, and `weight` `[B]` with prioritised replay), then, with `target_step`, the target network's
    Polyak update. `nets` holds `DQN_STATE` (an agent, or a captured update's workspace); `hp` gamma and tau,
    floats or 0-d tensors. Returns detached scalars and, with `weight`, the rows' TD errors `td_error` `[B]`."""
    action = batch["action"].long()  # [B, 1]
    target = dqn_target(nets, hp, batch, double)
    q = nets.q_net(batch["obs"]).gather(-1, action).squeeze(-1)
    weight = batch.get("weight")  # importance weights `[B]`, with prioritised replay
    if weight is None:
        loss = F.smooth_l1_loss(q, target)
    else:
        loss = (weight * F.smooth_l1_loss(q, target, reduction="none")).mean()
    regress(nets.optimizer, loss, max_grad_norm, list(nets.q_net.parameters()))
    if target_step:
        soft_update(nets.q_target, nets.q_net, hp.tau)
    losses = {"loss": loss.detach(), "q_mean": q.detach().mean()}
    if weight is not None:
        losses["td_error"] = (q - target).detach()
    return losses


class DoubleDQNAgent(DQNAgent):
    algorithm: ClassVar[str] = "double_dqn"


class D3QNAgent(DQNAgent):
    algorithm: ClassVar[str] = "d3qn"


_TUNABLE = ("learning_rate", "gamma", "tau", "utd_ratio", "eps_end")
_ACTIONS = (gym.spaces.Discrete,)
register_algorithm(AlgorithmInfo("dqn", DQNConfig, DQNAgent, _TUNABLE, action_spaces=_ACTIONS))
register_algorithm(AlgorithmInfo("double_dqn", DoubleDQNConfig, DoubleDQNAgent, _TUNABLE, action_spaces=_ACTIONS))
register_algorithm(AlgorithmInfo("d3qn", D3QNConfig, D3QNAgent, _TUNABLE, action_spaces=_ACTIONS))
