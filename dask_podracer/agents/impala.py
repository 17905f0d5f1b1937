"""IMPALA (Espeholt et al. 2018): an actor-critic that learns from rollouts of older policies, corrected by V-trace.

An actor rolls out `rollout_steps` steps of `num_envs` envs with the policy version it holds and ships the
`Rollout` (observations, actions, the behaviour log-probabilities mu(a|x), rewards, ends); the learner
concatenates `batch_rollouts` of them along the env axis, evaluates pi(a|x) and V(x) under its current networks,
and takes one gradient step on

    loss = -E[log pi(a_s|x_s) * A_s] + vf_coef * 0.5 * E[(v_s - V(x_s))^2] - ent_coef * E[H(pi(.|x_s))]
           + bound_coef * E[relu(m(x_s) - 1.1)^2 + relu(-1.1 - m(x_s))^2]           (Box actions only)

with v_s and A_s from V-trace (`agents/vtrace.py`, rho_bar and c_bar configurable). Discrete actions use a
categorical policy, continuous ones a Gaussian in [-1, 1] units clipped and scaled to the Box (PPO's
`PolicyHead`). The rollouts keep the raw Gaussian samples, so mu(a|x) and pi(a|x) are densities of the same
unclipped action. The last term, rl_games' bounds loss, holds the Gaussian's mean m(x) near the clip range: past
it the clipped action's return has no gradient w.r.t. the mean, and policy-gradient steps on rollouts of older
policies drifted it there (the mean |m| over a rollout reached 5.7 to 9.9 on Pendulum at a fixed lag of 3 to 6;
issue 25, docs/actor_learner.md). An episode cut by a time limit bootstraps from V(final observation), folded into
its reward with a discount of 0 (vtrace.py's docstring).

In a one-task segment the agent is its own actor (`train_iteration`: one rollout, one step, lag 0); an
actor-learner segment (`train/actor_learner.py`) splits `collect` and `learn` across processes, and the
actors load only the policy (`policy_state` / `load_policy_state`, plain numpy arrays) and ship `Rollout.to_numpy`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from dask_podracer.agents.actor_learner import LearnerFeed
from dask_podracer.agents.base import (AlgorithmInfo, Metrics, adam, observation_width, register_algorithm, regress,
                                       set_learning_rate)
from dask_podracer.agents.networks import mlp
from dask_podracer.agents.ppo import PolicyHead
from dask_podracer.agents.vtrace import VTrace, vtrace
from dask_podracer.envs import VecEnv
from dask_podracer.envs.devices import check_buffer_fits

SOFT_BOUND = 1.1
"""Where the bounds loss starts, in [-1, 1] action units: a little past the clip, as rl_games' PPO."""
BOUND_COEF = 1.0
"""`bound_coef`'s default: the weight that learnt Pendulum at every lag measured (0.1 and 10 less reliably)."""


def bounds_loss(mean: Tensor, soft_bound: float = SOFT_BOUND) -> Tensor:
    """E[sum over action dims of relu(mean - b)^2 + relu(-b - mean)^2]: zero (and zero gradient) inside [-b, b].

    The clipped action's return has no gradient w.r.t. a Gaussian mean far outside [-1, 1], so nothing but this
    pulls back a mean that stale-policy gradients pushed out there (rl_games' `bounds_loss`)."""
    return (torch.relu(mean - soft_bound).pow(2) + torch.relu(-soft_bound - mean).pow(2)).sum(-1).mean()


