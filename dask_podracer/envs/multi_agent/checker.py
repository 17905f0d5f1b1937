"""`check_multi_agent_env(env)`: does an env keep the multi-agent VecEnv contract (envs/multi_agent/base.py)?

Each check raises `VecEnvCheckError` naming the env and what broke, in the order of the single-agent checker
(envs/checker.py): attributes and spaces (joint and per agent); reset's shapes, dtypes and device; seeding
determinism through every env's first auto-reset; every step's shapes, dtypes and device; the auto-reset
contract (`final_obs` equals `obs` where nothing ended and differs where something did, the clock restarts,
the team and per-agent episode returns add up, truncation only at the time limit, never with termination).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.checker import CheckReport, VecEnvCheckError, check_seeding
from dask_podracer.envs.multi_agent.base import MULTI_AGENT_MEMBERS, MultiAgentVecEnv

Policy = Callable[[Tensor], Tensor]


def _require(ok: bool, env: object, message: str) -> None:
    if not ok:
        raise VecEnvCheckError(f"{type(env).__name__}: {message}")


def sample_joint_actions(env: MultiAgentVecEnv, generator: torch.Generator) -> Tensor:
    """Uniformly random joint actions `[B, n_agents, act_dim]` in the joint Box, on the env's device."""
    space = env.single_action_space
    low = torch.as_tensor(np.nan_to_num(space.low, neginf=-1.0), dtype=torch.float32)
    high = torch.as_tensor(np.nan_to_num(space.high, posinf=1.0), dtype=torch.float32)
    u = torch.rand((env.num_envs, *space.shape), generator=generator)
    return (low + (high - low) * u).to(env.device)


