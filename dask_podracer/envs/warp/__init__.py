"""gymnasium's v5 locomotion tasks on MuJoCo Warp: one engine (`vec_env.py`), five task definitions (`tasks.py`).

`WARP_ENVS` maps each env name ("WarpAnt-v0", ...) to its factory, which the registry registers.
Importing this package imports neither MuJoCo nor Warp: building an env does.
"""

from functools import partial

from dask_podracer.envs.warp.tasks import TASKS, Ant, HalfCheetah, Hopper, Humanoid, LocomotionTask, Walker2d
from dask_podracer.envs.warp.vec_env import WarpVecEnv, make_warp_env

WARP_ENVS = {name: partial(make_warp_env, task) for name, task in TASKS.items()}
"""Env name -> factory(num_envs=, device=, seed=, nconmax=, njmax=, **the task's gymnasium keyword arguments)."""

__all__ = ["Ant", "HalfCheetah", "Hopper", "Humanoid", "LocomotionTask", "TASKS", "WARP_ENVS", "Walker2d",
           "WarpVecEnv", "make_warp_env"]
