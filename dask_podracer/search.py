"""Hyper-parameter priors and perturbations: what a generator samples and how it explores.

A prior is declared in a config as one inline table per hyper-parameter:

    [search]
    actor_lr = { log_uniform = [1e-4, 1e-2] }
    gamma    = { uniform = [0.9, 0.999] }
    hidden   = { choice = [[64, 64], [256, 256]] }

Fresh agents draw every listed hyper-parameter from its prior. Children of a
checkpoint may only change the hyper-parameters its algorithm lists as `tunable`
(those a child can change and still load its parent's checkpoint; a critic
ensemble's size is one): a float is multiplied or divided by a factor, an int too
but moves by at least 1, a categorical one (a string, a bool) moves to another of
its options; any of them may instead be redrawn from its prior.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from dask_podracer.typed_fields import did_you_mean

KINDS = ("uniform", "log_uniform", "int_uniform", "choice")


@dataclasses.dataclass(frozen=True)
class Prior:
    kind: str
    """One of uniform, log_uniform, int_uniform (bounds inclusive) or choice."""
    values: tuple[Any, ...]
    """[low, high] for the ranges, the options for choice."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"prior must be one of {', '.join(KINDS)}, got {self.kind!r}"
                             f"{did_you_mean(self.kind, KINDS)}")
        if self.kind == "choice":
            if not self.values:
                raise ValueError("choice needs at least one option")
            return
        if len(self.values) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                            for v in self.values):
            raise ValueError(f"{self.kind} needs [low, high], got {list(self.values)!r}")
        low, high = self.values
        if not all(math.isfinite(v) for v in self.values):
            raise ValueError(f"{self.kind} needs finite bounds, got {list(self.values)!r}")
        if self.kind == "int_uniform" and not all(isinstance(v, int) for v in self.values):
            raise ValueError(f"int_uniform needs integer bounds, got {list(self.values)!r}")
        if not low <= high:
            raise ValueError(f"{self.kind} needs low <= high, got {list(self.values)!r}")
        if self.kind == "log_uniform" and low <= 0:
            raise ValueError(f"log_uniform needs low > 0, got {low!r}")

    def edges(self, template: Any = None) -> tuple[Any, ...]:
        """The values a draw can come closest to: a range's bounds (floats unless it is int_uniform), every option.
        Given `template`, the hyper-parameter's own value, a range's bounds take its type, as a draw does: a
        log_uniform over an integer (`buffer_size`) draws rounded integers."""
        if self.kind == "choice":
            return tuple(_plain(v) for v in self.values)
        bounds = tuple(self.values) if self.kind == "int_uniform" else tuple(float(v) for v in self.values)
        return bounds if template is None else tuple(_like(template, v) for v in bounds)

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
        return Prior(kind, tuple(freeze(v) for v in values))
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
                    valid: Any = None, options: Mapping[str, Sequence[Any]] | None = None) -> dict[str, Any]:
    """Explore around `hparams`: each of `names` is redrawn from its prior with `resample_probability`, else
    perturbed by its type:

    - a float is multiplied or divided by `factor` (a fair coin);
    - an int likewise, rounded, and moved by at least 1 in the coin's direction (so 2 becomes 3 or 1);
    - a categorical one (a bool, a string, ...) moves to another of its options, drawn uniformly: a bool's
      are True and False; otherwise its prior's `choice` list, else `options[name]` (an algorithm's
      `AlgorithmInfo.choices`); with neither it keeps its value.

    `valid(hparams)` (raising ValueError) keeps values legal: an illegal one reverts to the parent's.
    """
    child = dict(hparams)
    for name in names:
        old = child[name]
        prior = (priors or {}).get(name)
        if prior is not None and rng.random() < resample_probability:
            new = prior.sample(rng)
        elif isinstance(old, bool) or not isinstance(old, (int, float)):
            new = _other_option(old, _options(old, prior, (options or {}).get(name)), rng)
        else:
            up = rng.random() < 0.5
            new = old * factor if up else old / factor
            if isinstance(old, int) and round(new) == old:
                new = old + (1 if up else -1)
        child[name] = _like(old, new)
        if valid is not None:
            try:
                valid(child)
            except ValueError:
                child[name] = old  # e.g. gamma pushed above 1: keep the parent's value
    return child


def _options(value: Any, prior: Prior | None, declared: Sequence[Any] | None) -> tuple[Any, ...]:
    if isinstance(value, bool):
        return (False, True)
    if prior is not None and prior.kind == "choice":
        return tuple(_plain(v) for v in prior.values)
    return tuple(declared or ())


def _other_option(value: Any, choices: Sequence[Any], rng: random.Random) -> Any:
    others = [c for c in choices if freeze(c) != freeze(value)]  # a TOML list equals its tuple
    return rng.choice(others) if others else value


def _like(template: Any, value: Any) -> Any:
    """`value` in the type of the default it replaces (an int field stays an int)."""
    if isinstance(template, bool) or not isinstance(template, (int, float)):
        return value
    return int(round(value)) if isinstance(template, int) else float(value)


def freeze(value: Any) -> Any:
    """`value` with its lists as tuples: a TOML or JSON list compares equal to the tuple a config holds."""
    return tuple(freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
