"""Hyper-parameter priors and perturbations: what a generator samples and how it explores.

A prior is declared in a config as one inline table per hyper-parameter:

    [search]
    actor_lr = { log_uniform = [1e-4, 1e-2] }
    gamma    = { uniform = [0.9, 0.999] }
    hidden   = { choice = [[64, 64], [256, 256]] }

Fresh agents draw every listed hyper-parameter from its prior. Children of a
checkpoint may only change hyper-parameters that do not change the networks'
shapes (the algorithm's `tunable` ones): perturbed by a factor, or redrawn.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

KINDS = ("uniform", "log_uniform", "int_uniform", "choice")


@dataclasses.dataclass(frozen=True)
class Prior:
    kind: str
    """One of uniform, log_uniform, int_uniform (bounds inclusive) or choice."""
    values: tuple[Any, ...]
    """[low, high] for the ranges, the options for choice."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"prior must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "choice":
            if not self.values:
                raise ValueError("choice needs at least one option")
            return
        if len(self.values) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                            for v in self.values):
            raise ValueError(f"{self.kind} needs [low, high], got {list(self.values)!r}")
        low, high = self.values
        if not low <= high:
            raise ValueError(f"{self.kind} needs low <= high, got {list(self.values)!r}")
        if self.kind == "log_uniform" and low <= 0:
            raise ValueError(f"log_uniform needs low > 0, got {low!r}")

    def sample(self, rng: random.Random) -> Any:
        low, high = (self.values + (None, None))[:2]
        if self.kind == "uniform":
            return rng.uniform(low, high)
        if self.kind == "log_uniform":
            return math.exp(rng.uniform(math.log(low), math.log(high)))
        if self.kind == "int_uniform":
            return rng.randint(int(low), int(high))
        return _plain(rng.choice(self.values))


def parse_prior(raw: Any, field: str) -> Prior:
    """A `{kind = [...]}` inline table -> Prior; ValueError naming `field` otherwise."""
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ValueError(f"{field} must be one of {{uniform|log_uniform|int_uniform|choice = [...]}}, got {raw!r}")
    (kind, values), = raw.items()
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{field}.{kind} must be a list, got {values!r}")
    try:
        return Prior(kind, tuple(_freeze(v) for v in values))
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from None


def sample_hparams(base: Mapping[str, Any], priors: Mapping[str, Prior], rng: random.Random) -> dict[str, Any]:
    """`base` with every hyper-parameter that has a prior drawn from it (in sorted order, for repeatability)."""
    hparams = dict(base)
    for name in sorted(priors):
        hparams[name] = _like(base[name], priors[name].sample(rng))
    return hparams


def perturb_hparams(hparams: Mapping[str, Any], names: Sequence[str], factor: float, rng: random.Random,
                    priors: Mapping[str, Prior] | None = None, resample_probability: float = 0.0,
                    valid: Any = None) -> dict[str, Any]:
    """Explore around `hparams`: each of `names` is redrawn from its prior with `resample_probability`,
    else multiplied or divided by `factor`. `valid(hparams)` (raising ValueError) keeps values legal."""
    child = dict(hparams)
    for name in names:
        old = child[name]
        if priors and name in priors and rng.random() < resample_probability:
            new = priors[name].sample(rng)
        else:
            new = old * factor if rng.random() < 0.5 else old / factor
        child[name] = _like(old, new)
        if valid is not None:
            try:
                valid(child)
            except ValueError:
                child[name] = old  # e.g. gamma pushed above 1: keep the parent's value
    return child


def _like(template: Any, value: Any) -> Any:
    """`value` in the type of the default it replaces (an int field stays an int)."""
    if isinstance(template, bool) or not isinstance(template, (int, float)):
        return value
    return int(round(value)) if isinstance(template, int) else float(value)


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
