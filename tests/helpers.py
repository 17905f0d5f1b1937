"""Small drivers shared by the tests: train an agent in-process and evaluate it."""

import torch

from dask_podracer.agents import make_agent
from dask_podracer.envs import make_vec_env
from dask_podracer.train import evaluate


def train_agent(algorithm: str, hparams: dict, env_steps: int, seed: int = 0, env: str = "Pendulum"):
    torch.manual_seed(seed)
    train_env = make_vec_env(env, hparams.get("num_envs", 4), seed=seed)
    agent = make_agent(algorithm, train_env.single_observation_space, train_env.single_action_space, hparams)
    obs, _ = train_env.reset(seed=seed)
    steps = 0
    while steps < env_steps:
        obs, n, _ = agent.train_iteration(train_env, obs)
        steps += n
    return agent


def score(agent, episodes: int = 10, seed: int = 123, env: str = "Pendulum") -> float:
    return evaluate(agent, make_vec_env(env, episodes, seed=seed), seed=seed)
