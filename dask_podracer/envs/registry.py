"""Env names -> constructors, so a config can name an env and a worker can build it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dask_podracer.envs.base import VecEnv
from dask_podracer.envs.pendulum import PendulumVecEnv

EnvFactory = Callable[..., VecEnv]

_REGISTRY: dict[str, EnvFactory] = {}
_CANONICAL: dict[str, str] = {}  # every accepted name -> the name checkpoints record


def register_env(name: str, factory: EnvFactory, *aliases: str) -> None:
    """Make `make_vec_env(name, ...)` (or an alias) build `factory(num_envs=..., device=..., seed=...)`."""
    for n in (name, *aliases):
        _REGISTRY[n] = factory
        _CANONICAL[n] = name


def registered_envs() -> list[str]:
    """Every accepted env name, aliases included."""
    return sorted(_REGISTRY)


def canonical_env_name(name: str) -> str:
    """The registered name behind `name` (an alias such as "Pendulum" gives "Pendulum-v1")."""
    _factory(name)
    return _CANONICAL[name]


def _factory(name: str) -> EnvFactory:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(registered_envs())
        raise ValueError(f"unknown env {name!r}; known envs: {known}") from None


def make_vec_env(name: str, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 **kwargs) -> VecEnv:
    """Build `num_envs` copies of the env called `name`, stepped as one batch on `device`."""
    return _factory(name)(num_envs=num_envs, device=device, seed=seed, **kwargs)


register_env("Pendulum-v1", PendulumVecEnv, "Pendulum")
