"""Ape-X (Horgan et al. 2018) for the off-policy agents: actors on the rungs of an exploration ladder, a prioritised
replay learner. `ApexAgent` implements `LearnsFromActors` for the DQN family (`dqn.py`: an epsilon ladder) and for
DDPG and TD3 (`ddpg.py`: a ladder of Gaussian noise scales); each names its ladder, the networks an actor needs and
its initial priorities.

- Actor i of N acts with its own fixed rung of the ladder (`ladders.py`: the DQN family epsilon-greedily with
  eps_i = apex_epsilon^(1 + apex_alpha * i / (N - 1)); DDPG and TD3 with Gaussian noise of scale
  sigma_i = apex_noise_largest * (apex_noise_smallest / apex_noise_largest)^(i / (N - 1))), from its first step: no
  random warm-up, no decay. One actor gets the top of the ladder.
- It collects `apex_send_steps` steps of its `num_envs` envs (a `chunk`: rows of transitions), computes their
  initial priorities |TD error| with its own copy of the networks (with `prioritized`: the target the learner's
  update regresses to), and ships the chunk, its priorities and its rung as plain arrays.
- The learner stores every chunk in its replay buffer, the actor's priorities as the rows' priorities, never
  dropping one for its policy lag (the learning is off-policy: a transition from an older policy is still a valid
  sample), and makes the updates the transitions earn: `utd_ratio` per transition received, fractions carried,
  once `learning_starts` transitions arrived, as one task does for the transitions it collects. Its batches
  are drawn by priority with importance weights (beta annealed over its updates: `prioritized_replay.py`) and
  the drawn rows' priorities become |TD error|, exactly as in one task.
- `ActorTally` counts, on the learner, what the actors sent: the rungs they acted on, the priorities received.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from dask_podracer.agents.actor_learner import LearnerFeed
from dask_podracer.agents.base import Metrics
from dask_podracer.agents.loop import OffPolicyLearner, sample_batch, update_priorities
from dask_podracer.agents.offpolicy import OffPolicyAgent
from dask_podracer.envs import VecEnv

CHUNK_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")
"""A chunk's row-aligned tensors (`[N, ...]`, N = steps * envs); `priorities` `[N]` and the actor's rung `[]` (its
`epsilon` or `noise_scale`) may follow."""


@torch.no_grad()
def collect_chunk(agent: OffPolicyLearner, env: VecEnv, obs: Tensor,
                  steps: int) -> tuple[Tensor, dict[str, Tensor], tuple[float, int]]:
    """`steps` steps of every env from `obs`, acting with `agent.explore` (its rung) on normalised observations.
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

    rungs: dict[str, set[float]] = dataclasses.field(default_factory=dict)
    """The distinct rungs the actors acted on, by name (`epsilon`, `noise_scale`)."""
    transitions: int = 0
    priorities_received: int = 0
    """Transitions that came with an actor's initial priority (stored as their priority)."""
    priority_sum: float = 0.0

    def add(self, chunk: Mapping[str, Tensor]) -> None:
        self.transitions += int(chunk["rewards"].numel())
        for name in chunk.keys() - {*CHUNK_FIELDS, "priorities"}:  # the actor's rung
            self.rungs.setdefault(name, set()).add(float(chunk[name]))
        if "priorities" in chunk:
            self.priorities_received += int(chunk["priorities"].numel())
            self.priority_sum += float(chunk["priorities"].sum())

    def metrics(self) -> Metrics:
        """`actor_<rung>_min`, `actor_<rung>_max` and `actor_<rung>s` (how many distinct) of each rung, and the
        priorities received (`actor_priorities_received`, `actor_priority_mean`)."""
        out = {"actor_priorities_received": float(self.priorities_received)}
        for name, values in self.rungs.items():
            out[f"actor_{name}_min"], out[f"actor_{name}_max"] = min(values), max(values)
            out[f"actor_{name}s"] = float(len(values))
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


def chunk_batch(chunk: Mapping[str, Tensor], obs_norm: Callable[[Tensor], Tensor]) -> dict[str, Tensor]:
    """A chunk as the learner's update reads a sampled batch: `obs`, `next_obs` normalised by `obs_norm`,
    `action`, `reward` `[N]`, `terminated` `[N]` as floats (rewards raw: Ape-X refuses reward normalisation)."""
    return {"obs": obs_norm(chunk["obs"]), "action": chunk["actions"], "reward": chunk["rewards"],
            "next_obs": obs_norm(chunk["next_obs"]), "terminated": chunk["terminated"].float()}


