"""TD3 (Fujimoto et al. 2018): DDPG plus clipped double Q, target policy smoothing and delayed actor updates.

The update is DDPG's (ddpg.py), with TD3's three knobs on by default: the minimum of a
critic ensemble (`num_critics=2`, or more, combined by `target_combine`) is the TD target,
the target action is smoothed with clipped Gaussian noise (`offpolicy.smoothed_target_action`),
and the actor and the targets move once per `policy_delay` critic updates.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import gymnasium as gym

from dask_podracer.agents.base import AlgorithmInfo, register_algorithm
from dask_podracer.agents.ddpg import DDPGAgent, DDPGConfig
from dask_podracer.agents.ensemble import ENSEMBLE_CHOICES, ENSEMBLE_TUNABLE
from dask_podracer.agents.offpolicy import check


@dataclasses.dataclass(frozen=True)
class TD3Config(DDPGConfig):
    num_critics: int = 2
    """Critics in the ensemble, at least 2 (2: clipped double Q; more: a larger ensemble), as one batched module."""
    target_noise: float = 0.2
    """Std of the target policy smoothing noise, in half-action-range units."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""

    def __post_init__(self) -> None:
        # TD3's target is a minimum over twin (or more) critics; checked first, so 0 gets this message too.
        check(self, "num_critics", self.num_critics >= 2, ">= 2 (twin or larger critics)")
        super().__post_init__()


class TD3Agent(DDPGAgent):
    """DDPG's worker + learner under TD3's defaults."""

    algorithm: ClassVar[str] = "td3"


register_algorithm(AlgorithmInfo(
    name="td3",
    config_cls=TD3Config,
    factory=TD3Agent,
    tunable=("actor_lr", "critic_lr", "tau", "gamma", "utd_ratio", "exploration_noise", "target_noise",
             *ENSEMBLE_TUNABLE),
    choices=ENSEMBLE_CHOICES,
    action_spaces=(gym.spaces.Box,),
))