@dataclasses.dataclass(frozen=True)
class IMPALAConfig:
    num_envs: int = 8
    """envs in each actor's VecEnv (and the one-task worker's)"""
    rollout_steps: int = 20
    """unroll length T: steps per env in one rollout"""
    batch_rollouts: int = 2
    """rollouts per learner step in an actor-learner segment (a one-task segment learns from each rollout alone)"""
    learning_rate: float = 2e-3
    """Adam step size for actor and critic"""
    gamma: float = 0.99
    """discount factor"""
    rho_bar: float = 1.0
    """V-trace's truncation of the importance weights in the targets and the policy gradient"""
    c_bar: float = 1.0
    """V-trace's truncation of the trace coefficients"""
    ent_coef: float = 0.01
    """weight of the entropy bonus"""
    vf_coef: float = 0.5
    """weight of the value loss"""
    max_grad_norm: float = 0.5
    """global gradient norm clip"""
    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actor and of the critic"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy, in [-1, 1] action units"""
    bound_coef: float = BOUND_COEF
    """Box actions: weight of the bounds loss, the squared excess of the Gaussian's mean past +-1.1 (in [-1, 1] units),
    which holds the mean near the clipped range where stale-policy gradients would push it away (0: off; Discrete:
    unused)"""
    reward_scale: float = 1.0
    """rewards are multiplied by this before learning (returns are reported unscaled)"""
    seed: int = 0
    """added to a draw from torch's global RNG to seed initialisation and action sampling; 0 to 2**32 - 1"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        checks = [
            ("num_envs", self.num_envs >= 1, ">= 1"),
            ("rollout_steps", self.rollout_steps >= 1, ">= 1"),
            ("batch_rollouts", self.batch_rollouts >= 1, ">= 1"),
            ("learning_rate", self.learning_rate > 0, "> 0"),
            ("gamma", 0 <= self.gamma <= 1, "in [0, 1]"),
            ("rho_bar", self.rho_bar > 0, "> 0"),
            ("c_bar", 0 < self.c_bar, "> 0"),
            ("ent_coef", self.ent_coef >= 0, ">= 0"),
            ("vf_coef", self.vf_coef > 0, "> 0"),
            ("bound_coef", self.bound_coef >= 0, ">= 0"),
            ("max_grad_norm", self.max_grad_norm > 0, "> 0"),
            ("hidden", len(self.hidden) >= 1 and min(self.hidden) >= 1, "a non-empty list of sizes >= 1"),
            ("log_std_init", PolicyHead.LOG_STD_MIN <= self.log_std_init <= PolicyHead.LOG_STD_MAX,
             f"in [{PolicyHead.LOG_STD_MIN}, {PolicyHead.LOG_STD_MAX}]"),  # as the team algorithms' (mappo.py)
            ("reward_scale", self.reward_scale > 0, "> 0"),
            ("seed", 0 <= self.seed < 2**32, "in [0, 2**32 - 1]"),  # as ppo.py's
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")


@dataclasses.dataclass
class Rollout:
    """`T` steps of `B` envs under one behaviour policy version; what an actor ships to the learner."""

    obs: Tensor
    """`[T, B, obs_dim]` the observations acted on."""
    next_obs: Tensor
    """`[T, B, obs_dim]` the observation each step led to (the final one where an episode ended)."""
    actions: Tensor
    """`[T, B]` int64 (Discrete) or `[T, B, act_dim]` raw Gaussian samples (Box)."""
    behaviour_log_prob: Tensor
    """`[T, B]` log mu(a_t | x_t) under the actor's policy."""
    rewards: Tensor
    """`[T, B]` rewards, scaled by `reward_scale`."""
    terminated: Tensor
    """`[T, B]` bool: the episode ended in a terminal state (nothing to bootstrap from)."""
    truncated: Tensor
    """`[T, B]` bool: the episode was cut by a time limit (bootstrap from V(next_obs))."""

    @property
    def transitions(self) -> int:
        return int(self.rewards.numel())

    def to_numpy(self) -> dict[str, np.ndarray]:
        """Plain arrays, to cross a process boundary (torch's own pickling would share memory by file descriptor)."""
        return {f.name: getattr(self, f.name).cpu().numpy() for f in dataclasses.fields(self)}

    @classmethod
    def from_numpy(cls, arrays: Mapping[str, np.ndarray], device: torch.device) -> Rollout:
        return cls(**{f.name: torch.as_tensor(arrays[f.name], device=device) for f in dataclasses.fields(cls)})

    @classmethod
    def concat(cls, rollouts: Sequence[Rollout]) -> Rollout:
        """One `[T, sum B]` rollout from rollouts of equal `T` (along the env axis)."""
        return cls(**{f.name: torch.cat([getattr(r, f.name) for r in rollouts], dim=1)
                      for f in dataclasses.fields(cls)})