class ApexAgent(OffPolicyAgent):
    """`LearnsFromActors` (agents/actor_learner.py) for an off-policy agent, as Ape-X: see the module docstring.

    A subclass names the networks an actor acts and computes priorities with (`policy_parts`), its rung
    (`rung_name`, `ladder`) and the |TD error| of a batch under its networks (`initial_priorities`); it acts with
    `self.rung` once `start_acting` set it.
    """

    policy_parts: ClassVar[tuple[str, ...]]
    """The agent's modules an actor needs (its policy, and what its initial priorities read)."""
    rung_name: ClassVar[str]
    """What the rung is (`epsilon`, `noise_scale`): the key of the actor's report and of each chunk."""

    def __init__(self, config: Any, device: torch.device, obs_dim: int, act_dim: int,
                 obs_shape: tuple[int, ...] | None = None) -> None:
        super().__init__(config, device, obs_dim, act_dim, obs_shape)
        self.rung: float | None = None
        """An Ape-X actor's fixed rung of the ladder (`start_acting`); None: the one-task exploration."""
        self.from_actors = ActorTally()

    def ladder(self, workers: int) -> list[float]:
        """The rungs of `workers` actors, actor 0's first (`ladders.py`)."""
        raise NotImplementedError

    def initial_priorities(self, batch: dict[str, Tensor]) -> Tensor:
        """|TD error| `[N]` of a `chunk_batch` under this agent's networks: the target its update regresses to."""
        raise NotImplementedError

    def start_acting(self, index: int, workers: int) -> dict[str, float]:
        """Become actor `index` of `workers`: act on its rung of the ladder from now on."""
        self.rung = self.ladder(workers)[index]
        return {self.rung_name: self.rung}

    @torch.no_grad()
    def collect(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, dict[str, Tensor], tuple[float, int]]:
        """An actor's chunk of `apex_send_steps` steps, with its rung and, with `prioritized`, its initial
        priorities |TD error| under this actor's networks."""
        obs, chunk, episodes = collect_chunk(self, env, obs, self.config.apex_send_steps)
        if self.rung is not None:
            chunk[self.rung_name] = torch.tensor(self.rung, dtype=torch.float64)
        if self.config.prioritized:
            chunk["priorities"] = self.initial_priorities(chunk_batch(chunk, self.obs_norm))
        return obs, chunk, episodes

    def trajectory_arrays(self, trajectory: dict[str, Tensor]) -> dict[str, Any]:
        return chunk_arrays(trajectory)

    def trajectory_from_arrays(self, arrays: Mapping[str, Any]) -> dict[str, Tensor]:
        return chunk_from_arrays(arrays, self.device)

    def learner_feed(self) -> LearnerFeed:
        """A replay learner: every chunk that arrived, once, into the replay buffer."""
        if self.config.normalize_rewards:  # the actors' return streams would interleave in one statistic
            raise ValueError(f"{self.algorithm} cannot learn from actors with normalize_rewards")
        chunk = self.config.num_envs * self.config.apex_send_steps  # one actor's chunk enters the replay whole
        if self.config.buffer_size < chunk:
            raise ValueError(f"buffer_size must be >= num_envs * apex_send_steps (= {chunk}) to learn from actors, "
                             f"got {self.config.buffer_size}")
        return LearnerFeed(batch=1, replay=True)

    def learn(self, trajectories: Sequence[dict[str, Tensor]]) -> Metrics:
        """Store the actors' chunks with their priorities, then make the updates they earned (`utd_ratio` per
        transition, once `learning_starts` transitions arrived)."""
        return learn_from_chunks(self, trajectories, self.from_actors, lambda n: self.loop.earned_updates(self, n))

    def policy_state(self) -> dict[str, Any]:
        """The `policy_parts` and the observation statistics (`normalize_observations`), as numpy arrays."""
        state = {f"{part}.{k}": v.detach().cpu().numpy().copy()
                 for part in self.policy_parts for k, v in getattr(self, part).state_dict().items()}
        if self.obs_norm.enabled:
            state.update({f"obs_norm.{k}": torch.as_tensor(v).cpu().numpy().copy()
                          for k, v in self.obs_norm.rms.state_dict().items()})
        return state

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        parts: dict[str, dict[str, Tensor]] = {part: {} for part in (*self.policy_parts, "obs_norm")}
        for key, value in state.items():
            part, name = key.split(".", 1)
            parts[part][name] = torch.as_tensor(value)
        for part in self.policy_parts:
            getattr(self, part).load_state_dict(parts[part])
        if parts["obs_norm"]:
            self.obs_norm.rms.load_state_dict(parts["obs_norm"])
