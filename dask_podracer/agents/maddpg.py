"""MADDPG: DDPG for a team of agents, with decentralised deterministic actors and a centralised critic.

Every agent acts from its own observation `[B, n_agents, obs_dim]`: mu_i(o_i), one network shared by all
agents with a one-hot agent id in its input (`share_parameters`, the default), or one network per agent. The
critic sees the whole team, Q_i(o_1..o_n, a_1..a_n) for every agent i at once (one network, `n_agents`
outputs), and regresses on each agent's own TD target

    y_i = reward_scale * r_i + gamma * (1 - terminated) * Q'_i(o'_1..o'_n, mu'_1(o'_1)..mu'_n(o'_n))

from target networks kept by Polyak averaging (`tau`). The actors maximise the mean over agents of
Q_i(o, mu_1(o_1)..mu_n(o_n)): every agent's action comes from the current policy (a simplification of the
original MADDPG, which replaces only agent i's own action in Q_i). Exploration adds Gaussian noise of
`exploration_noise` (in [-1, 1] action units) and acts uniformly at random before `learning_starts`.

One replay row is one env step of the whole team (agents/replay.py's buffer, with a reward per agent), and the
update schedule is the single-agent off-policy one: `utd_ratio` updates per team transition, fractions
carried over, from `learning_starts` transitions on. The team is one agent to the tournament: one checkpoint
(networks, targets, optimizers, the replay buffer).

Per-agent dones (`info["agent_done"]`, envs/multi_agent/base.py): the transition an agent leaves on is terminal
for it (y_i = r_i), and its later transitions of that episode are masked out of its critic and actor terms
(the replay keeps a terminated and an alive flag per agent); the other agents' terms are unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import Tensor, nn

from dask_podracer.agents.base import (MOST_UPDATES_PER_TRANSITION, AlgorithmInfo, Metrics, adam, register_algorithm,
                                       regress, set_learning_rate)
from dask_podracer.agents.mappo import agent_ends, own_action_mask, per_agent, with_agent_id
from dask_podracer.agents.networks import ActionScale, mlp, soft_update
from dask_podracer.agents.replay import ReplayBuffer
from dask_podracer.envs import VecEnv
from dask_podracer.envs.devices import check_buffer_fits


@dataclasses.dataclass(frozen=True)
class MADDPGConfig:
    num_envs: int = 32
    """envs (teams) in the worker's VecEnv"""
    steps_per_iteration: int = 4
    """env steps per env per iteration"""
    utd_ratio: float = 0.05
    """gradient updates per team transition (fractions carry over to the next iteration)"""
    batch_size: int = 256
    """team transitions per update"""
    buffer_size: int = 200_000
    """replay capacity in team transitions (at least batch_size and num_envs * steps_per_iteration)"""
    learning_starts: int = 2_000
    """team transitions collected (acting at random) before the first update (at most buffer_size)"""
    actor_lr: float = 1e-3
    """Adam step size of the actors"""
    critic_lr: float = 1e-3
    """Adam step size of the critic"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak step of the target networks"""
    exploration_noise: float = 0.1
    """standard deviation of the Gaussian noise added to actions, in [-1, 1] action units"""
    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actors and of the critic"""
    reward_scale: float = 1.0
    """rewards are multiplied by this before learning (returns are reported unscaled)"""
    share_parameters: bool = True
    """one actor shared by every agent, with a one-hot agent id in its input; False: an actor per agent"""
    seed: int = 0
    """added to a draw from torch's global RNG to seed initialisation, exploration and sampling; 0 to 2**32 - 1"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        per_iteration = self.num_envs * self.steps_per_iteration
        checks = [
            ("num_envs", self.num_envs >= 1, ">= 1"),
            ("steps_per_iteration", self.steps_per_iteration >= 1, ">= 1"),
            ("utd_ratio", 0 < self.utd_ratio <= MOST_UPDATES_PER_TRANSITION,
             f"in (0, {MOST_UPDATES_PER_TRANSITION:g}] (gradient updates per team transition)"),
            ("batch_size", self.batch_size >= 1, ">= 1"),
            ("buffer_size", self.buffer_size >= max(self.batch_size, per_iteration),
             f">= batch_size and num_envs * steps_per_iteration (= {per_iteration})"),
            # the replay holds at most buffer_size rows, and learning waits for learning_starts of them: past it,
            # every segment acted at random and never learned, silently
            ("learning_starts", 0 <= self.learning_starts <= self.buffer_size,
             f"in [0, buffer_size={self.buffer_size}]"),
            ("actor_lr", self.actor_lr > 0, "> 0"),
            ("critic_lr", self.critic_lr > 0, "> 0"),
            ("gamma", 0 <= self.gamma <= 1, "in [0, 1]"),
            ("tau", 0 < self.tau <= 1, "in (0, 1]"),
            ("exploration_noise", self.exploration_noise >= 0, ">= 0"),
            ("hidden", len(self.hidden) >= 1 and min(self.hidden) >= 1, "a non-empty list of sizes >= 1"),
            ("reward_scale", self.reward_scale > 0, "> 0"),
            ("seed", 0 <= self.seed < 2**32, "in [0, 2**32 - 1]"),  # as ppo.py's
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")


class TeamActor(nn.Module):
    """mu_i(o_i) in [-1, 1] units for every agent: obs `[N, n_agents, obs_dim]` -> `[N, n_agents, act_dim]`."""

    def __init__(self, n_agents: int, obs_dim: int, act_dim: int, hidden: tuple[int, ...], shared: bool) -> None:
        super().__init__()
        self.shared = shared
        if shared:
            self.net = mlp([obs_dim + n_agents, *hidden, act_dim])
        else:
            self.nets = nn.ModuleList(mlp([obs_dim, *hidden, act_dim]) for _ in range(n_agents))

    def forward(self, obs: Tensor) -> Tensor:
        return torch.tanh(self.net(with_agent_id(obs)) if self.shared else per_agent(self.nets, obs))


class CentralQ(nn.Module):
    """Q_i(o_1..o_n, a_1..a_n) for every agent i: obs `[N, n, obs_dim]`, actions `[N, n, act_dim]` -> `[N, n]`."""

    def __init__(self, n_agents: int, obs_dim: int, act_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.net = mlp([n_agents * (obs_dim + act_dim), *hidden, n_agents])

    def forward(self, obs: Tensor, actions: Tensor) -> Tensor:
        return self.net(torch.cat([obs.flatten(-2), actions.flatten(-2)], dim=-1))


def maddpg_targets(critic_target: CentralQ, actor_target: TeamActor, reward: Tensor, next_obs: Tensor,
                   terminated: Tensor, gamma: float, own: Tensor | None = None) -> Tensor:
    """Each agent's TD target `[N, n_agents]` from rewards `[N, n_agents]`, next obs `[N, n, obs_dim]` and
    terminated flags, the team's `[N]` or each agent's `[N, n_agents]` (see the module docstring); `own`
    `[n_agents, act_dim]` zeroes the target actors' padded action entries, as the replay's are."""
    with torch.no_grad():
        next_action = actor_target(next_obs)
        next_q = critic_target(next_obs, next_action if own is None else next_action * own)
        if terminated.dim() == 1:
            terminated = terminated.unsqueeze(-1)
        return reward + gamma * (1.0 - terminated) * next_q


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """The mean of `x` over the entries where `mask` (0/1, x's shape) is 1."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


class TeamReplay(ReplayBuffer):
    """agents/replay.py's buffer of team transitions, with a reward, a terminated flag and an alive flag (the
    agent was still in its episode) per agent: `[capacity, n_agents]` each."""

    fields = (*ReplayBuffer.fields, "alive")

    def __init__(self, capacity: int, n_agents: int, obs_dim: int, act_dim: int, device: torch.device) -> None:
        super().__init__(capacity, n_agents * obs_dim, n_agents * act_dim, device)
        for key in ("reward", "terminated", "alive"):
            self.data[key] = torch.zeros(self.capacity, n_agents, device=device)

    def add_team(self, obs: Tensor, action: Tensor, reward: Tensor, next_obs: Tensor, terminated: Tensor,
                 alive: Tensor) -> None:
        """Append a batch: obs, next_obs `[B, n * obs_dim]`, action `[B, n * act_dim]`, the rest `[B, n]`."""
        rows = (self.position + torch.arange(obs.shape[0], device=self.device)) % self.capacity
        self.data["alive"][rows] = alive.to(torch.float32)  # before add(), which moves the position on
        self.add(obs, action, reward, next_obs, terminated)

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        n = self.data["alive"].shape[1]
        if "alive" not in state:  # a checkpoint from before per-agent dones: team flags, every agent alive
            state = {**state, "terminated": state["terminated"].reshape(-1, 1).expand(-1, n),
                     "alive": torch.ones_like(state["reward"])}
        super().load_state_dict(state)


class MADDPGAgent:
    """A team of DDPG agents with a centralised critic on one device (see the module docstring)."""

    algorithm: ClassVar[str] = "maddpg"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: MADDPGConfig, device: torch.device) -> None:
        for what, space in (("observation", observation_space), ("action", action_space)):
            if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 2):
                raise ValueError(f"maddpg needs a multi-agent env (joint {what} space a Box (n_agents, dim)), "
                                 f"got {space}")
        self.config = config
        self.device = torch.device(device)
        self.n_agents, self.obs_dim = observation_space.shape
        self.act_dim = action_space.shape[1]
        seed = int(torch.randint(2**62, ())) + config.seed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # nn.Linear's default init draws from the global RNG: from ours, here
            self.actor = TeamActor(self.n_agents, self.obs_dim, self.act_dim, config.hidden, config.share_parameters)
            self.critic = CentralQ(self.n_agents, self.obs_dim, self.act_dim, config.hidden)
        self.actor.to(self.device)
        self.critic.to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.scale = ActionScale(action_space.low, action_space.high).to(self.device)  # [n_agents, act_dim]
        # 0 on the action entries past an agent's width: the env ignores them, so the replay and the critic
        # hold zeros there (exploration noise there only taught the critic noise, and the actor its gradient)
        self.own = own_action_mask(action_space).to(self.device)
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr)
        self.critic_optimizer = adam(self.critic.parameters(), config.critic_lr)
        self.generator = torch.Generator(self.device).manual_seed(seed + 1)
        # obs and next_obs, the actions, and a reward, terminated and alive flag per agent, in float32
        row = self.n_agents * (2 * self.obs_dim + self.act_dim + 3) * 4
        check_buffer_fits(config.buffer_size * row, self.device,
                          f"maddpg's replay buffer of hparams.buffer_size = {config.buffer_size:,} team transitions of "
                          f"{self.n_agents} agents")
        self.replay = TeamReplay(config.buffer_size, self.n_agents, self.obs_dim, self.act_dim, self.device)
        self.alive = torch.ones(config.num_envs, self.n_agents, dtype=torch.bool, device=self.device)
        self.updates = 0
        self._owed = 0.0  # fractional updates carried to the next iteration

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        obs = obs.to(self.device, torch.float32)
        return self.scale(self._explore(obs) if not deterministic else self.actor(obs))

    def _explore(self, obs: Tensor) -> Tensor:
        """A unit action `[B, n, act_dim]`: uniform before learning starts, the actor's plus noise after."""
        shape = (obs.shape[0], self.n_agents, self.act_dim)
        if self.replay.size < self.config.learning_starts:
            return (torch.rand(shape, generator=self.generator, device=self.device) * 2 - 1) * self.own
        noise = torch.randn(shape, generator=self.generator, device=self.device) * self.config.exploration_noise
        return (self.actor(obs) + noise).clamp(-1.0, 1.0) * self.own

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        cfg = self.config
        if env.num_envs != cfg.num_envs:
            raise ValueError(f"env has {env.num_envs} envs but maddpg.num_envs is {cfg.num_envs}")
        ep_return_sum = torch.zeros((), device=self.device)
        ep_count = torch.zeros((), device=self.device)
        with torch.no_grad():
            for _ in range(cfg.steps_per_iteration):
                obs = obs.to(torch.float32)
                unit = self._explore(obs)
                next_obs, reward, terminated, truncated, info = env.step(self.scale(unit))
                agent_terminated, _ = agent_ends(terminated, truncated, info.get("agent_done"), self.n_agents)
                self.replay.add_team(obs.flatten(1), unit.flatten(1), reward, info["final_obs"].flatten(1),
                                     agent_terminated, self.alive)
                self.alive = ~info["agent_done"] if "agent_done" in info else torch.ones_like(self.alive)
                self.alive |= (terminated | truncated).unsqueeze(-1)  # a new episode brings every agent back
                done = (terminated | truncated).float()
                ep_return_sum += (info["episode_return"] * done).sum()
                ep_count += done.sum()
                obs = next_obs
        metrics: Metrics = {}
        if self.replay.size >= max(cfg.learning_starts, 1):
            self._owed += cfg.utd_ratio * cfg.num_envs * cfg.steps_per_iteration
            for _ in range(int(self._owed)):
                metrics = self._update()
            self._owed -= int(self._owed)
        if float(ep_count) > 0:
            metrics["episode_return"] = float(ep_return_sum) / float(ep_count)
        return obs, cfg.num_envs * cfg.steps_per_iteration, metrics

    def _update(self) -> Metrics:
        cfg, n = self.config, self.n_agents
        batch = self.replay.sample(cfg.batch_size, self.generator)
        obs, next_obs = (batch[k].unflatten(1, (n, self.obs_dim)) for k in ("obs", "next_obs"))
        actions = batch["action"].unflatten(1, (n, self.act_dim))
        target = maddpg_targets(self.critic_target, self.actor_target, batch["reward"] * cfg.reward_scale,
                                next_obs, batch["terminated"], cfg.gamma, self.own)
        alive = batch["alive"]  # [N, n]: agent i's terms count only while it was in its episode
        q = self.critic(obs, actions)
        critic_loss = 0.5 * masked_mean((q - target).pow(2), alive)
        regress(self.critic_optimizer, critic_loss)
        actor_loss = -masked_mean(self.critic(obs, self.actor(obs) * self.own), alive)
        regress(self.actor_optimizer, actor_loss)  # the critic's grads it leaves are zeroed by its next update
        soft_update(self.actor_target, self.actor, cfg.tau)
        soft_update(self.critic_target, self.critic, cfg.tau)
        self.updates += 1
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "q_mean": q.detach().mean().item()}

    def finish(self) -> None:
        """Nothing runs between iterations: each `train_iteration` ends with its updates made."""

    def state_dict(self) -> dict[str, Any]:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "actor_target": self.actor_target.state_dict(), "critic_target": self.critic_target.state_dict(),
                "actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(),
                "replay": self.replay.state_dict(), "updates": self.updates, "owed": self._owed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name in ("actor", "critic", "actor_target", "critic_target"):
            getattr(self, name).load_state_dict(state[name])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        set_learning_rate(self.actor_optimizer, self.config.actor_lr)  # this segment's rates win
        set_learning_rate(self.critic_optimizer, self.config.critic_lr)
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
        self.updates = int(state["updates"])
        self._owed = float(state["owed"])


register_algorithm(AlgorithmInfo(
    name="maddpg", config_cls=MADDPGConfig, factory=MADDPGAgent, multi_agent=True,
    tunable=("actor_lr", "critic_lr", "gamma", "tau", "exploration_noise", "reward_scale"),
))
