"""Env names -> constructors, so a config can name an env and a worker can build it.

Four kinds of name: a registered one ("Pendulum-v1"), any gymnasium id as "gym:<id>"
(gymnasium's own "gym:<module>:<id>" imports the module that registers it first), any
task of mjlab's registry as "mjlab:<task id>" (envs/mjlab_adapter.py), and your own env
as "<module>:<name>", imported by that path wherever it is built: a VecEnv class or factory
taking `num_envs`, `device` and `seed`, or a `gymnasium.Env` class, which gymnasium's vector
envs step. A checkpoint records the name, so whatever
loads it later (a segment on another worker, `load_agent`, the workflows) builds the
same env from it.

A name read from a store is not a name the caller gave: building an import-path env runs
the module it names. `check_env_named` lets such an env be built only where the caller
names the same env (see docs/faq.md, "What loading a store can and cannot do").
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import numbers
import re
from collections.abc import Callable

import gymnasium as gym
import torch

from dask_podracer.envs.acrobot import AcrobotVecEnv
from dask_podracer.envs.base import VEC_ENV_MEMBERS, VecEnv, canonical_device
from dask_podracer.envs.cartpole import CartPoleVecEnv
from dask_podracer.envs.devices import resolve_device, usable_device
from dask_podracer.envs.gym_adapter import PREFIX as GYM_PREFIX
from dask_podracer.envs.gym_adapter import is_gym_env_class, make_gym_env_class_vec_env, make_gym_vec_env
from dask_podracer.envs.mjlab_adapter import PREFIX as MJLAB_PREFIX
from dask_podracer.envs.mjlab_adapter import make_mjlab_vec_env
from dask_podracer.envs.mountain_car import MountainCarContinuousVecEnv, MountainCarVecEnv
from dask_podracer.envs.mujoco_batched import mujoco_factory
from dask_podracer.envs.mujoco_tasks import TASKS as MUJOCO_TASKS
from dask_podracer.envs.multi_agent.pettingzoo_adapter import MPE2_ENVS, mpe2_factory
from dask_podracer.envs.multi_agent.vmas_adapter import VMAS_SCENARIOS, vmas_factory
from dask_podracer.envs.pendulum import PendulumVecEnv
from dask_podracer.envs.point_chase import PointChaseVecEnv
from dask_podracer.envs.trading import make_stock_trading, pin_market
from dask_podracer.envs.warp import WARP_ENVS

EnvFactory = Callable[..., VecEnv]

IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
"""`<module>:<name>`: a VecEnv class or factory, or a gymnasium Env class, to import (dotted on both sides,
as in `my_pkg.envs:Arm.make`)."""

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
    """The registered name behind `name` (an alias such as "Pendulum" gives "Pendulum-v1"). Gymnasium ids
    and import paths name themselves; an import path is imported here, so a bad one fails now."""
    if name.startswith(GYM_PREFIX):
        return name
    _factory(name)
    return canonical_name(name)


def _factory(name: str) -> EnvFactory:
    # "gym:<id>" reaches any gymnasium env through its vector envs, without registering each id.
    if name.startswith(GYM_PREFIX):
        return lambda **kwargs: make_gym_vec_env(name, **kwargs)
    # "mjlab:<task id>": any task in mjlab's registry, which only mjlab itself can list (imported when built)
    if name.startswith(MJLAB_PREFIX):
        return lambda **kwargs: make_mjlab_vec_env(name, **kwargs)
    if name in _REGISTRY:
        return _REGISTRY[name]
    for prefix, known in (("vmas", VMAS_SCENARIOS), ("mpe2", MPE2_ENVS)):
        if name.startswith(f"{prefix}:"):  # read as an import path it said "module 'vmas' has no attribute 'nope'"
            raise ValueError(f"unknown env {name!r}: {name.partition(':')[2]!r} is not one of the registered "
                             f"{prefix} envs: {', '.join(known)}")
    if IMPORT_PATH.fullmatch(name):
        return _imported(name)
    raise ValueError(unknown_env(name))


def unknown_env(name: str) -> str:
    """Why `name` names no env, in one line, led by what was most likely meant: a gymnasium id written without
    its `gym:` prefix (`LunarLander-v3`), or a near miss of one of ours (`Pendelum-v1`). Before, the line listed
    all 70 accepted names first, and the hint for a gymnasium id came last."""
    if name in gym.registry:
        return (f"unknown env {name!r}: it is gymnasium's, not one of dask_podracer's own; write it as "
                f"'gym:{name}' (its vector envs step it)")
    ours = sorted({canonical_name(n) for n in _REGISTRY if ":" not in n})
    # ours first, then gymnasium's (as `gym:<id>`), each by its lower case: `pendulum-v1` is a near miss too
    spelled = {n.lower(): canonical_name(n) for n in reversed(list(_REGISTRY))}
    for n in gym.registry:
        spelled.setdefault(n.lower(), f"{GYM_PREFIX}{n}")
    near = dict.fromkeys(spelled[n] for n in difflib.get_close_matches(name.lower(), list(spelled), n=3, cutoff=0.75))
    guess = f"; did you mean {' or '.join(map(repr, near))}?" if near else "."
    return (f"unknown env {name!r}{guess} dask_podracer's own: {', '.join(ours)}, 'vmas:<scenario>', "
            f"'mpe2:<env>' (envs.registered_envs() lists them all); any gymnasium id as 'gym:<id>'; an mjlab task as "
            f"'mjlab:<task id>'; your own VecEnv class or factory, or gymnasium Env class, as '<module>:<name>'")


def _imported(name: str) -> EnvFactory:
    """The class or factory an import path names, wrapped to check that what it builds is a VecEnv; for a
    gymnasium Env class, a factory of gymnasium vector envs of it."""
    module_name, _, attribute = name.partition(":")
    if module_name == "__main__":  # a worker, or a later load, has another __main__
        raise ValueError(f"env {name!r}: a VecEnv defined in the script that runs cannot be imported by workers "
                         f"or by whatever loads its checkpoints; move it to a module, e.g. 'my_envs:{attribute}'")
    try:
        target = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"env {name!r}: cannot import module {module_name!r} ({e}); it must be importable "
                          f"wherever segments run: installed, on PYTHONPATH, or in the directory `podracer` "
                          f"runs from") from e
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"env {name!r}: module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"env {name!r}: {attribute} is a {type(target).__name__}, not a VecEnv class or factory, "
                        f"or a gymnasium Env class")
    if is_gym_env_class(target):
        return lambda **kwargs: make_gym_env_class_vec_env(name, target, **kwargs)

    def build(**kwargs) -> VecEnv:
        _check_takes_vec_env_arguments(name, attribute, target, kwargs)
        env = target(**kwargs)
        missing = [a for a in VEC_ENV_MEMBERS if not hasattr(env, a)]
        if missing:
            raise TypeError(f"env {name!r} built a {type(env).__name__}, which is not a VecEnv: it has no "
                            f"{', '.join(missing)} (see dask_podracer.envs.VecEnv, or subclass TorchVecEnv; "
                            f"a gymnasium.Env subclass is vectorised for you)")
        _check_built(name, env, kwargs["num_envs"], kwargs["device"])
        return env

    return build


def _check_built(name: str, env: VecEnv, num_envs: int, device: str | torch.device) -> None:
    """What an env of one's own says of itself must be what was asked for and what the protocol needs, checked as
    it is built, so that the preflight refuses it before any cluster starts: a factory that ignored `num_envs`
    trained a batch of another size than its agent's (hparams.num_envs) silently, and a `max_episode_steps` of
    None failed every segment with a TypeError."""
    if env.num_envs != num_envs:
        raise ValueError(f"env {name!r} built {env.num_envs!r} envs, asked for {num_envs}: a VecEnv factory must "
                         f"make num_envs envs (hparams.num_envs in a tournament)")
    limit = env.max_episode_steps
    if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1:
        raise ValueError(f"env {name!r}: max_episode_steps must be an integer >= 1 (evaluation plays each episode "
                         f"to its end), got {limit!r}")
    for space in ("single_observation_space", "single_action_space"):
        if not isinstance(getattr(env, space), gym.spaces.Space):
            raise TypeError(f"env {name!r}: {space} must be a gymnasium space, got "
                            f"{type(getattr(env, space)).__name__}")
    expected = canonical_device(resolve_device(device))
    if str(env.device) != str(expected):
        raise ValueError(f"env {name!r} built its envs on {env.device}, asked for {expected}: a VecEnv factory must "
                         f"put its tensors on the device it is given")


def _check_takes_vec_env_arguments(name: str, attribute: str, target: Callable, kwargs: dict) -> None:
    """A callable that cannot take a VecEnv's arguments is not a VecEnv factory (`os:getcwd`): say so, rather than
    pass on its own TypeError. A signature Python cannot read (some builtins) is left to the call."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(**kwargs)
    except TypeError as e:
        raise TypeError(f"env {name!r}: {attribute} cannot be called as a VecEnv class or factory with "
                        f"{', '.join(kwargs)} ({e})") from None