def _check_tensor(env: object, name: str, x: object, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    _require(isinstance(x, Tensor), env, f"{name} is {type(x).__name__}, not a torch.Tensor")
    assert isinstance(x, Tensor)
    _require(tuple(x.shape) == shape, env, f"{name} has shape {tuple(x.shape)}, expected {shape}")
    _require(x.dtype == dtype, env, f"{name} has dtype {x.dtype}, expected {dtype}")
    _require(x.device == env.device, env, f"{name} is on {x.device}, the env on {env.device}")
    if dtype.is_floating_point:
        _require(bool(torch.isfinite(x).all()), env, f"{name} has non-finite values")


def _actor(env: MultiAgentVecEnv, seed: int, policy: Policy | None) -> Policy:
    if policy is not None:
        return policy
    gen = torch.Generator().manual_seed(seed)
    return lambda obs: sample_joint_actions(env, gen)


def _check_spaces(env: MultiAgentVecEnv) -> None:
    missing = [name for name in MULTI_AGENT_MEMBERS if not hasattr(env, name)]
    _require(not missing, env, f"lacks the multi-agent VecEnv members {', '.join(missing)}")
    _require(isinstance(env.num_envs, int) and env.num_envs >= 1, env, f"num_envs = {env.num_envs!r}")
    _require(isinstance(env.n_agents, int) and env.n_agents >= 1, env, f"n_agents = {env.n_agents!r}")
    _require(isinstance(env.device, torch.device), env, f"device is {type(env.device).__name__}, not torch.device")
    _require(isinstance(env.max_episode_steps, int) and env.max_episode_steps >= 1, env, "max_episode_steps")
    n = env.n_agents
    for name in ("single_observation_space", "single_action_space"):
        space = getattr(env, name)
        _require(isinstance(space, gym.spaces.Box) and len(space.shape) == 2 and space.shape[0] == n, env,
                 f"{name} is {space}, not a Box of shape (n_agents={n}, dim)")
    for name, joint in (("agent_observation_spaces", env.single_observation_space),
                        ("agent_action_spaces", env.single_action_space)):
        spaces = getattr(env, name)
        _require(len(spaces) == n, env, f"{name} has {len(spaces)} spaces for {n} agents")
        for i, s in enumerate(spaces):
            _require(isinstance(s, gym.spaces.Box) and len(s.shape) == 1 and s.shape[0] <= joint.shape[1], env,
                     f"{name}[{i}] is {s}, not a 1-D Box at most {joint.shape[1]} wide")
            width = s.shape[0]
            _require(np.array_equal(joint.low[i, :width], s.low) and np.array_equal(joint.high[i, :width], s.high),
                     env, f"{name}[{i}]'s bounds differ from row {i} of the joint space")


def check_multi_agent_env(env: MultiAgentVecEnv, seed: int = 0, max_steps: int | None = None,
                          policy: Policy | None = None) -> CheckReport:
    """Check `env` against the multi-agent VecEnv contract; raise `VecEnvCheckError` on the first break.

    Steps until every env has finished at least one episode, or `max_steps` (default: the time limit + 1);
    `policy` maps obs `[B, n_agents, obs_dim]` to actions (default: uniformly random joint actions).
    """
    _check_spaces(env)
    b, n = env.num_envs, env.n_agents
    obs_shape = (b, *env.single_observation_space.shape)
    act_shape = (b, *env.single_action_space.shape)
    limit = env.max_episode_steps + 1 if max_steps is None else max_steps

    def in_space(x: Tensor) -> bool:
        return all(env.single_observation_space.contains(o) for o in x.cpu().numpy())

    obs, info = env.reset(seed=seed)
    _check_tensor(env, "reset obs", obs, obs_shape, torch.float32)
    _require(isinstance(info, dict), env, "reset info is not a dict")
    _require(in_space(obs), env, "reset obs outside single_observation_space")

    seed_matters = check_seeding(env, lambda: _actor(env, seed, policy), seed, limit)

    act = _actor(env, seed, policy)
    obs, _ = env.reset(seed=seed)
    length = torch.zeros(b, dtype=torch.int64)
    agent_ret = torch.zeros(b, n, dtype=torch.float64)
    finished = torch.zeros(b, dtype=torch.bool)
    terminations = truncations = steps = 0
    for t in range(limit):
        actions = act(obs)
        _require(tuple(actions.shape) == act_shape, env, f"action shape {tuple(actions.shape)}, expected {act_shape}")
        obs, reward, terminated, truncated, info = env.step(actions)
        steps += 1
        _check_tensor(env, "obs", obs, obs_shape, torch.float32)
        _check_tensor(env, "reward", reward, (b, n), torch.float32)
        _check_tensor(env, "terminated", terminated, (b,), torch.bool)
        _check_tensor(env, "truncated", truncated, (b,), torch.bool)
        for key, shape, dtype in (("final_obs", obs_shape, torch.float32), ("episode_return", (b,), torch.float32),
                                  ("agent_episode_return", (b, n), torch.float32),
                                  ("episode_length", (b,), torch.int64)):
            _require(key in info, env, f"step info has no {key!r}")
            _check_tensor(env, f"info[{key!r}]", info[key], shape, dtype)
        if "agent_done" in info:
            _check_tensor(env, "info['agent_done']", info["agent_done"], (b, n), torch.bool)
        term, trunc = terminated.cpu(), truncated.cpu()
        done = term | trunc
        _require(not bool((term & trunc).any()), env, f"step {t}: an env is both terminated and truncated")
        final_obs, now = info["final_obs"].cpu().flatten(1), obs.cpu().flatten(1)
        _require(torch.equal(now[~done], final_obs[~done]), env, f"step {t}: final_obs differs from obs where not done")
        _require(bool((now[done] != final_obs[done]).any(-1).all()), env,
                 f"step {t}: final_obs equals the new obs where an env ended; it must be the observation "
                 "the step led to, not the first one of the next episode")
        length += 1
        agent_ret += reward.cpu().double()
        ep_len = info["episode_length"].cpu()
        ep_agent = info["agent_episode_return"].cpu().double()
        ep_team = info["episode_return"].cpu().double()
        _require(torch.equal(ep_len[done], length[done]), env,
                 f"step {t}: episode_length {ep_len[done].tolist()} != steps since reset {length[done].tolist()}")
        _require(torch.allclose(ep_agent[done], agent_ret[done], rtol=1e-4, atol=1e-3), env,
                 f"step {t}: agent_episode_return != each agent's sum of rewards")
        _require(torch.allclose(ep_team[done], agent_ret[done].mean(1), rtol=1e-4, atol=1e-3), env,
                 f"step {t}: episode_return {ep_team[done].tolist()} is not the mean over agents of their returns")
        _require(bool((length[trunc] == env.max_episode_steps).all()), env,
                 f"step {t}: truncated before the time limit of {env.max_episode_steps}")
        _require(bool((length[~done] < env.max_episode_steps).all()), env,
                 f"step {t}: an episode ran past max_episode_steps without being truncated")
        _require(in_space(obs), env, f"step {t}: obs outside single_observation_space")
        terminations += int(term.sum())
        truncations += int(trunc.sum())
        length[done] = 0
        agent_ret[done] = 0.0
        finished |= done
        if bool(finished.all()):
            break
    _require(max_steps is not None or bool(finished.all()), env,
             f"some envs never finished an episode in {limit} steps")
    return CheckReport(steps=steps, terminations=terminations, truncations=truncations, seed_matters=seed_matters)
