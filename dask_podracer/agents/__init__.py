"""Algorithms: an Agent protocol, a registry by name; SAC, DDPG, TD3, PPO, A2C and the DQN family."""

from dask_podracer.agents import a2c, ddpg, dqn, ppo, sac, td3  # noqa: F401  (registers the algorithms)
from dask_podracer.agents.base import (Agent, AlgorithmInfo, algorithm_info, make_agent, register_algorithm,
                                       registered_algorithms)

__all__ = ["Agent", "AlgorithmInfo", "algorithm_info", "make_agent", "register_algorithm", "registered_algorithms"]
