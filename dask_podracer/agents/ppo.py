"""Proximal Policy Optimisation (clipped surrogate, GAE), in the manner of CleanRL / SB3.

One iteration: act `rollout_steps` steps in each of `num_envs` envs (all on the env's device),
compute GAE bootstrapping through time-limit truncation, then run `epochs` passes of shuffled
minibatch updates of a joint actor + critic loss. Continuous actions use a Gaussian with a
state-independent log-std in [-1, 1] units, clipped and scaled to the Box when stepping the env;
Discrete actions use a categorical policy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import Tensor, nn

from dask_podracer.agents import captured
from dask_podracer.agents.base import (ALONE, MOST_EPOCHS, AlgorithmInfo, Metrics, Peers, observation_width,
                                       register_algorithm, regress)
from dask_podracer.agents.captured import COMPILE_MODES
from dask_podracer.agents.networks import ActionScale, mlp
from dask_podracer.agents.normalization import ObservationNormalizer, RewardNormalizer
from dask_podracer.agents.rollout import RolloutBuffer, compute_gae, explained_variance
from dask_podracer.envs import VecEnv


LR_SCHEDULES = ("fixed", "adaptive")
ADAPTIVE_LR_FACTOR = 1.5
"""rl_games' AdaptiveScheduler's factor."""


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    num_envs: int = 64
    """envs in the worker's VecEnv"""
    rollout_steps: int = 64
    """steps per env per iteration (an iteration collects num_envs * rollout_steps transitions)"""
    learning_rate: float = 1e-3
    """Adam step size for actor and critic"""
    gamma: float = 0.95
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
    max_grad_norm: float = 0.5
    """global gradient norm clip"""
    epochs: int = 10
    """passes over each rollout"""
    num_minibatches: int = 8
    """minibatches per epoch"""
    target_kl: float | None = None
    """if set, stop an iteration's epochs once the approximate KL exceeds it"""
    lr_schedule: str = "fixed"
    """"fixed": learning_rate throughout; "adaptive": after every minibatch step the rate is divided by 1.5 when the
    step's approximate KL exceeded 2 x desired_kl and multiplied by 1.5 when it fell below desired_kl / 2, within
    lr_bounds (rl_games' adaptive schedule, as IsaacGymEnvs' PPO configs use it). Each segment starts from
    learning_rate (a child's perturbed rate); the rate reached is the `learning_rate` metric"""
    desired_kl: float = 0.008
    """the approximate KL per minibatch step that lr_schedule = "adaptive" steers towards (rl_games' kl_threshold)"""
    lr_bounds: tuple[float, float] = (1e-6, 1e-2)
    """[lowest, highest] rate the adaptive schedule may reach (rl_games' defaults); learning_rate, where it starts,
    must lie within them"""
    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actor and of the critic"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy, in [-1, 1] action units"""
    normalize_advantages: bool = True
    """standardise advantages within each minibatch"""
    normalize_observations: bool = False
    """feed the networks observations normalised by a running mean and variance of those collected (kept by the
    agent, carried in checkpoints)"""
    normalize_rewards: bool = False
    """scale rewards by the running standard deviation of the discounted return (no shift; kept by the agent,
    carried in checkpoints; reward_scale still multiplies the result, so set it to 1 for SB3's VecNormalize;
    reported returns stay raw)"""
    reward_scale: float = 0.1
    """rewards are multiplied by this before learning (returns are reported unscaled)"""
    seed: int = 0
    """added to a draw from torch's global RNG to seed initialisation, action sampling and shuffling; 0 to 2**32 - 1"""
    compile: str = "auto"
    """captured minibatch update (agents/captured.py): "auto" (the default) replays each one as one CUDA graph on
    CUDA and runs it eagerly on a CPU, where compiling does not pay; "on" captures everywhere (torch.compile on a
    CPU); "off" is eager everywhere (the reference)"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        object.__setattr__(self, "lr_bounds", tuple(float(b) for b in self.lr_bounds))
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
            ("target_kl", self.target_kl is None or self.target_kl > 0, "None or > 0"),
            ("lr_schedule", self.lr_schedule in LR_SCHEDULES, f"one of {LR_SCHEDULES}"),
            ("desired_kl", self.desired_kl > 0, "> 0"),
            ("lr_bounds", len(self.lr_bounds) == 2 and 0 < self.lr_bounds[0] <= self.lr_bounds[1],
             "[lowest, highest] with 0 < lowest <= highest"),
            # the schedule only keeps a rate in its bounds: from below lowest, a step that should lower it raised it
            # to lowest; from above highest it stayed there while the KL said the policy moved too far
            ("learning_rate", self.lr_schedule != "adaptive" or len(self.lr_bounds) != 2
             or self.lr_bounds[0] <= self.learning_rate <= self.lr_bounds[1],
             f"within lr_bounds {list(self.lr_bounds)} with lr_schedule = \"adaptive\""),
            ("hidden", len(self.hidden) >= 1 and min(self.hidden) >= 1, "a non-empty list of sizes >= 1"),
            ("log_std_init", PolicyHead.LOG_STD_MIN <= self.log_std_init <= PolicyHead.LOG_STD_MAX,
             f"in [{PolicyHead.LOG_STD_MIN}, {PolicyHead.LOG_STD_MAX}]"),  # as the team algorithms' (mappo.py)
            ("reward_scale", self.reward_scale > 0, "> 0"),
            ("compile", self.compile in COMPILE_MODES, f"one of {COMPILE_MODES}"),
            # torch's CPU generator keeps a seed's low 32 bits: seeds equal modulo 2**32 trained alike
            ("seed", 0 <= self.seed < 2**32, "in [0, 2**32 - 1]"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")

    @property
    def batch_size(self) -> int:
        """Transitions per iteration."""
        return self.num_envs * self.rollout_steps


# -- pure losses ---------------------------------------------------------------------------

def clipped_surrogate_loss(log_prob: Tensor, old_log_prob: Tensor, advantages: Tensor,
                           clip_coef: float) -> tuple[Tensor, Tensor, Tensor]:
    """PPO's policy loss -E[min(r A, clip(r, 1-eps, 1+eps) A)], with r = exp(log_prob - old_log_prob).

    All inputs are `[N]`. Returns the loss, the fraction of samples whose ratio was clipped,
    and the approximate KL(old || new) estimate E[(r - 1) - log r] (Schulman's k3), all scalars.
    """
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_coef, 1 + clip_coef) * advantages
    loss = -torch.min(unclipped, clipped).mean()
    with torch.no_grad():
        clip_fraction = ((ratio - 1).abs() > clip_coef).float().mean()
        approx_kl = ((ratio - 1) - log_ratio).mean()
    return loss, clip_fraction, approx_kl


@torch.no_grad()
def adapt_learning_rate(optim: torch.optim.Optimizer, approx_kl: Tensor, desired_kl: float,
                        bounds: tuple[float, float]) -> None:
    """The adaptive schedule's step: every group's rate divided by `ADAPTIVE_LR_FACTOR` when `approx_kl` (0-d)
    exceeds 2 x `desired_kl`, multiplied by it when below `desired_kl` / 2, kept within `bounds`. A
    tensor rate (a captured optimiser's, which its graph reads) is changed in place on its device, without reading
    the KL back to the host; a float rate (eager) reads it."""
    low, high = bounds
    for group in optim.param_groups:
        lr = group["lr"]
        if torch.is_tensor(lr):
            kl = approx_kl.to(lr.device, lr.dtype)
            lowered = (lr / ADAPTIVE_LR_FACTOR).clamp(min=low)
            raised = (lr * ADAPTIVE_LR_FACTOR).clamp(max=high)
            lr.copy_(torch.where(kl > 2 * desired_kl, lowered, torch.where(kl < desired_kl / 2, raised, lr)))
        else:
            kl = float(approx_kl)
            if kl > 2 * desired_kl:
                group["lr"] = max(lr / ADAPTIVE_LR_FACTOR, low)
            elif kl < desired_kl / 2:
                group["lr"] = min(lr * ADAPTIVE_LR_FACTOR, high)


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, clip_value: float | None) -> Tensor:
    """0.5 * E[(V - R)^2] over `[N]` inputs; with `clip_value`, the pessimistic max of the
    unclipped error and the error of `old_values + clip(V - old_values, -c, c)`."""
    error = (values - returns).pow(2)
    if clip_value is not None:
        clipped = old_values + (values - old_values).clamp(-clip_value, clip_value)
        error = torch.max(error, (clipped - returns).pow(2))
    return 0.5 * error.mean()


# -- networks ------------------------------------------------------------------------------

def _orthogonal_init(net: nn.Sequential, last_gain: float, generator: torch.Generator) -> nn.Sequential:
    """CleanRL's init: orthogonal weights (gain sqrt 2, `last_gain` for the output layer), zero biases."""
    linears = [m for m in net if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, last_gain if i == len(linears) - 1 else math.sqrt(2), generator=generator)
        nn.init.zeros_(layer.bias)
    return net


class PolicyHead(nn.Module):
    """pi(a|s) for a Box (Gaussian) or a Discrete (categorical) space.

    The Gaussian's log-std is one learned number per action dimension, whatever the state (the default), or,
    with `state_dependent_std`, a second output of the network beside the mean, offset by `log_std_init` and
    clamped to [LOG_STD_MIN, LOG_STD_MAX] (BenchMARL's policies do this: the policy can be precise in some
    states and explore in others).

    `sample`, `log_prob_entropy` and `env_action` take obs `[B, obs_dim]`; actions are
    `[B, act_dim]` raw Gaussian samples in [-1, 1] units (clipped only in `env_action`),
    or `[B]` int64 for Discrete.
    """

    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    def __init__(self, obs_dim: int, action_space: gym.spaces.Space, hidden: tuple[int, ...],
                 log_std_init: float, generator: torch.Generator, state_dependent_std: bool = False) -> None:
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.state_dependent_std = state_dependent_std and not self.discrete
        self.log_std_init = float(log_std_init)
        if self.discrete:
            out = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            out = action_space.shape[0]
            if self.state_dependent_std:
                out *= 2  # [mean, log-std offset]
            else:
                self.log_std = nn.Parameter(torch.full((out,), float(log_std_init)))
            self.scale = ActionScale(action_space.low, action_space.high)
        else:
            raise ValueError(f"ppo supports 1-D Box or Discrete action spaces, got {action_space}")
        self.body = _orthogonal_init(mlp([obs_dim, *hidden, out], nn.Tanh), 0.01, generator)

    def mean_log_std(self, out: Tensor) -> tuple[Tensor, Tensor]:
        """The Gaussian's mean and log-std `[B, act_dim]` from the body's output `out`."""
        if self.state_dependent_std:
            mean, offset = out.chunk(2, dim=-1)
            return mean, (offset + self.log_std_init).clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        return out, self.log_std.expand_as(out)

    def sample(self, obs: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """A stochastic action and its log-probability `[B]`."""
        out = self.body(obs)
        if self.discrete:
            action = torch.multinomial(out.softmax(-1), 1, generator=generator).squeeze(-1)
            return action, torch.distributions.Categorical(logits=out).log_prob(action)
        mean, log_std = self.mean_log_std(out)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        action = mean + log_std.exp() * noise
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return action, log_prob

    def log_prob_entropy(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """log pi(action|obs) and the policy's entropy, both `[B]`."""
        return self.log_prob_entropy_of(self.body(obs), action)

    def log_prob_entropy_of(self, out: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """`log_prob_entropy` from the body's output `out` (logits; the Gaussian's mean, or with
        `state_dependent_std` its mean and log-std offset), for a caller that needs that output too."""
        if self.discrete:
            dist = torch.distributions.Categorical(logits=out)
            return dist.log_prob(action), dist.entropy()
        mean, log_std = self.mean_log_std(out)
        dist = torch.distributions.Normal(mean, log_std.exp(), validate_args=False)
        return dist.log_prob(action).sum(-1), dist.entropy().sum(-1)

    def mode(self, obs: Tensor) -> Tensor:
        """The most likely raw action: the argmax for Discrete, the Gaussian's mean (unclipped) for a Box."""
        out = self.body(obs)
        return out.argmax(-1) if self.discrete else self.mean_log_std(out)[0]

    def env_action(self, obs: Tensor, action: Tensor | None = None) -> Tensor:
        """What the env is given: `action` (or the mode, if None) clipped and scaled into bounds."""
        if action is None:
            action = self.mode(obs)
        return action if self.discrete else self.scale(action.clamp(-1.0, 1.0))


# -- the agent -----------------------------------------------------------------------------

class PPOAgent:
    """A PPO worker + learner on one device; see the module docstring."""

    algorithm: ClassVar[str] = "ppo"

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 config: PPOConfig, device: torch.device) -> None:
        self.config = config
        self.device = torch.device(device)
        self.obs_dim = observation_width(observation_space, self.algorithm)
        # One private random stream for init, sampling and shuffling, seeded from torch's global RNG (which
        # a segment seeds with its own seed) plus config.seed: reproducible after torch.manual_seed, different
        # for every segment, and unaffected by whatever else draws from the global RNG later.
        seed = int(torch.randint(2**62, ())) + config.seed
        init_gen = torch.Generator().manual_seed(seed)  # nets are built on the CPU, then moved
        self.actor = PolicyHead(self.obs_dim, action_space, config.hidden, config.log_std_init, init_gen)
        self.critic = _orthogonal_init(mlp([self.obs_dim, *config.hidden, 1], nn.Tanh), 1.0, init_gen)
        self.actor.to(self.device)
        self.critic.to(self.device)
        make_adam = captured.optimizer_maker(config.compile, self.device)
        self.optimizer = make_adam([*self.actor.parameters(), *self.critic.parameters()], config.learning_rate,
                                   eps=1e-5)
        self.generator = torch.Generator(self.device).manual_seed(seed + 1)
        discrete = self.actor.discrete
        self.buffer = RolloutBuffer(config.rollout_steps, config.num_envs, self.obs_dim,
                                    () if discrete else tuple(action_space.shape),
                                    torch.int64 if discrete else torch.float32, self.device)
        self.obs_norm = ObservationNormalizer(self.obs_dim, config.normalize_observations, self.device)
        self.reward_norm = RewardNormalizer(config.num_envs, config.gamma, config.normalize_rewards, self.device)
        self.iterations = 0
        self.peers: Peers = ALONE  # the other learners of this agent, if any (`join_peers`)
        self._captured: captured.CapturedUpdate | None = None
        if captured.use_capture(config.compile, self.device):
            self._bind_update()

    def _bind_update(self) -> None:
        """Captured mode: the process's captured minibatch update for these shapes. Minibatches are near-equal
        parts of the rollout (`RolloutBuffer.minibatches`): the graph takes the smaller size, a larger one (when
        num_minibatches does not divide batch_size) runs eagerly on the same networks."""
        cfg, buf = self.config, self.buffer
        n = cfg.batch_size // cfg.num_minibatches
        example = {"obs": torch.zeros(n, self.obs_dim, device=self.device),
                   "actions": torch.zeros((n, *buf.actions.shape[2:]), dtype=buf.actions.dtype, device=self.device),
                   **{k: torch.zeros(n, device=self.device) for k in ("log_probs", "values", "advantages", "returns")}}
        modes = (cfg.normalize_advantages, cfg.clip_value, cfg.max_grad_norm)
        key = (self.algorithm, n, self.obs_dim, tuple(example["actions"].shape[1:]), str(buf.actions.dtype),
               self.actor.discrete, cfg.hidden, *modes, str(self.device))
        self._captured = captured.bind(
            self, key, PPO_STATE, {"clip_coef": cfg.clip_coef, "ent_coef": cfg.ent_coef, "vf_coef": cfg.vf_coef},
            {"optimizer": cfg.learning_rate}, {"update": lambda nets, hp, mb: ppo_update(nets, hp, mb, *modes)},
            example)["update"]

    def join_peers(self, peers: Peers) -> None:
        """Train as one of several learners whose gradients are averaged (`[learners]`, train/learners.py): every
        learner stops an iteration's epochs after the same epoch (`target_kl` is compared with the approximate KL's
        mean over the learners) and normalises with the same statistics (each takes in every learner's batches).
        Minibatches are shuffled, and advantages standardised, by each learner on its own data."""
        if self._captured is not None:
            raise ValueError(f"{self.algorithm}: a captured update cannot average gradients inside its graph; "
                             f"several learners need compile = \"off\"")
        self.peers = peers
        self.obs_norm.join(peers)
        self.reward_norm.join(peers)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        obs = self.obs_norm(obs.reshape(obs.shape[0], -1).to(self.device, torch.float32))
        if deterministic:
            return self.actor.env_action(obs)
        action, _ = self.actor.sample(obs, self.generator)
        return self.actor.env_action(obs, action)

    def value(self, obs: Tensor) -> Tensor:
        """V(obs): `[..., obs_dim]` -> `[...]`."""
        return self.critic(obs).squeeze(-1)

    @torch.no_grad()
    def collect(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Fill the buffer with `rollout_steps` steps of `env`. Returns the next obs and the summed
        returns and count of the episodes that ended (0-dim tensors, kept on device)."""
        if env.num_envs != self.config.num_envs:
            raise ValueError(f"env has {env.num_envs} envs but ppo.num_envs is {self.config.num_envs}")
        buf, scale = self.buffer, self.config.reward_scale
        ep_return_sum = torch.zeros((), device=self.device)
        ep_count = torch.zeros((), device=self.device)
        for t in range(self.config.rollout_steps):
            obs = obs.reshape(obs.shape[0], -1).to(torch.float32)
            self.obs_norm.update(obs)
            obs = self.obs_norm(obs)  # stored normalised: every epoch of this rollout sees one scale per step
            action, log_prob = self.actor.sample(obs, self.generator)
            value = self.value(obs)
            next_obs, reward, terminated, truncated, info = env.step(self.actor.env_action(obs, action))
            final_obs = self.obs_norm(info["final_obs"].reshape(obs.shape[0], -1).to(torch.float32))
            self.reward_norm.update(reward, terminated | truncated)
            buf.add(t, obs, action, log_prob, value, self.reward_norm(reward) * scale, final_obs, terminated, truncated)
            done = (terminated | truncated).float()
            ep_return_sum += (info["episode_return"] * done).sum()
            ep_count += done.sum()
            obs = next_obs
        return obs, ep_return_sum, ep_count

    @torch.no_grad()
    def rollout_targets(self) -> tuple[Tensor, Tensor]:
        """GAE advantages and returns `[T, B]` of the rollout in the buffer: what the updates train on. A step that
        ended its episode bootstraps from V(final_obs) when truncated, from nothing when terminated."""
        cfg, buf = self.config, self.buffer
        next_values = self.value(buf.final_obs)
        return compute_gae(buf.rewards, buf.values, next_values, buf.terminated, buf.dones, cfg.gamma,
                           cfg.gae_lambda)

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        cfg, buf = self.config, self.buffer
        obs, ep_return_sum, ep_count = self.collect(env, obs)
        advantages, returns = self.rollout_targets()
        flat = {
            "obs": buf.obs.flatten(0, 1), "actions": buf.actions.flatten(0, 1),
            "log_probs": buf.log_probs.flatten(), "values": buf.values.flatten(),
            "advantages": advantages.flatten(), "returns": returns.flatten(),
        }
        totals: dict[str, Tensor] = {}
        updates = 0
        for _ in range(cfg.epochs):
            for idx in buf.minibatches(cfg.num_minibatches, self.generator):
                stats = self._update({k: v[idx] for k, v in flat.items()})
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + v
                updates += 1
            # with several learners, the KL of all their last minibatches: every learner stops after the same epoch
            if cfg.target_kl is not None and (self.peers.mean(stats["approx_kl"]) > cfg.target_kl).item():
                break
        self.iterations += 1
        metrics = {k: float(v) / updates for k, v in totals.items()}
        metrics["explained_variance"] = float(explained_variance(flat["values"], flat["returns"]))
        metrics["updates"] = float(updates)
        if cfg.lr_schedule == "adaptive":
            metrics["learning_rate"] = float(self.optimizer.param_groups[0]["lr"])
        count = float(ep_count)
        if count > 0:  # only when some episode ended in this rollout
            metrics["episode_return"] = float(ep_return_sum) / count
        return obs, cfg.batch_size, metrics

    def finish(self) -> None:
        """Nothing runs between iterations: each `train_iteration` ends with its updates made."""

    def _update(self, mb: dict[str, Tensor]) -> dict[str, Tensor]:
        """One gradient step on a minibatch (`ppo_update`), captured when its size is the captured one; then, with
        the adaptive schedule, the learning rate's step (with several learners, on their mean KL: one rate)."""
        cfg = self.config
        if self._captured is not None and mb["obs"].shape[0] == self._captured.inputs["obs"].shape[0]:
            stats = self._captured(mb)
        else:
            stats = ppo_update(self, cfg, mb, cfg.normalize_advantages, cfg.clip_value, cfg.max_grad_norm)
        if cfg.lr_schedule == "adaptive":
            adapt_learning_rate(self.optimizer, self.peers.mean(stats["approx_kl"]), cfg.desired_kl, cfg.lr_bounds)
        return stats

    def state_dict(self) -> dict[str, Any]:
        state = {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                 "optimizer": captured.saved_optimizer(self.optimizer), "iterations": self.iterations}
        self.obs_norm.save_into(state)
        self.reward_norm.save_into(state)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.obs_norm.load_from(state, self.algorithm)
        self.reward_norm.load_from(state)
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        # this segment's rate wins
        captured.load_optimizer(self.optimizer, state["optimizer"], self.config.learning_rate)
        self.iterations = int(state["iterations"])


PPO_STATE = ("actor", "critic", "optimizer")
"""The agent's attributes a minibatch update reads and writes (a captured update's workspace)."""


def ppo_update(nets: Any, hp: Any, mb: dict[str, Tensor], normalize_advantages: bool, clip_value: float | None,
               max_grad_norm: float) -> dict[str, Tensor]:
    """One gradient step on a minibatch (`obs` `[N, obs_dim]`, `actions` `[N, ...]`, `log_probs`, `values`,
    `advantages`, `returns` `[N]`). `nets` holds `PPO_STATE` (an agent, or a captured update's workspace); `hp`
    clip_coef, ent_coef and vf_coef, floats (the config) or 0-d tensors. Returns detached scalars."""
    log_prob, entropy = nets.actor.log_prob_entropy(mb["obs"], mb["actions"])
    advantages = mb["advantages"]
    if normalize_advantages and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss, clip_fraction, approx_kl = clipped_surrogate_loss(log_prob, mb["log_probs"], advantages, hp.clip_coef)
    v_loss = value_loss(nets.critic(mb["obs"]).squeeze(-1), mb["values"], mb["returns"], clip_value)
    entropy = entropy.mean()
    loss = pg_loss - hp.ent_coef * entropy + hp.vf_coef * v_loss
    regress(nets.optimizer, loss, max_grad_norm, [*nets.actor.parameters(), *nets.critic.parameters()])
    return {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": entropy.detach(),
            "approx_kl": approx_kl, "clip_fraction": clip_fraction}


register_algorithm(AlgorithmInfo(
    name="ppo",
    config_cls=PPOConfig,
    factory=PPOAgent,
    tunable=("learning_rate", "gamma", "gae_lambda", "clip_coef", "ent_coef", "vf_coef", "max_grad_norm",
             "reward_scale", "desired_kl"),
    data_parallel=True,  # the same epochs and minibatches on every learner; target_kl and normalisers agreed
))
