"""Algorithms: an Agent protocol, a registry by name, SAC and PPO."""

from dask_podracer.agents import ppo, sac  # noqa: F401  (registers the algorithms)
from dask_podracer.agents.base import (Agent, AlgorithmInfo, algorithm_info, make_agent, register_algorithm,
                                       registered_algorithms)

__all__ = ["Agent", "AlgorithmInfo", "algorithm_info", "make_agent", "register_algorithm", "registered_algorithms"]
