"""Batched environments: the VecEnv protocol and torch-vectorised envs."""

from dask_podracer.envs.acrobot import AcrobotVecEnv
from dask_podracer.envs.base import TorchVecEnv, VecEnv
from dask_podracer.envs.cartpole import CartPoleVecEnv
from dask_podracer.envs.checker import VecEnvCheckError, check_vec_env
from dask_podracer.envs.gym_adapter import GymVecEnv
from dask_podracer.envs.isaacgym import IsaacGymVecEnv
from dask_podracer.envs.mountain_car import MountainCarContinuousVecEnv, MountainCarVecEnv
from dask_podracer.envs.pendulum import PendulumVecEnv
from dask_podracer.envs.point_chase import PointChaseVecEnv
from dask_podracer.envs.registry import (StoredEnvRefused, canonical_env_name, check_env_named, make_vec_env,
                                         register_env, registered_envs)
from dask_podracer.envs.warp import WarpVecEnv
from dask_podracer.envs.wrappers import EpisodeStatistics, NormalizeObservation, NormalizeReward, VecEnvWrapper

__all__ = [
    "AcrobotVecEnv",
    "CartPoleVecEnv",
    "EpisodeStatistics",
    "GymVecEnv",
    "IsaacGymVecEnv",
    "MountainCarContinuousVecEnv",
    "MountainCarVecEnv",
    "NormalizeObservation",
    "NormalizeReward",
    "PendulumVecEnv",
    "PointChaseVecEnv",
    "StoredEnvRefused",
    "TorchVecEnv",
    "VecEnv",
    "VecEnvCheckError",
    "VecEnvWrapper",
    "WarpVecEnv",
    "canonical_env_name",
    "check_env_named",
    "check_vec_env",
    "make_vec_env",
    "register_env",
    "registered_envs",
]
