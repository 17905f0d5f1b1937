"""Batched environments: the VecEnv protocol and torch-vectorised envs."""

from dask_podracer.envs.base import TorchVecEnv, VecEnv
from dask_podracer.envs.pendulum import PendulumVecEnv
from dask_podracer.envs.registry import canonical_env_name, make_vec_env, register_env, registered_envs

__all__ = ["VecEnv", "TorchVecEnv", "PendulumVecEnv", "make_vec_env", "canonical_env_name", "register_env", "registered_envs"]
