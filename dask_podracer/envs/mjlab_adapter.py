"""mjlab's tasks as our VecEnv: `make_vec_env("mjlab:Mjlab-Velocity-Flat-Unitree-Go1", 4096, device="cuda")`.

mjlab (github.com/mujocolab/mjlab) builds Isaac Lab-style "manager-based" RL tasks on MuJoCo Warp:
a `ManagerBasedRlEnv` made from a task's `ManagerBasedRlEnvCfg`, stepped as one batch of worlds,
observations as a dict of groups ("actor", "critic") of torch tensors. Any task in mjlab's
registry (`mjlab.tasks.registry.list_tasks()`: velocity tracking for the Unitree Go1 and G1,
motion tracking, cube lifting, cartpole) is named "mjlab:<task id>".

mjlab 1.6 pins mujoco and mujoco-warp ~= 3.11 and this project's `warp` extra MuJoCo 4, so mjlab
lives in a virtual environment of its own (.ci/mjlab builds one); mjlab is imported only when such
an env is built.

What the adapter adds to mjlab's env:

- Same-step auto-reset with the real final observation. mjlab's own auto-reset returns only the
  post-reset observation, so the env is built with `auto_reset = False`: its step returns the
  observation the step led to (our `final_obs`), and the adapter then calls mjlab's
  `reset(env_ids=...)` for the envs that ended, as mjlab's docs prescribe for that mode.
- One observation group as a flat Box (`observation_group`, "actor" by default: the policy's,
  noise included).
- A finite action Box: mjlab's is unbounded (its PPO samples from an unclipped Gaussian); ours
  is [-clip_actions, clip_actions] per dimension, and actions are clipped to it, as mjlab's
  `RslRlVecEnvWrapper(clip_actions=...)` does.
- Swing peaks cleared at a reset: mjlab 1.6's `feet_swing_height` reward (the velocity tasks) keeps
  each foot's highest point since its last landing in the reward term, and has no reset, so an
  episode's first landing was charged for the previous episode's swing, and `reset(seed=s)` did not
  repeat the same rewards. The adapter zeroes those peaks for the envs that restart.
- terminated / truncated as our protocol has them: mjlab's time-out terms give `truncated`
  (all of them in an infinite-horizon task, `cfg.is_finite_horizon = False`, mjlab's default),
  its other terms `terminated`, which wins when both fire.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import EpisodeTally, StepResult, canonical_device

PREFIX = "mjlab:"
"""Env names "mjlab:<task id>" name a task of mjlab's registry."""

INSTALL = ("pip install 'mjlab==1.6.0' in a virtual environment of its own (it pins mujoco ~=3.11, the `warp` "
           "extra needs 4; .ci/mjlab builds one)")


_MISSING = object()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """mjlab prints a table per manager when it builds an env and a line per seeding, to stdout: a segment's
    log would get ~100 lines per env built. Swallowed here (Warp's compile messages with them)."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _set_path(cfg: Any, path: str, value: Any, task_id: str) -> None:
    """Set `path` ("sim.njmax", "rewards.air_time.weight") in `cfg`: attributes of dataclasses, keys of dicts.
    A TOML array becomes a tuple where the current value is one."""
    *parents, last = path.split(".")
    target = cfg
    for part in parents:
        target = target.get(part, _MISSING) if isinstance(target, Mapping) else getattr(target, part, _MISSING)
        if target is _MISSING or target is None:
            raise ValueError(f"env 'mjlab:{task_id}': overrides[{path!r}]: {part!r} is not in the task's config")
    current = target.get(last, _MISSING) if isinstance(target, Mapping) else getattr(target, last, _MISSING)
    if current is _MISSING:
        raise ValueError(f"env 'mjlab:{task_id}': overrides[{path!r}]: {last!r} is not in the task's config")
    if isinstance(current, tuple) and isinstance(value, list):
        value = tuple(value)
    if isinstance(target, dict):
        target[last] = value
    else:
        setattr(target, last, value)


def _gym_box(space: Any, name: str) -> gym.spaces.Box:
    """A gymnasium Box of float32 from one of mjlab's own Box spaces (same fields, another class)."""
    shape = tuple(space.shape)
    low = np.broadcast_to(np.asarray(space.low, dtype=np.float32), shape)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float32), shape)
    if len(shape) != 1:
        raise ValueError(f"{name}: observation group of shape {shape}; only flat (concatenated) groups are supported")
    return gym.spaces.Box(low, high, dtype=np.float32)


def _clear_swing_peaks(env: Any, ids: Tensor | None) -> None:
    """Zero the swing peaks of envs `ids` (all when None) in reward terms that keep them (mjlab 1.6's
    `feet_swing_height`, which has no reset of its own): a new episode starts without a swing."""
    manager = env.reward_manager
    for name in manager.active_terms:
        peaks = getattr(manager.get_term_cfg(name).func, "peak_heights", None)
        if isinstance(peaks, Tensor):
            peaks[slice(None) if ids is None else ids] = 0.0


