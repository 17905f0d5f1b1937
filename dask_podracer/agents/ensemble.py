"""Critic ensembles as learner parallelism: combining E heads into one value, resizing, and a plain-loop reference.

`CriticEnsemble` (networks.py) evaluates all E critics as batched matmuls over stacked
parameters, so an ensemble of 10 costs about as many kernel launches as one critic. This
module says how the `[E, B]` values become one `[B]` value:

- "mean": the average, the value an actor follows (lower variance);
- "min": the minimum over all heads, the pessimistic TD target (TD3's clipped double Q);
- "redq": the minimum over a random subset of `subset` heads (`redq_heads`), drawn afresh
  per call, so per update (REDQ);
- "weighted": `weight * min + (1 - weight) * mean`, a tunable pessimism between the two.
  Per sample it is an L-estimator, a weighted average of the heads sorted by value,
  q_(1) <= ... <= q_(E): weight `weight + (1 - weight) / E` on the smallest and
  `(1 - weight) / E` on each of the others (weight 0: the mean, weight 1: the min).

The ensemble's size is a hyper-parameter a child segment may change: `fit_ensemble_state`
makes a parent's checkpoint fit a child with another number of heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from dask_podracer.agents.networks import CriticEnsemble, EnsembleLinear

COMBINE_MODES = ("mean", "min", "redq", "weighted")
ENSEMBLE_TUNABLE = ("combine_weight", "num_critics", "target_combine", "actor_combine", "redq_subset")
"""The ensemble's hyper-parameters a child segment may change (DDPG, TD3, SAC load a parent of any size)."""
ENSEMBLE_CHOICES = {"target_combine": COMBINE_MODES, "actor_combine": COMBINE_MODES}
"""The options of the categorical ones, for `search.perturb_hparams`."""
NEW_HEAD_JITTER = 0.01
"""A head added by `fit_ensemble_state` is its source head plus noise of this scale relative to its mean |parameter|."""


def redq_heads(size: int, subset: int, generator: torch.Generator | None = None,
               device: torch.device | str = "cpu") -> Tensor:
    """REDQ's random subset: `min(subset, size)` distinct head indices out of `size`, uniformly drawn."""
    return torch.randperm(size, generator=generator, device=device)[:min(subset, size)]


def combine(q: Tensor, how: str, subset: int = 2, weight: float = 0.5,
            generator: torch.Generator | None = None) -> Tensor:
    """Reduce ensemble values `q` `[E, B]` to `[B]` by `how` (one of COMBINE_MODES; see the module docstring)."""
    if how == "mean":
        return q.mean(dim=0)
    if how == "min":
        return q.min(dim=0).values
    if how == "redq":
        return q[redq_heads(q.shape[0], subset, generator, q.device)].min(dim=0).values
    if how == "weighted":
        return weight * q.min(dim=0).values + (1 - weight) * q.mean(dim=0)
    raise ValueError(f"combine must be one of {COMBINE_MODES}, got {how!r}")


def combine_loop(q: list[Tensor], how: str, heads: list[int] | None = None, weight: float = 0.5) -> Tensor:
    """The same as `combine`, on a list of E `[B]` tensors, sample by sample in plain Python (for tests).

    "redq" takes the subset as `heads` instead of drawing it: the subset is random, so a test
    compares the two reductions on the same draw (and checks `redq_heads` on its own). "weighted"
    is computed as the L-estimator over the sorted heads, not as min and mean.
    """
    if how == "redq":
        if heads is None:
            raise ValueError("combine_loop needs the redq subset as heads")
        q = [q[i] for i in heads]
    out = []
    for b in range(q[0].shape[0]):
        values = sorted(float(member[b]) for member in q)
        e = len(values)
        if how == "mean":
            out.append(sum(values) / e)
        elif how in ("min", "redq"):
            out.append(values[0])
        elif how == "weighted":
            out.append(sum((weight * (i == 0) + (1 - weight) / e) * v for i, v in enumerate(values)))
        else:
            raise ValueError(f"combine must be one of {COMBINE_MODES}, got {how!r}")
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


# -- changing the ensemble's size between segments ---------------------------------------------

def ensemble_size(critic_state: Mapping[str, Tensor]) -> int:
    """Heads in a `CriticEnsemble` state dict (every one of its tensors is stacked along dim 0)."""
    return int(next(iter(critic_state.values())).shape[0])


def resize_heads(stacked: Tensor, size: int) -> Tensor:
    """`[E, ...]` -> `[size, ...]`: heads 0..size-1 when shrinking; when growing, all E heads and then
    copies of heads 0, 1, ... in turn (head i copies head i mod E)."""
    return stacked[torch.arange(size, device=stacked.device) % stacked.shape[0]]


def fit_ensemble_state(state: Mapping[str, Any], size: int) -> dict[str, Any]:
    """A DDPG/TD3/SAC state dict with its critic ensemble (`critic`, `critic_target`, `critic_optim`) resized
    to `size` heads; the rest untouched.

    Shrinking keeps heads 0..size-1 with their targets and Adam moments. Growing keeps every head
    and adds head i as a copy of head i mod E: its target is that head's target and its Adam moments
    are that head's moments (Adam's step count is shared by all heads of a stacked tensor). All heads
    see the same batches, so an exact copy would get exactly its source's updates for ever and add
    nothing to the ensemble: each added online head gets Gaussian noise of `NEW_HEAD_JITTER` times
    its mean |parameter| (from torch's global RNG, which a segment seeds).
    """
    old = ensemble_size(state["critic"])
    if old == size:
        return dict(state)
    resized = {k: resize_heads(v, size) for k, v in state["critic"].items()}
    if size > old:
        for v in resized.values():
            added = v[old:]
            scale = NEW_HEAD_JITTER * added.abs().flatten(1).mean(1).view(-1, *[1] * (v.dim() - 1))
            v[old:] = added + scale * torch.randn(added.shape, device=v.device, dtype=v.dtype)
    optim = state["critic_optim"]
    optim_state = {index: {k: v if k == "step" or not torch.is_tensor(v) or v.dim() == 0 else resize_heads(v, size)
                           for k, v in param_state.items()}
                   for index, param_state in optim["state"].items()}
    return {**state, "critic": resized,
            "critic_target": {k: resize_heads(v, size) for k, v in state["critic_target"].items()},
            "critic_optim": {**optim, "state": optim_state}}
