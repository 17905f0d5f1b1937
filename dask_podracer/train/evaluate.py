"""Vectorised evaluation: one episode in each of N envs, stepped as one batch."""

from __future__ import annotations

import torch

from dask_podracer.agents.base import Agent
from dask_podracer.envs import VecEnv


def evaluate(agent: Agent, env: VecEnv, seed: int) -> float:
    """Mean return of the first episode of every env in `env`, acting deterministically."""
    return float(episode_returns(agent, env, seed).mean())


@torch.no_grad()
def episode_returns(agent: Agent, env: VecEnv, seed: int) -> torch.Tensor:
    """The return of the first episode of every env in `env` (float64 `[num_envs]`), acting deterministically.

    A multi-agent env's rewards `[num_envs, n_agents]` score the team: the mean over agents of each agent's
    return, as its `info["episode_return"]` (envs/multi_agent/base.py)."""
    obs, _ = env.reset(seed=seed)
    returns = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
    running = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_steps):
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs, deterministic=True))
        team = reward.flatten(1).mean(1) if reward.dim() > 1 else reward
        returns += team.double() * running
        running &= ~(terminated | truncated)
        if not bool(running.any()):
            break
    return returns
