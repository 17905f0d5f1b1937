"""Algorithms: an Agent protocol, a registry by name; SAC, DDPG, TD3, PPO, A2C and the DQN family."""

from dask_podracer.agents import a2c, ddpg, dqn, impala, maddpg, mappo, ppo, sac, td3  # noqa: F401  (registers them)
from dask_podracer.agents.base import (Agent, AlgorithmInfo, algorithm_config, algorithm_info, make_agent,
                                       register_algorithm, registered_algorithms)


def finish_training(agent: Agent) -> None:
    """Bring an agent to rest after its last `train_iteration` (`Agent.finish`): a pipelined learner makes the
    updates it still owes and stops, so the time they take counts as training and the parameters are final."""
    agent.finish()


__all__ = ["Agent", "AlgorithmInfo", "algorithm_config", "algorithm_info", "make_agent", "register_algorithm",
           "registered_algorithms", "finish_training"]
