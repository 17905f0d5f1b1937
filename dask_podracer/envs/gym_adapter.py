"""Any gymnasium env as a VecEnv: `make_vec_env("gym:Ant-v5", num_envs, device=..., seed=...)`.

gymnasium's `SyncVectorEnv` (one process) or `AsyncVectorEnv` (one process per env) does
the stepping (an id may name the module that registers it, "gym:my_pkg.envs:Arm-v0", as
`gymnasium.make` allows); this adapter moves arrays to torch tensors on the requested device and
translates gymnasium's conventions to ours (a step that terminates at the time limit is
terminated, not also truncated). We ask for SAME_STEP autoreset, so a finished
env's obs is already the first of its next episode and gymnasium reports the true last obs
in `info["final_obs"]` (an object array, set only where done): we turn that into a dense
`[B, *obs_shape]` tensor that equals `obs` where nothing ended.

A `gymnasium.Env` class of your own needs no registering: named by import path
("my_envs:Arm"), it is vectorised from a spec made here, as a registered id would be.
"""

from __future__ import annotations

import importlib
import multiprocessing
import re
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec
from torch import Tensor

from dask_podracer.envs.base import StepResult, canonical_device
from dask_podracer.envs.devices import check_buffer_fits

PREFIX = "gym:"


MJDATA_BYTES = 400 * 2**10
"""A floor on the memory of one simulation's MjData: with mujoco 4.0, 450 KB resident measured for a one-body
model and 482 KB for Ant's, once made (its data buffer, 5-23 KB of it, zero-filled; the rest, the same for any
model, comes with making it)."""

GYM_ENV_BYTES = 2_000
"""A floor on the memory of any one gymnasium env (the Env and its wrappers, as Python objects): 2.3-3.0 KB measured
for Acrobot, CartPole, Pendulum and MountainCarContinuous with gymnasium 1.2 (tracemalloc, 2,000 envs; FrozenLake 24
KB). With the 35 bytes of its observation and step counted alone, `segment.eval_episodes = 100000000` on a gym: env
passed the preflight and then built envs on a worker for hours."""


def _flattens(space: gym.Space) -> bool:
    """Whether `space` is one gymnasium's `FlattenObservation` turns into a Box and that this adapter flattens: a
    Discrete, MultiDiscrete or MultiBinary one, or a Tuple or Dict of flattenable spaces. A Box is left as it is (the
    algorithms flatten a Box of any shape themselves), and so is a space with no flat form (Graph, Sequence, Text:
    refused by every algorithm)."""
    if isinstance(space, gym.spaces.Box):
        return False
    try:
        return isinstance(gym.spaces.flatten_space(space), gym.spaces.Box)
    except (NotImplementedError, TypeError, ValueError):
        return False


def _versions_hint(env_id: str) -> str:
    """For an id written without its version (`gym:CartPole`, which gymnasium calls unregistered): the registered
    ids of that name, newest first."""
    if not isinstance(env_id, str) or re.search(r"-v\d+$", env_id):
        return ""
    versions = sorted((spec.version, spec.id) for spec in gym.registry.values()
                      if spec.version is not None and f"{spec.namespace + '/' if spec.namespace else ''}{spec.name}"
                      == env_id)
    if not versions:
        return ""
    return f"; write it with a version: {', '.join(f'gym:{id_}' for _, id_ in reversed(versions))} (newest first)"


def _float32(space: gym.spaces.Box) -> gym.spaces.Box:
    """A flattened observation space as the adapter presents its observations: float32 (gymnasium's one-hot of a
    Discrete is an int64 Box)."""
    return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)