class StoredEnvRefused(ValueError):
    """An env that a store names is not built: it would import a module and the caller did not name it, or
    the caller named another env."""

    def __init__(self, message: str, env: str) -> None:
        super().__init__(message)
        self.env = env
        """The env the store names."""

    def __reduce__(self) -> tuple:  # survives pickling, as every error a Dask task may raise
        return (type(self), (str(self), self.env))


def module_imported_by(name: str) -> str | None:
    """The module that building env `name` imports, or None for a registered env or a plain gymnasium id,
    which import nothing that a name can choose. An unknown name imports nothing: building it fails first."""
    if name.startswith(GYM_PREFIX):
        module, colon, _ = name.removeprefix(GYM_PREFIX).partition(":")  # gymnasium's own "<module>:<id>"
        return module if colon else None
    if name in _REGISTRY or name.startswith(MJLAB_PREFIX) or not IMPORT_PATH.fullmatch(name):
        return None
    return name.partition(":")[0]


def check_env_named(stored: str, named: str | None, source: str) -> None:
    """Refuse to build `stored`, an env name read from `source` (a checkpoint, a card), unless building it
    imports nothing or the caller named the same env (`named`); a named env that differs is refused too."""
    if named is not None and canonical_name(named) != stored:
        raise StoredEnvRefused(f"{source} is trained on env {stored!r}, not on {named!r}", stored)
    module = module_imported_by(stored)
    if module is not None and named is None:
        raise StoredEnvRefused(f"{source} is trained on env {stored!r}, which would import module {module!r}; a "
                               f"store's env is imported only where you name it: to allow it, name that env "
                               f"(--env {stored} on the command line, env={stored!r} in Python)", stored)


