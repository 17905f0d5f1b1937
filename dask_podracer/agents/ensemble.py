"""Critic ensembles as learner parallelism: combining E heads into one value, and a plain-loop reference.

`CriticEnsemble` (networks.py) evaluates all E critics as batched matmuls over stacked
parameters, so an ensemble of 10 costs about as many kernel launches as one critic. This
module says how the `[E, B]` values become one `[B]` value:

- "mean": the average, the value an actor follows (lower variance);
- "min": the minimum over all heads, the pessimistic TD target (TD3's clipped double Q);
- "redq": the minimum over a random subset of `subset` heads, drawn afresh per update (REDQ);
- "weighted": `weight * min + (1 - weight) * mean`, a tunable pessimism between the two.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from dask_podracer.agents.networks import CriticEnsemble, EnsembleLinear

COMBINE_MODES = ("mean", "min", "redq", "weighted")


def combine(q: Tensor, how: str, subset: int = 2, weight: float = 0.5,
            generator: torch.Generator | None = None) -> Tensor:
    """Reduce ensemble values `q` `[E, B]` to `[B]` by `how` (one of COMBINE_MODES; see the module docstring)."""
    if how == "mean":
        return q.mean(dim=0)
    if how == "min":
        return q.min(dim=0).values
    if how == "redq":
        k = min(subset, q.shape[0])
        heads = torch.randperm(q.shape[0], generator=generator, device=q.device)[:k]
        return q[heads].min(dim=0).values
    if how == "weighted":
        return weight * q.min(dim=0).values + (1 - weight) * q.mean(dim=0)
    raise ValueError(f"combine must be one of {COMBINE_MODES}, got {how!r}")


def combine_loop(q: list[Tensor], how: str, subset: int = 2, weight: float = 0.5,
                 generator: torch.Generator | None = None) -> Tensor:
    """The same as `combine`, on a list of E `[B]` tensors, element by element in plain Python (for tests)."""
    if how == "redq":
        heads = torch.randperm(len(q), generator=generator, device=q[0].device)[:min(subset, len(q))].tolist()
        q = [q[i] for i in heads]
    out = []
    for b in range(q[0].shape[0]):
        values = [float(member[b]) for member in q]
        low, mean = min(values), sum(values) / len(values)
        out.append({"mean": mean, "min": low, "redq": low, "weighted": weight * low + (1 - weight) * mean}[how])
    return torch.tensor(out, dtype=q[0].dtype)


def critic_member(critic: CriticEnsemble, index: int, obs: Tensor, action: Tensor) -> Tensor:
    """Critic `index` of the ensemble alone, as ordinary linear layers: obs [B, obs_dim], action [B, act_dim] -> [B]."""
    x = torch.cat([obs, action], dim=-1)
    for layer in critic.net:
        if isinstance(layer, EnsembleLinear):
            x = F.linear(x, layer.weight[index].T, layer.bias[index, 0])
        else:
            x = layer(x)
    return x.squeeze(-1)


def critic_loop(critic: CriticEnsemble, obs: Tensor, action: Tensor) -> Tensor:
    """The plain-loop path: every member one after the other, stacked to `[E, B]` like `critic(obs, action)`."""
    return torch.stack([critic_member(critic, i, obs, action) for i in range(critic.size)])
