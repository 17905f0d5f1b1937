"""Vectorised evaluation: one episode in each of N envs, stepped as one batch."""

from __future__ import annotations

import torch

from dask_podracer.agents.base import Agent
from dask_podracer.envs import VecEnv


def evaluate(agent: Agent, env: VecEnv, seed: int) -> float:
    """Mean score of the first episode of every env in `env`, acting deterministically."""
    return float(episode_scores(agent, env, seed).mean())


def episode_scores(agent: Agent, env: VecEnv, seed: int) -> torch.Tensor:
    """The score of the first episode of every env in `env` (float64 `[num_envs]`), acting deterministically.

    An episode's score is its return, unless the env reports `info["episode_score"]` (envs/base.py): then it is
    that, as of the step the episode ended (or the last step played, for one still running at the step limit).
    A multi-agent env's rewards `[num_envs, n_agents]` score the team: the mean over agents of each agent's
    return, as its `info["episode_return"]` (envs/multi_agent/base.py)."""
    return episode_returns_and_scores(agent, env, seed)[1]


@torch.no_grad()
def episode_returns_and_scores(agent: Agent, env: VecEnv, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The return and the score (as `episode_scores`) of the first episode of every env in `env`: the same
    tensor twice where the env reports no scores of its own."""
    obs, _ = env.reset(seed=seed)
    returns = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
    scores: torch.Tensor | None = None  # the env's own scores, once it reports any
    running = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_steps):
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, deterministic=True))
        team = reward.flatten(1).mean(1) if reward.dim() > 1 else reward
        returns += team.double() * running
        if "episode_score" in info:
            reported = info["episode_score"].double()
            scores = torch.where(running, reported, reported if scores is None else scores)
        running &= ~(terminated | truncated)
        if not bool(running.any()):
            break
    return returns, returns if scores is None else scores