def canonical_name(name: str) -> str:
    """`name` as checkpoints record it (an alias gives its registered name), importing nothing."""
    return _CANONICAL.get(name, name)


HOW_STEPPED = ("vectorization_mode", "threads")
"""env_kwargs that choose how the envs are stepped (gymnasium's one process or a process per env; the threads
of the CPU MuJoCo envs, whose results do not depend on them), not what they are: a checkpoint continues under
either."""


DATA_PINS = {"StockTrading-v0": ("market_sha256", pin_market)}
"""Envs that read a data file, with the env_kwarg that pins its content and what adds it to env_kwargs: a run
pins its data as it starts (`with_data_pins`), and the env refuses a file whose content differs."""

DATA_PIN_KEYS = frozenset(key for key, _ in DATA_PINS.values())
"""The env_kwargs that pin a data file's content (`market_sha256`)."""


def with_data_pins(name: str, kwargs: dict) -> dict:
    """`kwargs` of env `name` with the content of the data files they name pinned (StockTrading-v0's market file:
    `market_sha256`); other envs' kwargs as they are."""
    pin = DATA_PINS.get(canonical_name(name))
    return kwargs if pin is None else pin[1](kwargs)


def same_env(kwargs: dict, other: dict) -> bool:
    """Whether two env_kwargs build the same env, whatever each says of how it is stepped. A data pin that only one
    side has is not compared: a store from before pins (or a checkpoint's attrs) holds none."""
    pins = DATA_PIN_KEYS - (kwargs.keys() & other.keys())

    def what(k: dict) -> dict:
        return {key: value for key, value in k.items() if key not in HOW_STEPPED and key not in pins}
    return what(kwargs) == what(other)


def make_vec_env(name: str, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 **kwargs) -> VecEnv:
    """Build `num_envs` copies of the env called `name`, stepped as one batch on `device`; a one-line
    TypeError or ValueError naming the argument that cannot work, before anything is built."""
    if not isinstance(name, str):
        raise TypeError(f"an env's name is a string such as 'Pendulum-v1', got {type(name).__name__}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    # segments seed their envs with run.seed * 1_000_003 + an index: beyond 32 bits, within torch's 64
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                             or not 0 <= seed < 2**63):
        raise ValueError(f"seed must be None or an integer from 0 to 2**63 - 1, got {seed!r}")
    try:
        usable_device(device)
    except ValueError as e:
        raise ValueError(f"device {str(device)!r} cannot be used here: {e}") from None
    return _factory(name)(num_envs=int(num_envs), device=device, seed=None if seed is None else int(seed), **kwargs)


register_env("Pendulum-v1", PendulumVecEnv, "Pendulum")
register_env("CartPole-v1", CartPoleVecEnv, "CartPole")
register_env("Acrobot-v1", AcrobotVecEnv, "Acrobot")
register_env("MountainCar-v0", MountainCarVecEnv, "MountainCar")
register_env("MountainCarContinuous-v0", MountainCarContinuousVecEnv, "MountainCarContinuous")
register_env("PointChase-v0", PointChaseVecEnv, "PointChase")
register_env("StockTrading-v0", make_stock_trading, "StockTrading")  # docs/trading.md
for _warp_name, _make_warp in WARP_ENVS.items():  # needs the `warp` extra; imports mujoco_warp when built
    register_env(_warp_name, _make_warp, _warp_name.removesuffix("-v0"))  # WarpAnt-v0 (WarpAnt), ...
for _name in MUJOCO_TASKS:  # gymnasium's v5 MuJoCo envs on every core (docs/envs.md); needs the `mujoco` extra
    register_env(_name, mujoco_factory(_name))
for _scenario in VMAS_SCENARIOS:  # docs/multi_agent.md; needs the `multiagent` extra; imports vmas when built
    register_env(f"vmas:{_scenario}", vmas_factory(_scenario))
for _name in MPE2_ENVS:  # PettingZoo's parallel API; needs the `pettingzoo` extra; imports mpe2 when built
    register_env(f"mpe2:{_name}", mpe2_factory(_name))
