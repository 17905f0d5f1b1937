"""IPPO and MAPPO: PPO for a team of agents in a multi-agent VecEnv (envs/multi_agent/base.py).

Every agent acts from its own observation `[B, n_agents, obs_dim]`; the team's policy is one network shared
by all agents, each seeing a one-hot agent id after its observation (`share_parameters`, the default), or one
network per agent. The critic is what tells the two apart:

- IPPO (`centralised_critic = False`): each agent's critic sees only that agent's observation (and id);
- MAPPO (`centralised_critic = True`): one critic sees every agent's observation, the joint observation
  `obs.flatten(1)` `[B, n_agents * obs_dim]`, and answers a value per agent `[B, n_agents]`.

Each agent's advantages come from its own rewards by GAE (`agent_gae`), bootstrapped through time-limit
truncation from the env's `final_obs`; the losses are PPO's clipped surrogate and value loss
(agents/ppo.py) averaged over agents and samples. One rollout sample is one env step of the whole team, so
a minibatch never splits a team: the centralised critic always sees its whole input. The team is one
agent to the rest of dask_podracer: one `state_dict`, one checkpoint, one score.

Per-agent dones: an env may say which agents are out of the episode while their team plays on
(`info["agent_done"]`, envs/multi_agent/base.py). The step an agent leaves on is a terminal step for it (its
GAE is cut there, nothing bootstrapped), and its later steps of that episode are masked out of every loss
(`alive_mask`); the rest of the team, and the centralised critic's input, go on as before.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import Tensor, nn

from dask_podracer.agents.base import (MOST_EPOCHS, AlgorithmInfo, Metrics, adam, register_algorithm, regress,
                                       set_learning_rate)
from dask_podracer.agents.networks import ActionScale, mlp
from dask_podracer.agents.ppo import PolicyHead, _orthogonal_init, clipped_surrogate_loss, value_loss
from dask_podracer.agents.rollout import RolloutBuffer, compute_gae, explained_variance
from dask_podracer.envs import VecEnv
from dask_podracer.envs.devices import check_buffer_fits


@dataclasses.dataclass(frozen=True)
class MAPPOConfig:
    num_envs: int = 32
    """envs (teams) in the worker's VecEnv"""
    rollout_steps: int = 50
    """steps per env per iteration"""
    learning_rate: float = 3e-4
    """Adam step size for actors and critics"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    clip_coef: float = 0.2
    """the probability ratio is clipped to [1 - clip_coef, 1 + clip_coef]"""
    clip_value: float | None = None
    """if set, value predictions move at most this far from the rollout's values per iteration"""
    ent_coef: float = 0.0
    """weight of the entropy bonus"""
    vf_coef: float = 0.5
    """weight of the value loss"""
    max_grad_norm: float = 1.0
    """global gradient norm clip"""
    epochs: int = 4
    """passes over each rollout"""
    num_minibatches: int = 4
    """minibatches per epoch (of whole-team samples)"""
    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actors and of the critics"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy, in [-1, 1] action units"""
    state_dependent_std: bool = False
    """the actor network outputs each action's log standard deviation beside its mean (offset by log_std_init),
    as BenchMARL's policies do; False: one learned log standard deviation per action dimension"""
    normalize_advantages: bool = True
    """standardise advantages within each minibatch (over samples and agents)"""
    reward_scale: float = 1.0
    """rewards are multiplied by this before learning (returns are reported unscaled)"""
    share_parameters: bool = True
    """one actor (and, for IPPO, one critic) shared by every agent, with a one-hot agent id in its input; False:
    a network per agent"""
    centralised_critic: bool = True
    """MAPPO: the critic sees all agents' observations; False (IPPO): each agent's critic sees its own"""
    seed: int = 0
    """added to a draw from torch's global RNG to seed initialisation, action sampling and shuffling; 0 to 2**32 - 1"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        checks = [
            ("num_envs", self.num_envs >= 1, ">= 1"),
            ("rollout_steps", self.rollout_steps >= 1, ">= 1"),
            ("learning_rate", self.learning_rate > 0, "> 0"),
            ("gamma", 0 <= self.gamma <= 1, "in [0, 1]"),
            ("gae_lambda", 0 <= self.gae_lambda <= 1, "in [0, 1]"),
            ("clip_coef", 0 < self.clip_coef <= 1, "in (0, 1]"),
            ("clip_value", self.clip_value is None or self.clip_value > 0, "None or > 0"),
            ("ent_coef", self.ent_coef >= 0, ">= 0"),
            ("vf_coef", self.vf_coef > 0, "> 0"),
            ("max_grad_norm", self.max_grad_norm > 0, "> 0"),
            ("epochs", 1 <= self.epochs <= MOST_EPOCHS, f"in [1, {MOST_EPOCHS}]"),
            ("num_minibatches", 1 <= self.num_minibatches <= self.batch_size,
             f"in [1, batch_size={self.batch_size}]"),
            ("hidden", len(self.hidden) >= 1 and min(self.hidden) >= 1, "a non-empty list of sizes >= 1"),
            # outside the clamp of the state-dependent std the offset had no gradient; with the learned one,
            # exp(100) overflowed into NaN actions (every segment failed), and -10 or 20 trained garbage
            ("log_std_init", PolicyHead.LOG_STD_MIN <= self.log_std_init <= PolicyHead.LOG_STD_MAX,
             f"in [{PolicyHead.LOG_STD_MIN}, {PolicyHead.LOG_STD_MAX}]"),
            ("reward_scale", self.reward_scale > 0, "> 0"),
            ("seed", 0 <= self.seed < 2**32, "in [0, 2**32 - 1]"),  # as ppo.py's
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")

    @property
    def batch_size(self) -> int:
        """Team samples (env steps) per iteration."""
        return self.num_envs * self.rollout_steps


@dataclasses.dataclass(frozen=True)
class IPPOConfig(MAPPOConfig):
    centralised_critic: bool = False
    """MAPPO: the critic sees all agents' observations; False (IPPO): each agent's critic sees its own"""


# -- pure pieces -----------------------------------------------------------------------------

def with_agent_id(obs: Tensor) -> Tensor:
    """obs `[..., n_agents, obs_dim]` -> `[..., n_agents, obs_dim + n_agents]`, a one-hot agent id appended."""
    n = obs.shape[-2]
    ids = torch.eye(n, dtype=obs.dtype, device=obs.device).expand(*obs.shape[:-1], n)
    return torch.cat([obs, ids], dim=-1)


def own_action_mask(action_space: gym.spaces.Box) -> Tensor:
    """`[n_agents, act_dim]` float: 1 on each agent's own action entries, 0 on the padding past its width (the
    joint Box's `agent_widths`, envs/multi_agent/base.py; all ones for a Box without them). The env ignores the
    padded entries, so they are left out of log-probabilities, entropies and critics."""
    n, width = action_space.shape
    widths = getattr(action_space, "agent_widths", None) or (width,) * n
    return (torch.arange(width).unsqueeze(0) < torch.tensor(widths).unsqueeze(1)).to(torch.float32)


def per_agent(nets: nn.ModuleList, x: Tensor) -> Tensor:
    """Network i applied to agent i's row: x `[..., n_agents, d]` -> `[..., n_agents, out]`."""
    return torch.stack([net(x[..., i, :]) for i, net in enumerate(nets)], dim=-2)