class IMPALAAgent:
    """An IMPALA actor and learner on one device; see the module docstring."""

    algorithm: ClassVar[str] = "impala"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: IMPALAConfig, device: torch.device) -> None:
        self.config = config
        self.device = torch.device(device)
        self.obs_dim = observation_width(observation_space, self.algorithm)
        # a rollout's obs, next_obs, actions, log-probs and rewards, built step by step (no buffer allocated up
        # front): `rollout_steps = 1000000000` grew a worker's memory for as long as the budget ran, and no segment
        # ended. One rollout: `batch_rollouts` of them are held together only by an [actors] learner
        row = 2 * self.obs_dim + math.prod(action_space.shape or (1,)) + 2
        check_buffer_fits(config.rollout_steps * config.num_envs * row * 4, self.device,
                          f"a rollout of hparams.rollout_steps x num_envs = {config.rollout_steps:,} x "
                          f"{config.num_envs:,} steps of {row} float32 values")
        # a private stream seeded from torch's global RNG (which a segment seeds) plus config.seed, as PPO's
        seed = int(torch.randint(2**62, ())) + config.seed
        init_gen = torch.Generator().manual_seed(seed)
        self.actor = PolicyHead(self.obs_dim, action_space, config.hidden, config.log_std_init, init_gen)
        self.actor.to(self.device)
        self.critic = mlp([self.obs_dim, *config.hidden, 1], nn.Tanh)
        for layer in (m for m in self.critic if isinstance(m, nn.Linear)):
            nn.init.orthogonal_(layer.weight, math.sqrt(2), generator=init_gen)
            nn.init.zeros_(layer.bias)
        self.critic.to(self.device)
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = adam(self.params, config.learning_rate, eps=1e-5)
        self.generator = torch.Generator(self.device).manual_seed(seed + 1)
        self.updates = 0
        """Gradient steps taken: the learner's policy version."""

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        obs = obs.reshape(obs.shape[0], -1).to(self.device, torch.float32)
        if deterministic:
            return self.actor.env_action(obs)
        action, _ = self.actor.sample(obs, self.generator)
        return self.actor.env_action(obs, action)

    @torch.no_grad()
    def collect(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, Rollout, tuple[float, int]]:
        """One rollout of `rollout_steps` steps from `obs`. Returns the next observation, the rollout, and the summed
        return and count of the episodes that ended in it."""
        cfg = self.config
        if env.num_envs != cfg.num_envs:
            raise ValueError(f"env has {env.num_envs} envs but impala.num_envs is {cfg.num_envs}")
        steps: dict[str, list[Tensor]] = {f.name: [] for f in dataclasses.fields(Rollout)}
        returns, episodes = torch.zeros(()), torch.zeros(())
        for _ in range(cfg.rollout_steps):
            obs = obs.reshape(obs.shape[0], -1).to(self.device, torch.float32)
            action, log_prob = self.actor.sample(obs, self.generator)
            next_obs, reward, terminated, truncated, info = env.step(self.actor.env_action(obs, action))
            for name, value in (("obs", obs), ("actions", action), ("behaviour_log_prob", log_prob),
                                ("rewards", reward.to(torch.float32) * cfg.reward_scale),
                                ("next_obs", info["final_obs"].reshape(obs.shape[0], -1).to(torch.float32)),
                                ("terminated", terminated.bool()), ("truncated", truncated.bool())):
                steps[name].append(value.to(self.device))
            done = (terminated | truncated).float().cpu()
            returns += (info["episode_return"].cpu() * done).sum()
            episodes += done.sum()
            obs = next_obs
        rollout = Rollout(**{name: torch.stack(values) for name, values in steps.items()})
        return obs, rollout, (float(returns), int(episodes))

    def start_acting(self, index: int, workers: int) -> dict[str, float]:
        """Every IMPALA actor samples from the policy it holds: nothing to set."""
        return {}

    def trajectory_arrays(self, trajectory: Rollout) -> dict[str, np.ndarray]:
        return trajectory.to_numpy()

    def trajectory_from_arrays(self, arrays: Mapping[str, np.ndarray]) -> Rollout:
        return Rollout.from_numpy(arrays, self.device)

    def learner_feed(self) -> LearnerFeed:
        """One gradient step per `batch_rollouts` rollouts, under the staleness bound and reuse of `[actors]`."""
        return LearnerFeed(batch=self.config.batch_rollouts, replay=False)

    def learn(self, rollouts: Sequence[Rollout]) -> Metrics:
        """One gradient step on `rollouts` (equal `T`, any mix of behaviour versions) with V-trace."""
        cfg = self.config
        batch = Rollout.concat([r if r.obs.device == self.device else _to(r, self.device) for r in rollouts])
        T, B = batch.rewards.shape
        out = self.actor.body(batch.obs.flatten(0, 1))  # one forward pass: the log-probs' and the bounds loss's
        log_prob, entropy = self.actor.log_prob_entropy_of(out, batch.actions.flatten(0, 1))
        log_prob, entropy = log_prob.reshape(T, B), entropy.reshape(T, B)
        mean_bound_loss = log_prob.new_zeros(()) if self.actor.discrete else bounds_loss(out)
        values = self.critic(batch.obs).squeeze(-1)
        targets = self.vtrace_targets(batch, log_prob.detach(), values.detach())
        pg_loss = -(log_prob * targets.pg_advantages).mean()
        v_loss = 0.5 * (targets.vs - values).pow(2).mean()
        entropy_mean = entropy.mean()
        loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy_mean + cfg.bound_coef * mean_bound_loss
        regress(self.optimizer, loss, cfg.max_grad_norm, self.params)
        self.updates += 1
        return {"policy_loss": float(pg_loss.detach()), "value_loss": float(v_loss.detach()),
                "entropy": float(entropy_mean.detach()), "mean_rho": float(targets.clipped_rhos.mean())}

    @torch.no_grad()
    def vtrace_targets(self, batch: Rollout, log_prob: Tensor | None = None, values: Tensor | None = None) -> VTrace:
        """V-trace's value targets and advantages `[T, B]` for `batch`, what `learn` trains on; `log_prob` (log pi of
        the actions) and `values` (V(obs)) `[T, B]` under the learner's networks, computed here if not given.
        An episode cut by a time limit bootstraps from V(final observation), folded into its reward with a discount
        of 0; a terminated one from nothing."""
        cfg = self.config
        T, B = batch.rewards.shape
        if log_prob is None:
            log_prob = self.actor.log_prob_entropy(batch.obs.flatten(0, 1), batch.actions.flatten(0, 1))[0]
            log_prob = log_prob.reshape(T, B)
        if values is None:
            values = self.critic(batch.obs).squeeze(-1)
        next_values = self.critic(batch.next_obs).squeeze(-1)
        cut = batch.truncated & ~batch.terminated  # a time limit: bootstrap from the final observation, then stop
        rewards = batch.rewards + cfg.gamma * next_values * cut
        discounts = cfg.gamma * (~(batch.terminated | batch.truncated)).float()
        return vtrace(batch.behaviour_log_prob, log_prob, rewards, discounts, values, next_values[-1],
                      rho_bar=cfg.rho_bar, c_bar=cfg.c_bar)

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        """One-task mode: the agent is its own actor, so every step is on-policy (V-trace's rhos are 1)."""
        obs, rollout, (returns, episodes) = self.collect(env, obs)
        metrics = self.learn([rollout])
        if episodes:
            metrics["episode_return"] = returns / episodes
        return obs, rollout.transitions, metrics

    def finish(self) -> None:
        """Nothing runs between iterations."""

    def policy_state(self) -> dict[str, np.ndarray]:
        """The actor network's parameters as numpy arrays: what an actor process needs to act."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.actor.state_dict().items()}

    def load_policy_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.actor.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})

    def state_dict(self) -> dict[str, Any]:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_learning_rate(self.optimizer, self.config.learning_rate)  # this segment's rate wins
        self.updates = int(state["updates"])


def _to(rollout: Rollout, device: torch.device) -> Rollout:
    return Rollout(**{f.name: getattr(rollout, f.name).to(device) for f in dataclasses.fields(Rollout)})


register_algorithm(AlgorithmInfo(
    name="impala",
    config_cls=IMPALAConfig,
    factory=IMPALAAgent,
    tunable=("learning_rate", "gamma", "rho_bar", "c_bar", "ent_coef", "vf_coef", "max_grad_norm", "reward_scale"),
    data_parallel=True,  # one rollout, one gradient step per iteration: [learners] keep in step
))
