"""What an algorithm provides to train in an actor-learner segment (`[actors]`, train/actor_learner.py).

Actors call `start_acting` once, then `collect` with the newest `policy_state` the learner sent, and ship each
trajectory as `trajectory_arrays`; the learner turns what arrives back into trajectories on its device
(`trajectory_from_arrays`), calls `learn` on them as its `learner_feed` says, and counts its gradient steps in
`updates` (the policy version). Two kinds of learner fit:

- an on-policy-ish learner (IMPALA) trains on batches of the newest trajectories: the learner drops those whose
  policy lag passes `actors.max_policy_lag` and hands each out at most `actors.reuse` times;
- a replay learner (Ape-X: the DQN family, DDPG and TD3, `apex.ApexAgent`) keeps every trajectory it is given in its replay buffer and decides
  itself how many updates they earn: the learner hands it everything that arrived, each trajectory once.

The learner stays algorithm-agnostic: it never looks inside a trajectory, except for its `rewards` array (one
entry per transition), which it counts against the segment's step budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from torch import Tensor

from dask_podracer.agents.base import Metrics, algorithm_info
from dask_podracer.envs import VecEnv


@dataclasses.dataclass(frozen=True)
class LearnerFeed:
    """How the learner hands the actors' trajectories to the agent's `learn`."""

    batch: int
    """Trajectories a `learn` call needs at least (the learner waits for them)."""
    replay: bool
    """A replay learner: every trajectory waiting goes to the next `learn` call, once, whatever its policy lag
    (the agent keeps it in its replay buffer). Otherwise `learn` gets exactly `batch` trajectories, the staleness
    bound and reuse of `[actors]` applying."""


@runtime_checkable
class LearnsFromActors(Protocol):
    """Also an `Agent`; its `updates` attribute counts its gradient steps (the policy version)."""

    def start_acting(self, index: int, workers: int) -> dict[str, float]:
        """Called once in actor process `index` of `workers`, before its first `collect` (Ape-X: take this actor's
        rung of the exploration ladder). Returns the settings it took, for the actor's report."""
        ...

    def collect(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, Any, tuple[float, int]]:
        """One trajectory from `obs`: the next observation, the trajectory, (summed return, count) of ended episodes."""
        ...

    def trajectory_arrays(self, trajectory: Any) -> dict[str, np.ndarray]:
        """`trajectory` as plain numpy arrays, to cross a process boundary; `rewards` has one entry per transition."""
        ...

    def trajectory_from_arrays(self, arrays: Mapping[str, np.ndarray]) -> Any:
        """The trajectory `trajectory_arrays` made, on this agent's device."""
        ...

    def learner_feed(self) -> LearnerFeed: ...

    def learn(self, trajectories: Sequence[Any]) -> Metrics:
        """Learn from trajectories, whatever policy versions generated them (IMPALA: one gradient step on the batch;
        a replay learner: store them, then the updates they earn)."""
        ...

    def policy_state(self) -> dict[str, Any]:
        """What an actor needs to act, as numpy arrays."""
        ...

    def load_policy_state(self, state: Mapping[str, Any]) -> None: ...


def learns_from_actors(algorithm: str) -> bool:
    """Whether `algorithm`'s agents can be the learner of actor tasks."""
    factory = algorithm_info(algorithm).factory
    return isinstance(factory, type) and issubclass(factory, LearnsFromActors)


WEIGHTS_EVERY_PAST_LAG = ("actors.weights_every must be <= max_policy_lag + 1 (= {limit}) for an IMPALA learner, got "
                          "{weights_every}: every rollout would pass the lag bound before the learner sends newer "
                          "weights, and it would drop them all from then on")
"""Refused, at config time and by the learner: an IMPALA learner makes at most `max_policy_lag + 1` gradient steps on
rollouts of the weights it last sent, and sends newer ones only after `weights_every` steps."""
