"""Ape-X (Horgan et al. 2018) for the DQN family: actors on the rungs of an epsilon ladder, a prioritised replay
learner. The DQN agent (`dqn.py`) implements `LearnsFromActors` with these functions.

- Actor i of N acts epsilon-greedily with its own fixed eps_i = apex_epsilon^(1 + apex_alpha * i / (N - 1))
  (`ladders.epsilon_ladder`; one actor gets apex_epsilon), from its first step: no random warm-up, no decay.
- It collects `apex_send_steps` steps of its `num_envs` envs (a `chunk`: rows of transitions), computes their
  initial priorities |TD error| with its copy of the Q-network and target network (with `prioritized`), and ships
  the chunk, its priorities and its epsilon as plain arrays.
- The learner stores every chunk in its replay buffer, the actor's priorities as the rows' priorities, never
  dropping one for its policy lag (Q-learning is off-policy: a transition from an older policy is still a valid
  sample), and makes the updates the transitions earn: `utd_ratio` per transition received, fractions carried,
  once `learning_starts` transitions arrived, as one-task DQN does for the transitions it collects. Its batches
  are drawn by priority with importance weights (beta annealed over its updates: `prioritized_replay.py`) and
  the drawn rows' priorities become |TD error|, exactly as in one task.
- `ActorTally` counts, on the learner, what the actors sent: the epsilons they used, the priorities received.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dask_podracer.agents.base import Metrics
from dask_podracer.agents.loop import OffPolicyLearner, sample_batch, update_priorities
from dask_podracer.envs import VecEnv

CHUNK_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")
"""A chunk's row-aligned tensors (`[N, ...]`, N = steps * envs); `priorities` `[N]` and `epsilon` `[]` may follow."""


@torch.no_grad()
def collect_chunk(agent: OffPolicyLearner, env: VecEnv, obs: Tensor,
                  steps: int) -> tuple[Tensor, dict[str, Tensor], tuple[float, int]]:
    """`steps` steps of every env from `obs`, acting with `agent.explore` (its epsilon) on normalised observations.
    Returns the next observation, the chunk (`CHUNK_FIELDS`, raw observations and rewards, time-major rows) and
    the summed return and count of the episodes that ended in it."""
    rows: dict[str, list[Tensor]] = {name: [] for name in CHUNK_FIELDS}
    returns, episodes = torch.zeros(()), torch.zeros(())
    for _ in range(steps):
        obs = obs.to(agent.device, torch.float32)
        action = agent.explore(agent.obs_norm(obs), agent.behaviour)
        next_obs, reward, terminated, truncated, info = env.step(action)
        for name, value in (("obs", obs), ("actions", action), ("rewards", reward.to(torch.float32)),
                            ("next_obs", info["final_obs"].to(torch.float32)), ("terminated", terminated.bool())):
            rows[name].append(value.to(agent.device))
        done = (terminated | truncated).float().cpu()
        returns += (info["episode_return"].cpu() * done).sum()
        episodes += done.sum()
        obs = next_obs
    chunk = {name: torch.cat(values) for name, values in rows.items()}
    return obs, chunk, (float(returns), int(episodes))


def chunk_arrays(chunk: Mapping[str, Tensor]) -> dict[str, np.ndarray]:
    """Plain arrays, to cross a process boundary."""
    return {name: value.detach().cpu().numpy() for name, value in chunk.items()}


def chunk_from_arrays(arrays: Mapping[str, np.ndarray], device: torch.device) -> dict[str, Tensor]:
    return {name: torch.as_tensor(value, device=device) for name, value in arrays.items()}


@dataclasses.dataclass
class ActorTally:
    """What a learner received from its actors, for its metrics."""

    epsilons: set[float] = dataclasses.field(default_factory=set)
    """The distinct epsilons the actors acted with."""
    transitions: int = 0
    priorities_received: int = 0
    """Transitions that came with an actor's initial priority (stored as their priority)."""
    priority_sum: float = 0.0

    def add(self, chunk: Mapping[str, Tensor]) -> None:
        self.transitions += int(chunk["rewards"].numel())
        if "epsilon" in chunk:
            self.epsilons.add(float(chunk["epsilon"]))
        if "priorities" in chunk:
            self.priorities_received += int(chunk["priorities"].numel())
            self.priority_sum += float(chunk["priorities"].sum())

    def metrics(self) -> Metrics:
        out = {"actor_priorities_received": float(self.priorities_received)}
        if self.epsilons:
            out["actor_epsilon_min"], out["actor_epsilon_max"] = min(self.epsilons), max(self.epsilons)
            out["actor_epsilons"] = float(len(self.epsilons))
        if self.priorities_received:
            out["actor_priority_mean"] = self.priority_sum / self.priorities_received
        return out


def learn_from_chunks(agent: OffPolicyLearner, chunks: Sequence[Mapping[str, Tensor]], tally: ActorTally,
                      earned_updates: Callable[[int], int]) -> Metrics:
    """Store each chunk (with its actor's priorities, if it has them and the replay is prioritised), then make
    every update they earned (`earned_updates(transitions)`, called after each chunk is stored). Returns the last
    update's losses, if any, and the tally's metrics."""
    owed = 0
    for chunk in chunks:
        n = int(chunk["rewards"].numel())
        agent.obs_norm.update(chunk["obs"])
        fields = (chunk["obs"], chunk["actions"], chunk["rewards"], chunk["next_obs"], chunk["terminated"])
        if agent.config.prioritized and "priorities" in chunk:
            agent.replay.add(*fields, priority=chunk["priorities"])
        else:
            agent.replay.add(*fields)
        agent.env_steps += n
        tally.add(chunk)
        owed += earned_updates(n)
    metrics: Metrics = {}
    losses: dict[str, Any] = {}
    for _ in range(owed):
        batch = sample_batch(agent)
        losses = agent.update(batch)
        update_priorities(agent, batch, losses)
    metrics.update({k: float(v) for k, v in losses.items()})
    metrics["replay_size"] = float(agent.replay.size)
    metrics.update(tally.metrics())
    return metrics
