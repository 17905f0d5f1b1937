"""Env names -> constructors, so a config can name an env and a worker can build it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dask_podracer.envs.acrobot import AcrobotVecEnv
from dask_podracer.envs.base import VecEnv
from dask_podracer.envs.cartpole import CartPoleVecEnv
from dask_podracer.envs.gym_adapter import PREFIX as GYM_PREFIX
from dask_podracer.envs.gym_adapter import make_gym_vec_env
from dask_podracer.envs.mountain_car import MountainCarContinuousVecEnv, MountainCarVecEnv
from dask_podracer.envs.pendulum import PendulumVecEnv
from dask_podracer.envs.point_chase import PointChaseVecEnv
from dask_podracer.envs.warp_ant import make_warp_ant

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
    if name.startswith(GYM_PREFIX):  # gymnasium ids name themselves
        return name
    _factory(name)
    return _CANONICAL[name]


def _factory(name: str) -> EnvFactory:
    # "gym:<id>" reaches any gymnasium env through its vector envs, without registering each id.
    if name.startswith(GYM_PREFIX):
        return lambda **kwargs: make_gym_vec_env(name, **kwargs)
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(registered_envs())
        raise ValueError(f"unknown env {name!r}; known envs: {known} (or any gymnasium id as 'gym:<id>')") from None


def make_vec_env(name: str, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 **kwargs) -> VecEnv:
    """Build `num_envs` copies of the env called `name`, stepped as one batch on `device`."""
    return _factory(name)(num_envs=num_envs, device=device, seed=seed, **kwargs)


register_env("Pendulum-v1", PendulumVecEnv, "Pendulum")
register_env("CartPole-v1", CartPoleVecEnv, "CartPole")
register_env("Acrobot-v1", AcrobotVecEnv, "Acrobot")
register_env("MountainCar-v0", MountainCarVecEnv, "MountainCar")
register_env("MountainCarContinuous-v0", MountainCarContinuousVecEnv, "MountainCarContinuous")
register_env("PointChase-v0", PointChaseVecEnv, "PointChase")
register_env("WarpAnt-v0", make_warp_ant, "WarpAnt")  # needs the `warp` extra; imports mujoco_warp when built