class GymVecEnv:
    """A gymnasium vector env presented as our VecEnv (torch tensors on `device`, float32 obs and reward)."""

    def __init__(self, env_id: str | EnvSpec, num_envs: int, device: str | torch.device = "cpu",
                 seed: int | None = None, vectorization_mode: str = "sync", **env_kwargs: Any) -> None:
        if vectorization_mode not in ("sync", "async"):
            raise ValueError(f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}")
        if vectorization_mode == "async" and multiprocessing.current_process().daemon:
            raise ValueError("vectorization_mode 'async' starts a process per env, and this process is daemonic "
                             "(as Dask's worker processes are by default), which may start none: start the workers "
                             "with DASK_DISTRIBUTED__WORKER__DAEMON=False (the embedded cluster's are not daemonic)")
        self.env_id = env_id.id if isinstance(env_id, EnvSpec) else env_id
        self.env_class: type[gym.Env] | None = env_id.entry_point if isinstance(env_id, EnvSpec) else None
        """The Env class named by import path, when this env is one (then `env_id` is that path)."""
        self.num_envs = int(num_envs)
        self.device = canonical_device(device)
        self._seed = seed
        try:
            spec = env_id if isinstance(env_id, EnvSpec) else gym.spec(_import_registering_module(env_id))
            # each env is Python objects, and a MuJoCo one holds an MjData too (gym:Ant-v5: 1.28 MB resident an env,
            # measured): counted before gymnasium makes them, and by the preflight (`bytes_per_env`)
            self.bytes_per_env = GYM_ENV_BYTES
            what = "envs"
            if "mujoco" in str(spec.entry_point):
                relay_mujoco_warnings()
                self.bytes_per_env += MJDATA_BYTES
                what = "envs and their MjData"
            check_buffer_fits(self.num_envs * self.bytes_per_env, torch.device("cpu"),
                              f"{self.name}: {self.num_envs:,} {what} ({self.bytes_per_env:,} bytes each)")
            vector_kwargs = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
            self.env = gym.make_vec(env_id, num_envs=self.num_envs, vectorization_mode=vectorization_mode,
                                    vector_kwargs=vector_kwargs, **env_kwargs)
            self.flattened: gym.Space | None = None
            """The env's own observation space, where the adapter flattens it (a Discrete, Tuple or Dict)."""
            if _flattens(self.env.single_observation_space):
                self.flattened = self.env.single_observation_space
                # a Discrete observation (FrozenLake, Taxi) as its one-hot, a Tuple or Dict (Blackjack) as its parts'
                # concatenation: a config cannot wrap the env itself, and every algorithm takes a Box
                self.env.close()
                self.env = gym.make_vec(env_id, num_envs=self.num_envs, vectorization_mode=vectorization_mode,
                                        vector_kwargs=vector_kwargs, wrappers=[gym.wrappers.FlattenObservation],
                                        **env_kwargs)
        except gym.error.DependencyNotInstalled as e:
            said = str(e).lower()
            extra = (" (MuJoCo ids: pip install 'dask-podracer[mujoco]')" if "mujoco" in said else
                     " (Box2D ids: pip install 'dask-podracer[box2d]', a wheel: no swig needed)" if "box2d" in said
                     else "")
            raise ImportError(f"{self.name} cannot be made here: {e}{extra}") from e
        except gym.error.Error as e:  # an unknown id or version, a bad keyword
            raise ValueError(f"{self.name}: {e}{_versions_hint(self.env_id)}") from e
        self.single_observation_space = self.env.single_observation_space
        if self.flattened is not None:  # presented as the float32 our observations are (gymnasium's one-hot is int64)
            self.single_observation_space = _float32(self.single_observation_space)
        self.single_action_space = self.env.single_action_space
        # A `max_episode_steps` kwarg overrides the registered limit, as in gymnasium.make.
        limit = env_kwargs.get("max_episode_steps") or spec.max_episode_steps
        if limit is None:
            self.env.close()
            # Evaluation plays each env's episode to its end: with no limit, one policy that never
            # reaches a terminal state (CliffWalking's walking into a wall) would hang its segment.
            raise ValueError(f"{self.name} has no time limit; give it one with max_episode_steps in its kwargs "
                             f"(run.env_kwargs), at least as long as its episodes")
        self.max_episode_steps = int(limit)
        self._discrete = isinstance(self.single_action_space, gym.spaces.Discrete)
        self._episode_return = np.zeros(self.num_envs, dtype=np.float64)
        self._episode_length = np.zeros(self.num_envs, dtype=np.int64)
        self._needs_reset = True

    @property
    def name(self) -> str:
        """The env's name as a config gives it: "gym:<id>", or the import path of an Env class."""
        return self.env_id if self.env_class is not None else f"{PREFIX}{self.env_id}"

    def _tensor(self, array: np.ndarray, dtype: torch.dtype) -> Tensor:
        # Always a copy: on the CPU `as_tensor` would share memory with buffers we (or gymnasium) reuse.
        return torch.from_numpy(np.array(array, copy=True)).to(device=self.device, dtype=dtype)

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        seed = self._seed if seed is None else seed
        self._seed = None  # later resets continue each env's stream instead of repeating it
        if seed is not None:
            self.env.action_space.seed(int(seed))
        obs, _ = self.env.reset(seed=None if seed is None else int(seed))
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        self._needs_reset = False
        return self._tensor(obs, torch.float32), {}

    def step(self, actions: Tensor) -> StepResult:
        if self._needs_reset:
            raise RuntimeError(f"{self.name}.step() called before reset()")
        acts = torch.as_tensor(actions).detach().cpu().numpy()
        if self._discrete:
            acts = acts.reshape(self.num_envs).astype(np.int64)
        else:
            acts = acts.reshape(self.num_envs, *self.single_action_space.shape)
            if np.issubdtype(self.single_action_space.dtype, np.integer):
                acts = np.rint(acts)  # to the nearest integer: a cast alone cut toward 0, which got twice the share
            acts = acts.astype(self.single_action_space.dtype)
        obs, reward, terminated, truncated, g_info = self.env.step(acts)
        # gymnasium's TimeLimit also sets truncated on a step that terminates at the limit; in
        # our protocol an episode that terminated was not cut short, so termination wins.
        truncated = np.logical_and(truncated, np.logical_not(terminated))
        done = np.logical_or(terminated, truncated)
        final_obs = np.array(obs, copy=True)
        if "final_obs" in g_info:
            for i in np.flatnonzero(g_info["_final_obs"]):
                final_obs[i] = g_info["final_obs"][i]
        self._episode_return += reward
        self._episode_length += 1
        info: dict[str, Any] = {
            "final_obs": self._tensor(final_obs, torch.float32),
            "episode_return": self._tensor(self._episode_return, torch.float32),
            "episode_length": self._tensor(self._episode_length, torch.int64),
        }
        self._episode_return[done] = 0.0
        self._episode_length[done] = 0
        return (self._tensor(obs, torch.float32), self._tensor(reward, torch.float32),
                self._tensor(terminated, torch.bool), self._tensor(truncated, torch.bool), info)

    def close(self) -> None:
        self.env.close()


