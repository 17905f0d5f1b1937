"""Observation and reward normalisation owned by the agent: `hparams.normalize_observations` and
`hparams.normalize_rewards`.

The agent keeps a running mean and variance of the observations it collects and feeds its
networks clip((obs - mean) / sqrt(var + eps), ±clip) (SB3's `VecNormalize`, ElegantRL's
state normalisation). The statistics live in the agent, not in an env wrapper, so
everything outside the agent keeps handing it raw observations: evaluation, `load_agent`,
a child segment (they travel in the checkpoint), and the exported TorchScript policy
(tracing records them as constants). Evaluation does not move them; only collection does.

Off-policy agents keep raw observations in the replay buffer and normalise a sampled
batch with the statistics of the moment, as SB3 does; PPO and A2C store normalised
observations, so one rollout's epochs see one scale per step.

Reward normalisation (`hparams.normalize_rewards = true`) divides each reward by the running
standard deviation of the discounted return (SB3's `VecNormalize(norm_reward=True)`,
gymnasium's `NormalizeReward`), without a shift: shifting rewards would change whether
ending an episode early pays. Off-policy agents store raw rewards and scale a sampled batch,
PPO and A2C store scaled ones; evaluation and every reported return stay raw. Its statistics
travel in checkpoints too, but a checkpoint from the other setting loads: no network's shape
or input depends on it, and its critic re-learns the scale, as after a change of
`reward_scale`.

With several learners (`[learners]`), each learner's statistics take in every learner's batch at
each update (`join`: the batches' moments are gathered and combined), so they normalise alike, as
one learner with all their envs would; each env's discounted return G stays with its learner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from dask_podracer.agents.base import ALONE, Peers
from dask_podracer.envs.wrappers import DiscountedReturnScale, RunningMeanStd

CLIP = 10.0
"""Normalised observations and rewards are clipped to ±CLIP (SB3's `clip_obs` and `clip_reward` defaults)."""

EPSILON = 1e-8


def combined_moments(moments: Tensor) -> Tensor:
    """The moments of several batches taken together. `moments` is `[K, 1 + 2 * D]` float64, one row per batch:
    its count n_k, then its mean m_k `[D]` and its (population) variance v_k `[D]`. Returns `[1 + 2 * D]`, packed
    the same: N = sum n_k, mean = sum n_k m_k / N, variance = sum n_k (v_k + (m_k - mean)^2) / N."""
    count, mean, var = moments[:, :1], *moments[:, 1:].chunk(2, dim=1)
    total = count.sum()
    mean_all = (count * mean).sum(0) / total
    var_all = (count * (var + (mean - mean_all) ** 2)).sum(0) / total
    return torch.cat([total.reshape(1), mean_all, var_all])


def share_batches(rms: RunningMeanStd, peers: Peers) -> None:
    """Make `rms` take in, at each update, the batches of every learner among `peers` together (one gather per
    update): the same numbers on each learner, so their statistics stay identical. `ALONE`: its own batch only."""
    rms.combine = None if peers is ALONE else (lambda moments: combined_moments(peers.gather(moments)))


class ObservationNormalizer:
    """`normalizer(obs)`: obs `[..., *obs_shape]` flattened to `[..., obs_dim]` and normalised by the statistics
    so far (only flattened when disabled). Observations already flat pass as they are."""

    def __init__(self, obs_dim: int, enabled: bool, device: torch.device,
                 obs_shape: tuple[int, ...] | None = None) -> None:
        self.enabled = enabled
        self.obs_dim = obs_dim
        self.obs_shape = tuple(obs_shape) if obs_shape is not None else (obs_dim,)
        self.rms = RunningMeanStd((obs_dim,), device)

    def flat(self, obs: Tensor) -> Tensor:
        """`[..., *obs_shape]` as `[..., obs_dim]`: the networks take a Box of any shape flattened, as PPO's do."""
        k = len(self.obs_shape)
        if k > 1 and tuple(obs.shape[-k:]) == self.obs_shape:
            return obs.reshape(*obs.shape[:-k], self.obs_dim)
        return obs

    def __call__(self, obs: Tensor) -> Tensor:
        obs = self.flat(obs)
        if not self.enabled:
            return obs
        z = (obs - self.rms.mean) / torch.sqrt(self.rms.var + EPSILON)
        return z.clamp(-CLIP, CLIP).to(torch.float32)

    def update(self, obs: Tensor) -> None:
        """Take a batch of collected observations `[B, obs_dim]` into the statistics."""
        if self.enabled:
            self.rms.update(obs.reshape(obs.shape[0], -1))

    def join(self, peers: Peers) -> None:
        """Keep these statistics identical to those of the other learners among `peers` (`share_batches`)."""
        share_batches(self.rms, peers)

    def normalize_batch(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """A replay batch with its `obs` and `next_obs` normalised."""
        if not self.enabled:
            return batch
        return {**batch, "obs": self(batch["obs"]), "next_obs": self(batch["next_obs"])}

    def save_into(self, state: dict[str, Any]) -> None:
        """Add the statistics to an agent's `state_dict()` (nothing when disabled)."""
        if self.enabled:
            state["obs_norm"] = self.rms.state_dict()

    def load_from(self, state: Mapping[str, Any], algorithm: str) -> None:
        """Restore the statistics from an agent's state; a checkpoint trained with the other setting is refused,
        since its networks expect inputs on another scale."""
        saved = "obs_norm" in state
        if saved != self.enabled:
            trained = "with" if saved else "without"
            raise ValueError(f"this {algorithm} checkpoint was trained {trained} observation normalisation, and "
                             f"hparams.normalize_observations is {str(self.enabled).lower()}: its networks expect "
                             f"{'normalised' if saved else 'raw'} observations")
        if saved:
            self.rms.load_state_dict(state["obs_norm"])


class RewardNormalizer(DiscountedReturnScale):
    """`normalizer(reward)`: reward / sqrt(var(G) + eps) clipped to ±CLIP, where G is each env's discounted
    return so far (G <- gamma * G + reward, restarted where an episode ends); the identity when disabled.
    Its G is not checkpointed: a segment starts its envs afresh, so every G restarts at 0 anyway."""

    def __init__(self, num_envs: int, gamma: float, enabled: bool, device: torch.device) -> None:
        super().__init__(num_envs, gamma, device, CLIP, EPSILON)
        self.enabled = enabled

    def __call__(self, reward: Tensor) -> Tensor:
        return super().__call__(reward) if self.enabled else reward

    def update(self, reward: Tensor, done: Tensor) -> None:
        """Take one env step's rewards `[num_envs]` into the returns and their statistics; `done` marks the
        envs whose episode ended with this step (terminated or truncated)."""
        if self.enabled:
            if reward.shape != self.returns.shape:
                raise ValueError(f"a step of {reward.numel()} rewards, and the agent normalises the returns of "
                                 f"num_envs = {self.returns.numel()} envs")
            super().update(reward, done)

    def join(self, peers: Peers) -> None:
        """Keep the statistics of the returns identical to those of the other learners among `peers` (each keeps
        its own envs' returns G)."""
        share_batches(self.rms, peers)

    def normalize_batch(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """A replay batch with its `reward` scaled."""
        if not self.enabled:
            return batch
        return {**batch, "reward": self(batch["reward"])}

    def save_into(self, state: dict[str, Any]) -> None:
        if self.enabled:
            state["reward_norm"] = self.rms.state_dict()

    def load_from(self, state: Mapping[str, Any]) -> None:
        """Restore the statistics if the checkpoint has them and this agent uses them; otherwise start afresh."""
        if self.enabled and "reward_norm" in state:
            self.rms.load_state_dict(state["reward_norm"])