class MjlabVecEnv:
    """An mjlab `ManagerBasedRlEnv` built with `cfg.auto_reset = False`, as our VecEnv.

    `info["final_obs"]` is the observation of `observation_group` the step led to; `info["mjlab_log"]` holds
    what mjlab's step and its resets logged (`extras["log"]`: per-term episode reward sums, curriculum and
    command metrics), for the envs that ended. Seeding is mjlab's: `reset(seed=s)` seeds the process-wide
    generators (torch's, numpy's, Python's, Warp's), which mjlab's events, commands and noise draw from.
    """

    def __init__(self, env: Any, observation_group: str = "actor", clip_actions: float = 1.0) -> None:
        if env.cfg.auto_reset:
            raise ValueError("MjlabVecEnv needs an env built with cfg.auto_reset = False: mjlab's own auto-reset "
                             "loses the final observation")
        if not clip_actions > 0:
            raise ValueError(f"clip_actions must be > 0, got {clip_actions!r}")
        groups = dict(env.single_observation_space.spaces)
        if observation_group not in groups:
            raise ValueError(f"observation_group {observation_group!r} is not one of the task's: "
                             f"{', '.join(sorted(groups))}")
        self.env = env
        self.observation_group = observation_group
        self.clip_actions = float(clip_actions)
        self.num_envs = int(env.num_envs)
        self.device = canonical_device(env.device)
        self.max_episode_steps = int(env.max_episode_length)
        self.single_observation_space = _gym_box(groups[observation_group], observation_group)
        action_dim = int(np.prod(env.single_action_space.shape))
        self.single_action_space = gym.spaces.Box(-self.clip_actions, self.clip_actions, (action_dim,), np.float32)
        self._finite_horizon = bool(env.cfg.is_finite_horizon)
        self.tally = EpisodeTally(self.num_envs, self.device)
        self._needs_reset = True

    def _observation(self, obs: Mapping[str, Tensor]) -> Tensor:
        # A copy: mjlab may compute into buffers it reuses.
        return obs[self.observation_group].to(self.device, torch.float32).clone()

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        with _quiet():
            obs, _ = self.env.reset(seed=None if seed is None else int(seed))
        _clear_swing_peaks(self.env, None)
        self.tally.clear()
        self._needs_reset = False
        return self._observation(obs), {}

    def step(self, actions: Tensor) -> StepResult:
        if self._needs_reset:
            raise RuntimeError("MjlabVecEnv.step() called before reset()")
        actions = torch.as_tensor(actions, device=self.device, dtype=torch.float32)
        actions = actions.reshape(self.num_envs, -1).clamp(-self.clip_actions, self.clip_actions)
        obs, reward, terminated, time_out, extras = self.env.step(actions)
        # mjlab rewrites its termination buffers in place at every step: copies.
        time_out = time_out.to(self.device).clone()
        terminated = terminated.to(self.device).clone()
        if self._finite_horizon:  # the time limit ends the task itself: nothing to bootstrap beyond it
            terminated |= time_out
        truncated = time_out & ~terminated
        reward = reward.to(self.device, torch.float32).clone()
        final_obs = self._observation(obs)
        info: dict[str, Any] = {
            "final_obs": final_obs,
            **self.tally.add(reward),
        }
        log = dict(extras.get("log", {}))
        done = terminated | truncated
        ended = done.nonzero().squeeze(-1)  # mjlab's own step syncs on this too
        if ended.numel() == 0:
            info["mjlab_log"] = log
            return final_obs.clone(), reward, terminated, truncated, info
        fresh, reset_extras = self.env.reset(env_ids=ended)  # no seed: nothing printed
        _clear_swing_peaks(self.env, ended)
        info["mjlab_log"] = {**log, **reset_extras.get("log", {})}
        # mjlab recomputes every env's observation (fresh noise too); only the envs that reset take it.
        obs = torch.where(done.unsqueeze(-1), self._observation(fresh), final_obs)
        self.tally.end(done)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.env.close()


def make_mjlab_vec_env(name: str, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                       observation_group: str = "actor", clip_actions: float = 1.0, play: bool = False,
                       episode_length_s: float | None = None,
                       overrides: Mapping[str, Any] | None = None) -> MjlabVecEnv:
    """Build mjlab's task `name` ("mjlab:<task id>") as `num_envs` worlds on `device`.

    `play`: the task's "play" config (mjlab's evaluation settings: no pushes, no observation noise, for
    some tasks endless episodes) instead of its training one. `episode_length_s`: the time limit in
    seconds (mjlab's; `max_episode_steps` is it over the env's step, rounded up). `overrides`: other
    fields of the task's `ManagerBasedRlEnvCfg` by dotted path, e.g. {"sim.njmax": 300,
    "rewards.air_time.weight": 0.1, "commands.twist.ranges.lin_vel_x": [-1.0, 1.0]}.
    """
    task_id = name.removeprefix(PREFIX)
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    try:
        with _quiet():
            import mjlab.tasks  # noqa: F401  (registers mjlab's tasks, and those of packages registered with it)
            from mjlab.envs import ManagerBasedRlEnv
            from mjlab.tasks.registry import list_tasks, load_env_cfg
    except ImportError as e:
        raise ImportError(f"env {name!r} needs mjlab: {INSTALL} ({e})") from e
    if task_id not in list_tasks():
        raise ValueError(f"env {name!r}: mjlab has no task {task_id!r}; its tasks: {', '.join(list_tasks())}")
    cfg = load_env_cfg(task_id, play=play)  # a copy of the registered config
    for path, value in (overrides or {}).items():
        _set_path(cfg, path, value, task_id)
    if episode_length_s is not None:
        if not episode_length_s > 0:
            raise ValueError(f"env {name!r}: episode_length_s must be > 0, got {episode_length_s!r}")
        cfg.episode_length_s = float(episode_length_s)
    cfg.scene.num_envs = int(num_envs)
    cfg.seed = None if seed is None else int(seed)
    cfg.auto_reset = False
    with _quiet():
        env = ManagerBasedRlEnv(cfg, device=str(canonical_device(device)))
    try:
        return MjlabVecEnv(env, observation_group=observation_group, clip_actions=clip_actions)
    except ValueError as e:
        env.close()
        raise ValueError(f"env {name!r}: {e}") from e