def _import_registering_module(env_id: str) -> str:
    """gymnasium's "<module>:<id>": import the module (which registers the id, as `gymnasium.make` would);
    the bare id."""
    if ":" not in env_id:
        return env_id
    module, _, bare = env_id.partition(":")
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{PREFIX}{env_id}: cannot import module {module!r}, which should register {bare!r} "
                          f"({e}); it must be importable wherever segments run") from e
    return bare


def make_gym_vec_env(name: str, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                     **kwargs: Any) -> GymVecEnv:
    """Build a `GymVecEnv` from a `gym:<id>` name (kwargs: `vectorization_mode`, then the env's own)."""
    return GymVecEnv(name.removeprefix(PREFIX), num_envs, device=device, seed=seed, **kwargs)


def is_gym_env_class(target: object) -> bool:
    """Whether `target` is a `gymnasium.Env` subclass: one env, which `make_gym_env_class_vec_env` vectorises."""
    return isinstance(target, type) and issubclass(target, gym.Env)


def make_gym_env_class_vec_env(path: str, env_class: type[gym.Env], num_envs: int, device: str | torch.device = "cpu",
                               seed: int | None = None, **kwargs: Any) -> GymVecEnv:
    """`num_envs` of a `gymnasium.Env` class named by the import path `path`, through gymnasium's vector envs
    as a registered id's would be (its passive checker, order enforcing and, from `max_episode_steps`, its
    time limit); the other kwargs go to the class. The class itself is the spec's entry point, so an
    async vector env's processes pickle it by reference, importing `path`'s module."""
    return GymVecEnv(EnvSpec(id=path, entry_point=env_class), num_envs, device=device, seed=seed, **kwargs)


def relay_mujoco_warnings() -> None:
    """Route MuJoCo's warnings through Python's `warnings`, unless something else already handles them.

    MuJoCo 4 warns each time it compiles one of gymnasium's own models that still uses a deprecated
    attribute (HalfCheetah's `settotalmass`), and its default handler prints the warning and appends
    it to MUJOCO_LOG.TXT in the working directory: 598 lines and a 170 KB file in a 20-minute
    HalfCheetah tournament. As a Python warning the same message is shown once per process.
    """
    try:
        import mujoco
    except ImportError:
        return  # gymnasium says so next, and the adapter names the extra
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_warn)


def _warn(message: str) -> None:
    warnings.warn(f"MuJoCo: {message}", UserWarning, stacklevel=2)