def agent_ends(terminated: Tensor, truncated: Tensor, agent_done: Tensor | None,
               n_agents: int) -> tuple[Tensor, Tensor]:
    """Each agent's terminated and truncated flags `[B, n_agents]` from its team's `[B]` and the env's
    `info["agent_done"]` `[B, n_agents]` (None: no agent leaves early). An agent that is done is terminated:
    it has nothing to bootstrap from, whether or not its team goes on."""
    term = terminated.unsqueeze(-1).expand(-1, n_agents)
    trunc = truncated.unsqueeze(-1).expand(-1, n_agents)
    if agent_done is None:
        return term, trunc
    term = term | agent_done
    return term, trunc & ~term


def alive_mask(agent_done: Tensor, team_dones: Tensor, alive: Tensor) -> tuple[Tensor, Tensor]:
    """Which agents were still in their episode at each step: agent_done `[T, B, n_agents]` (after step t),
    team_dones `[T, B]`, alive `[B, n_agents]` at step 0. Returns the mask `[T, B, n_agents]` (true: the step
    counts for that agent) and the alive flags for the step after the last. A team's episode ending brings all
    its agents back."""
    mask = torch.empty_like(agent_done)
    for t in range(agent_done.shape[0]):
        mask[t] = alive
        alive = ~agent_done[t] | team_dones[t].unsqueeze(-1)
    return mask, alive


