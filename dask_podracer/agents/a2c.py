"""A2C (Mnih et al. 2016, synchronous): one policy-gradient step per short rollout.

A2C is PPO's single-epoch, single-minibatch case: the rollout's own policy is the one
being updated, so the probability ratio is exactly 1, nothing is clipped, and the
clipped surrogate's gradient is the plain policy gradient -E[A * grad log pi(a|s)]
(`tests/test_agents_onpolicy.py` checks this). So the agent is PPO's worker + learner
(ppo.py: Gaussian or categorical policy, GAE, on-device rollouts) under this config;
what makes it A2C is few steps per env, one gradient step per rollout and no clipping.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from dask_podracer.agents.base import AlgorithmInfo, register_algorithm
from dask_podracer.agents.captured import COMPILE_MODES
from dask_podracer.agents.ppo import PolicyHead, PPOAgent


@dataclasses.dataclass(frozen=True)
class A2CConfig:
    num_envs: int = 16
    """envs in the worker's VecEnv"""
    rollout_steps: int = 5
    """steps per env per iteration (one gradient step per num_envs * rollout_steps transitions)"""
    learning_rate: float = 7e-4
    """Adam step size for actor and critic"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 1.0
    """lambda of generalised advantage estimation (1.0: n-step returns, as in the original A2C)"""
    ent_coef: float = 0.0
    """weight of the entropy bonus"""
    vf_coef: float = 0.5
    """weight of the value loss"""
    max_grad_norm: float = 0.5
    """global gradient norm clip"""
    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actor and of the critic"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy, in [-1, 1] action units"""
    normalize_advantages: bool = False
    """standardise advantages within each rollout"""
    normalize_observations: bool = False
    """feed the networks observations normalised by a running mean and variance of those collected (kept by the
    agent, carried in checkpoints)"""
    normalize_rewards: bool = False
    """scale rewards by the running standard deviation of the discounted return (no shift; kept by the agent,
    carried in checkpoints; reward_scale still multiplies the result, so set it to 1 for SB3's VecNormalize;
    reported returns stay raw)"""
    reward_scale: float = 1.0
    """rewards are multiplied by this before learning (returns are reported unscaled)"""
    seed: int = 0
    """added to a draw from torch's global RNG to seed initialisation, action sampling and shuffling; 0 to 2**32 - 1"""
    compile: str = "auto"
    """captured minibatch update (agents/captured.py): "auto" (the default) replays each one as one CUDA graph on
    CUDA and runs it eagerly on a CPU, where compiling does not pay; "on" captures everywhere (torch.compile on a
    CPU); "off" is eager everywhere (the reference)"""

    # What PPO's learner reads, fixed to A2C's values: one pass, one minibatch, no clipping.
    epochs: ClassVar[int] = 1
    num_minibatches: ClassVar[int] = 1
    clip_coef: ClassVar[float] = 1.0
    clip_value: ClassVar[None] = None
    target_kl: ClassVar[None] = None
    lr_schedule: ClassVar[str] = "fixed"

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        checks = [
            ("num_envs", self.num_envs >= 1, ">= 1"),
            ("rollout_steps", self.rollout_steps >= 1, ">= 1"),
            ("learning_rate", self.learning_rate > 0, "> 0"),
            ("gamma", 0 <= self.gamma <= 1, "in [0, 1]"),
            ("gae_lambda", 0 <= self.gae_lambda <= 1, "in [0, 1]"),
            ("ent_coef", self.ent_coef >= 0, ">= 0"),
            ("vf_coef", self.vf_coef > 0, "> 0"),
            ("max_grad_norm", self.max_grad_norm > 0, "> 0"),
            ("hidden", len(self.hidden) >= 1 and min(self.hidden) >= 1, "a non-empty list of sizes >= 1"),
            ("log_std_init", PolicyHead.LOG_STD_MIN <= self.log_std_init <= PolicyHead.LOG_STD_MAX,
             f"in [{PolicyHead.LOG_STD_MIN}, {PolicyHead.LOG_STD_MAX}]"),  # as the team algorithms' (mappo.py)
            ("reward_scale", self.reward_scale > 0, "> 0"),
            ("compile", self.compile in COMPILE_MODES, f"one of {COMPILE_MODES}"),
            ("seed", 0 <= self.seed < 2**32, "in [0, 2**32 - 1]"),  # as ppo.py's
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")

    @property
    def batch_size(self) -> int:
        """Transitions per iteration (and per gradient step)."""
        return self.num_envs * self.rollout_steps


class A2CAgent(PPOAgent):
    """PPO's worker + learner under an A2CConfig (see the module docstring)."""

    algorithm: ClassVar[str] = "a2c"


register_algorithm(AlgorithmInfo(
    name="a2c",
    config_cls=A2CConfig,
    factory=A2CAgent,
    tunable=("learning_rate", "gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm", "reward_scale"),
    data_parallel=True,  # one gradient step per rollout on every learner, normalisers agreed (PPOAgent.join_peers)
))