def agent_gae(rewards: Tensor, values: Tensor, next_values: Tensor, terminated: Tensor, dones: Tensor,
              gamma: float, gae_lambda: float) -> tuple[Tensor, Tensor]:
    """GAE of every agent from its own rewards and values (agents/rollout.py's `compute_gae`, agent by agent).

    rewards, values, next_values: `[T, B, n_agents]`; terminated, dones: `[T, B]` (the team's, shared) or
    `[T, B, n_agents]`. Returns advantages and returns `[T, B, n_agents]`.
    """
    t, b, n = values.shape
    if terminated.dim() == 2:
        terminated, dones = (x.unsqueeze(-1).expand(t, b, n) for x in (terminated, dones))
    flat = [x.reshape(t, b * n) for x in (rewards, values, next_values, terminated, dones)]
    advantages, returns = compute_gae(*flat, gamma, gae_lambda)
    return advantages.view(t, b, n), returns.view(t, b, n)


class TeamCritic(nn.Module):
    """V for every agent: `forward(obs [..., n_agents, obs_dim]) -> [..., n_agents]`.

    Centralised (MAPPO): one MLP of the joint observation `[..., n_agents * obs_dim]` with an output per agent.
    Decentralised (IPPO): V(o_i, id_i) by one shared MLP, or V_i(o_i) by a network per agent.
    """

    def __init__(self, n_agents: int, obs_dim: int, hidden: tuple[int, ...], centralised: bool, shared: bool,
                 generator: torch.Generator) -> None:
        super().__init__()
        self.centralised, self.shared = centralised, shared
        if centralised:
            self.net = _orthogonal_init(mlp([n_agents * obs_dim, *hidden, n_agents], nn.Tanh), 1.0, generator)
        elif shared:
            self.net = _orthogonal_init(mlp([obs_dim + n_agents, *hidden, 1], nn.Tanh), 1.0, generator)
        else:
            self.nets = nn.ModuleList(_orthogonal_init(mlp([obs_dim, *hidden, 1], nn.Tanh), 1.0, generator)
                                      for _ in range(n_agents))

    def forward(self, obs: Tensor) -> Tensor:
        if self.centralised:
            return self.net(obs.flatten(-2))
        if self.shared:
            return self.net(with_agent_id(obs)).squeeze(-1)
        return per_agent(self.nets, obs).squeeze(-1)


class TeamPolicy(nn.Module):
    """pi(a_i | o_i) for every agent, Gaussian over `[-1, 1]` action units, scaled per agent into the joint Box.

    obs `[N, n_agents, obs_dim]`; actions `[N, n_agents, act_dim]` raw samples; log-probs, entropies `[N, n_agents]`.
    """

    def __init__(self, n_agents: int, obs_dim: int, action_space: gym.spaces.Box, hidden: tuple[int, ...],
                 log_std_init: float, shared: bool, generator: torch.Generator,
                 state_dependent_std: bool = False) -> None:
        super().__init__()
        act_dim = action_space.shape[1]
        unit = gym.spaces.Box(-1.0, 1.0, (act_dim,))
        self.shared = shared
        if shared:
            self.heads = nn.ModuleList([PolicyHead(obs_dim + n_agents, unit, hidden, log_std_init, generator,
                                                   state_dependent_std)])
        else:
            self.heads = nn.ModuleList(PolicyHead(obs_dim, unit, hidden, log_std_init, generator, state_dependent_std)
                                       for _ in range(n_agents))
        self.scale = ActionScale(action_space.low, action_space.high)  # [n_agents, act_dim]
        # not persistent: the env gives it, and checkpoints keep the keys they had
        self.register_buffer("own", own_action_mask(action_space), persistent=False)

    def _inputs(self, obs: Tensor) -> list[tuple[PolicyHead, Tensor]]:
        """(head, its observations `[N', d]`) pairs; their outputs stacked back give `[N, n_agents, ...]`."""
        if self.shared:
            return [(self.heads[0], with_agent_id(obs).flatten(0, 1))]
        return [(head, obs[:, i]) for i, head in enumerate(self.heads)]

    def _join(self, parts: list[Tensor], n: int) -> Tensor:
        if self.shared:
            return parts[0].unflatten(0, (n, -1))
        return torch.stack(parts, dim=1)

    def _own(self, n: int) -> list[Tensor]:
        """The own-entry mask matching each of `_inputs`' rows: `[N * n_agents, act_dim]` shared, else `[act_dim]`."""
        if self.shared:
            return [self.own.expand(n, -1, -1).flatten(0, 1)]
        return list(self.own)

    def sample(self, obs: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Raw actions `[N, n_agents, act_dim]` and their log-probs `[N, n_agents]` over each agent's own entries
        (PolicyHead.sample's draws, with the padded entries' terms left out)."""
        actions, log_probs = [], []
        for (head, x), own in zip(self._inputs(obs), self._own(obs.shape[0])):
            mean, log_std = head.mean_log_std(head.body(x))
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
            actions.append(mean + log_std.exp() * noise)
            log_probs.append(((-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)) * own).sum(-1))
        return self._join(actions, obs.shape[0]), self._join(log_probs, obs.shape[0])

    def log_prob_entropy(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """log pi(a_i | o_i) and the entropy `[N, n_agents]`, each over agent i's own action entries: a padded
        entry, which the env ignores, put noise into the PPO ratio (and, shared, into its width's log-std)."""
        actions = [action.flatten(0, 1)] if self.shared else list(action.unbind(1))
        log_probs, entropies = [], []
        for (head, x), a, own in zip(self._inputs(obs), actions, self._own(obs.shape[0])):
            mean, log_std = head.mean_log_std(head.body(x))
            dist = torch.distributions.Normal(mean, log_std.exp(), validate_args=False)
            log_probs.append((dist.log_prob(a) * own).sum(-1))
            entropies.append((dist.entropy() * own).sum(-1))
        return self._join(log_probs, obs.shape[0]), self._join(entropies, obs.shape[0])

    def env_action(self, obs: Tensor, action: Tensor | None = None) -> Tensor:
        """What the env is given: `action` (or the mean, if None) clipped to [-1, 1] and scaled per agent."""
        if action is None:
            action = self._join([head.mode(x) for head, x in self._inputs(obs)], obs.shape[0])
        return self.scale(action.clamp(-1.0, 1.0))


# -- the agent -------------------------------------------------------------------------------

class MAPPOAgent:
    """A team of PPO agents on one device (see the module docstring); `algorithm` is "mappo" or "ippo"."""

    algorithm: ClassVar[str] = "mappo"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: MAPPOConfig, device: torch.device) -> None:
        name = "mappo" if config.centralised_critic else "ippo"
        for what, space in (("observation", observation_space), ("action", action_space)):
            if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 2):
                raise ValueError(f"{name} needs a multi-agent env (joint {what} space a Box (n_agents, dim)), "
                                 f"got {space}")
        self.algorithm = name  # type: ignore[misc]  (an instance's own name: the class serves both)
        self.config = config
        self.device = torch.device(device)
        self.n_agents, self.obs_dim = observation_space.shape
        self.act_dim = action_space.shape[1]
        seed = int(torch.randint(2**62, ())) + config.seed
        init_gen = torch.Generator().manual_seed(seed)
        self.actor = TeamPolicy(self.n_agents, self.obs_dim, action_space, config.hidden, config.log_std_init,
                                config.share_parameters, init_gen, config.state_dependent_std).to(self.device)
        self.critic = TeamCritic(self.n_agents, self.obs_dim, config.hidden, config.centralised_critic,
                                 config.share_parameters, init_gen).to(self.device)
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = adam(self.params, config.learning_rate, eps=1e-5)
        self.generator = torch.Generator(self.device).manual_seed(seed + 1)
        # obs and final_obs, the action, and 5 numbers (log-prob, value, reward, terminated, done) per agent-step
        check_buffer_fits(config.batch_size * self.n_agents * (2 * self.obs_dim + self.act_dim + 5) * 4, self.device,
                          f"{name}'s rollout buffer of hparams.num_envs * hparams.rollout_steps = "
                          f"{config.num_envs} * {config.rollout_steps} team steps of {self.n_agents} agents")
        # agent i of env b is "env" b * n_agents + i of the buffer: per-agent rows are [T, B * n_agents]
        self.buffer = RolloutBuffer(config.rollout_steps, config.num_envs * self.n_agents, self.obs_dim,
                                    (self.act_dim,), torch.float32, self.device)
        shape = (config.rollout_steps, config.num_envs, self.n_agents)
        self.agent_done = torch.zeros(shape, dtype=torch.bool, device=self.device)  # info["agent_done"] per step
        self.team_dones = torch.zeros(shape[:2], dtype=torch.bool, device=self.device)
        self.alive = torch.ones(shape[1:], dtype=torch.bool, device=self.device)  # at the next rollout's start
        self.iterations = 0

    def _team(self, x: Tensor) -> Tensor:
        """A buffer tensor `[T, B * n_agents, ...]` as `[T, B, n_agents, ...]`."""
        return x.unflatten(1, (self.config.num_envs, self.n_agents))

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        obs = obs.to(self.device, torch.float32)
        if deterministic:
            return self.actor.env_action(obs)
        action, _ = self.actor.sample(obs, self.generator)
        return self.actor.env_action(obs, action)

    @torch.no_grad()
    def collect(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Fill the buffer with `rollout_steps` steps of `env`. Returns the next obs and the summed team returns
        and count of the episodes that ended (0-dim tensors)."""
        cfg, buf = self.config, self.buffer
        if env.num_envs != cfg.num_envs:
            raise ValueError(f"env has {env.num_envs} envs but {self.algorithm}.num_envs is {cfg.num_envs}")
        ep_return_sum = torch.zeros((), device=self.device)
        ep_count = torch.zeros((), device=self.device)
        for t in range(cfg.rollout_steps):
            obs = obs.to(torch.float32)
            action, log_prob = self.actor.sample(obs, self.generator)
            value = self.critic(obs)
            next_obs, reward, terminated, truncated, info = env.step(self.actor.env_action(obs, action))
            agent_term, agent_trunc = agent_ends(terminated, truncated, info.get("agent_done"), self.n_agents)
            buf.add(t, obs.flatten(0, 1), action.flatten(0, 1), log_prob.flatten(), value.flatten(),
                    reward.flatten() * cfg.reward_scale, info["final_obs"].to(torch.float32).flatten(0, 1),
                    agent_term.flatten(), agent_trunc.flatten())
            self.agent_done[t] = info.get("agent_done", False)
            self.team_dones[t] = terminated | truncated
            done = (terminated | truncated).float()
            ep_return_sum += (info["episode_return"] * done).sum()
            ep_count += done.sum()
            obs = next_obs
        return obs, ep_return_sum, ep_count

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        cfg, buf = self.config, self.buffer
        obs, ep_return_sum, ep_count = self.collect(env, obs)
        team = self._team
        with torch.no_grad():
            next_values = self.critic(team(buf.final_obs))
            advantages, returns = agent_gae(team(buf.rewards), team(buf.values), next_values, team(buf.terminated),
                                            team(buf.dones), cfg.gamma, cfg.gae_lambda)
            alive, self.alive = alive_mask(self.agent_done, self.team_dones, self.alive)
        flat = {  # one sample per team step: [T * B, n_agents, ...]
            "obs": team(buf.obs).flatten(0, 1), "actions": team(buf.actions).flatten(0, 1),
            "log_probs": team(buf.log_probs).flatten(0, 1), "values": team(buf.values).flatten(0, 1),
            "advantages": advantages.flatten(0, 1), "returns": returns.flatten(0, 1), "alive": alive.flatten(0, 1),
        }
        totals: dict[str, Tensor] = {}
        updates = 0
        for _ in range(cfg.epochs):
            order = torch.randperm(cfg.batch_size, generator=self.generator, device=self.device)
            for idx in order.tensor_split(cfg.num_minibatches):
                if not bool(flat["alive"][idx].any()):  # every agent of these samples was out: nothing to learn
                    continue
                stats = self._update({k: v[idx] for k, v in flat.items()})
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + v
                updates += 1
        self.iterations += 1
        metrics = {k: float(v) / max(updates, 1) for k, v in totals.items()}
        metrics["explained_variance"] = float(explained_variance(flat["values"][flat["alive"]],
                                                                 flat["returns"][flat["alive"]]))
        metrics["updates"] = float(updates)
        if float(ep_count) > 0:
            metrics["episode_return"] = float(ep_return_sum) / float(ep_count)
        return obs, cfg.batch_size, metrics

    def finish(self) -> None:
        """Nothing runs between iterations: each `train_iteration` ends with its updates made."""

    def _update(self, mb: dict[str, Tensor]) -> dict[str, Tensor]:
        """One gradient step on a minibatch of team samples (`[N, n_agents, ...]`); returns detached scalars.
        Every loss is a mean over the (sample, agent) pairs whose agent was still in its episode (`alive`)."""
        cfg = self.config
        alive = mb["alive"]
        log_prob, entropy = self.actor.log_prob_entropy(mb["obs"], mb["actions"])
        advantages = mb["advantages"][alive]
        if cfg.normalize_advantages and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        pg_loss, clip_fraction, approx_kl = clipped_surrogate_loss(log_prob[alive], mb["log_probs"][alive],
                                                                   advantages, cfg.clip_coef)
        v_loss = value_loss(self.critic(mb["obs"])[alive], mb["values"][alive], mb["returns"][alive],
                            cfg.clip_value)
        entropy = entropy[alive].mean()
        loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
        regress(self.optimizer, loss, cfg.max_grad_norm, self.params)
        return {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": entropy.detach(),
                "approx_kl": approx_kl, "clip_fraction": clip_fraction}

    def state_dict(self) -> dict[str, Any]:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "optimizer": self.optimizer.state_dict(), "iterations": self.iterations}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_learning_rate(self.optimizer, self.config.learning_rate)  # this segment's rate wins
        self.iterations = int(state["iterations"])


TUNABLE = ("learning_rate", "gamma", "gae_lambda", "clip_coef", "ent_coef", "vf_coef", "max_grad_norm",
           "reward_scale")

register_algorithm(AlgorithmInfo(name="mappo", config_cls=MAPPOConfig, factory=MAPPOAgent, tunable=TUNABLE,
                                 multi_agent=True))
register_algorithm(AlgorithmInfo(name="ippo", config_cls=IPPOConfig, factory=MAPPOAgent, tunable=TUNABLE,
                                 multi_agent=True))
