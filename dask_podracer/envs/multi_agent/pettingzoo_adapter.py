"""PettingZoo parallel-API envs (CPU, one Python object per env) as multi-agent VecEnvs, registered as
"mpe2:<env>" (e.g. "mpe2:simple_spread_v3"; `pip install dask_podracer[pettingzoo]`).

`num_envs` copies of a `ParallelEnv` are stepped one after another and their per-agent dicts stacked into
`[B, n_agents, ...]` tensors in `possible_agents` order. An agent that is done before the rest of its team
(PettingZoo drops it from `env.agents`) gets zero observations and rewards and `info["agent_done"]`; the
episode ends for the team when no agent is left, or at `max_episode_steps`, and the env resets in that same
step (`info["final_obs"]` is what the step led to). It is terminated when every agent was terminated,
truncated otherwise. MPE2's envs are built with continuous actions (Box [0, 1]^5) and `max_cycles =
max_episode_steps` (default 25, MPE's own).

Seeding: `reset(seed=s)` resets env i with seed s + i; the auto-resets continue each env's own generator.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import StepResult, canonical_device
from dask_podracer.envs.multi_agent.base import (check_max_episode_steps, check_no_quoted_flags,
                                                 check_not_reserved, joint_box, kwargs_refusal)

MPE2_ENVS = ("simple_v3", "simple_spread_v3", "simple_tag_v3", "simple_adversary_v3", "simple_push_v3",
             "simple_reference_v3", "simple_speaker_listener_v4", "simple_crypto_v3", "simple_world_comm_v3")
"""MPE2's envs registered as "mpe2:<name>" (tested against the checker: simple_spread_v3, simple_tag_v3)."""

RESERVED_KWARGS = {"continuous_actions": "actions are always continuous",
                   "max_cycles": "give max_episode_steps: the adapter keeps the time limit itself",
                   "render_mode": "segments do not render"}
"""parallel_env arguments the adapter sets itself: given again they clashed in "got multiple values for keyword
argument" (render_mode would have drawn every step of every segment)."""

BUILD_ERRORS = (AssertionError, ValueError, TypeError, IndexError, ZeroDivisionError, KeyError)
"""What MPE2 raises for env_kwargs it cannot build from: local_ratio = 2 was a bare AssertionError traceback, N = 0
"zero-size array to reduction operation maximum", naming neither the env nor the key."""


class ParallelVecEnv:
    """`num_envs` PettingZoo parallel envs made by `make()` as one multi-agent VecEnv (see the module docstring)."""

    def __init__(self, make: Callable[[], Any], num_envs: int, device: str | torch.device = "cpu",
                 seed: int | None = None, max_episode_steps: int = 25) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.envs = [make() for _ in range(num_envs)]
        self.num_envs = int(num_envs)
        self.device = canonical_device(device)
        self.max_episode_steps = check_max_episode_steps(max_episode_steps)  # int() truncated 2.5 to 2
        first = self.envs[0]
        self.agents = list(first.possible_agents)
        self.n_agents = len(self.agents)
        if self.n_agents < 1:
            raise ValueError(f"{type(first).__name__} has no agents")
        self.agent_observation_spaces = tuple(first.observation_space(a) for a in self.agents)
        self.agent_action_spaces = tuple(first.action_space(a) for a in self.agents)
        for name, spaces in (("observation", self.agent_observation_spaces), ("action", self.agent_action_spaces)):
            if not all(isinstance(s, gym.spaces.Box) and len(s.shape) == 1 for s in spaces):
                raise ValueError(f"only 1-D Box {name} spaces are supported, got {spaces}")
        self.single_observation_space = joint_box(self.agent_observation_spaces, 0.0, 0.0)
        self.single_action_space = joint_box(self.agent_action_spaces, 0.0, 1.0)
        self._act_dims = [s.shape[0] for s in self.agent_action_spaces]
        self._seed = seed
        self._needs_reset = True
        self.elapsed = np.zeros(self.num_envs, dtype=np.int64)
        self.agent_return = np.zeros((self.num_envs, self.n_agents), dtype=np.float64)

    def _row(self, obs: dict[str, Any], out: np.ndarray) -> None:
        out[:] = 0.0
        for i, agent in enumerate(self.agents):
            if agent in obs:
                o = np.asarray(obs[agent], dtype=np.float32)
                out[i, : o.shape[0]] = o

    @staticmethod
    def _left(agent: str, remaining: list[str], live: set[str], terminated: dict[str, bool], ended: bool) -> bool:
        """Whether `agent` is out of its episode after a step (`info["agent_done"]`). PettingZoo drops every
        agent at its time limit (max_cycles) too: marked done there, all of them were taken as terminated
        (agents/mappo.py's `agent_ends`), and no MPE2 episode was ever bootstrapped at truncation. On the step
        the team's episode ends, an agent that leaves only then is done only if it was terminated."""
        if agent in remaining:
            return False
        if agent not in live:  # it left before this step
            return True
        return not ended or bool(terminated.get(agent, False))

    def _tensor(self, x: np.ndarray, dtype: torch.dtype = torch.float32) -> Tensor:
        return torch.as_tensor(x, dtype=dtype).to(self.device)

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        if seed is None and self._needs_reset:
            seed = self._seed  # the constructor's seed, once
        obs = np.zeros((self.num_envs, *self.single_observation_space.shape), dtype=np.float32)
        for i, env in enumerate(self.envs):
            o, _ = env.reset(seed=None if seed is None else int(seed) + i)
            self._row(o, obs[i])
        self.elapsed[:] = 0
        self.agent_return[:] = 0.0
        self._needs_reset = False
        return self._tensor(obs), {}

    def step(self, actions: Tensor) -> StepResult:
        if self._needs_reset:
            raise RuntimeError("ParallelVecEnv.step() called before reset()")
        acts = torch.as_tensor(actions).detach().to("cpu", torch.float32).numpy()
        b, n = self.num_envs, self.n_agents
        obs = np.zeros((b, *self.single_observation_space.shape), dtype=np.float32)
        final_obs = np.zeros_like(obs)
        reward = np.zeros((b, n), dtype=np.float32)
        terminated, truncated = np.zeros(b, dtype=bool), np.zeros(b, dtype=bool)
        agent_done = np.zeros((b, n), dtype=bool)
        self.elapsed += 1
        for e, env in enumerate(self.envs):
            live = set(env.agents)
            joint = {a: acts[e, i, : self._act_dims[i]] for i, a in enumerate(self.agents) if a in live}
            o, r, term, _, _ = env.step(joint)
            self._row(o, final_obs[e])
            ended = not env.agents or self.elapsed[e] >= self.max_episode_steps
            for i, a in enumerate(self.agents):
                reward[e, i] = r.get(a, 0.0)
                agent_done[e, i] = self._left(a, env.agents, live, term, ended)
            if ended:
                terminated[e] = not env.agents and all(term.get(a, False) for a in live)
                truncated[e] = not terminated[e]
                o, _ = env.reset()
                self._row(o, obs[e])
            else:
                obs[e] = final_obs[e]
        self.agent_return += reward
        done = terminated | truncated
        info: dict[str, Any] = {
            "final_obs": self._tensor(final_obs),
            "episode_return": self._tensor(self.agent_return.mean(1)),
            "agent_episode_return": self._tensor(self.agent_return),
            "episode_length": self._tensor(self.elapsed.copy(), torch.int64),
            "agent_done": self._tensor(agent_done, torch.bool),
        }
        self.elapsed[done] = 0
        self.agent_return[done] = 0.0
        return (self._tensor(obs), self._tensor(reward), self._tensor(terminated, torch.bool),
                self._tensor(truncated, torch.bool), info)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def mpe2_factory(name: str):
    """The env factory registered as "mpe2:<name>": `factory(num_envs=, device=, seed=, **env_kwargs)`; the
    env_kwargs other than `max_episode_steps` go to MPE2's `parallel_env`."""
    def build(num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
              max_episode_steps: int = 25, **kwargs: Any) -> ParallelVecEnv:
        try:
            module = importlib.import_module(f"mpe2.{name}")
        except ImportError as e:
            raise ImportError(f"env 'mpe2:{name}' needs MPE2: pip install 'dask_podracer[pettingzoo]' ({e})") from e

        check_not_reserved(f"mpe2:{name}", kwargs, RESERVED_KWARGS)
        check_no_quoted_flags(f"mpe2:{name}", kwargs)
        steps = check_max_episode_steps(max_episode_steps)

        def make() -> Any:
            try:
                return module.parallel_env(continuous_actions=True, max_cycles=steps, **kwargs)
            except BUILD_ERRORS as e:
                raise kwargs_refusal(f"mpe2:{name}", kwargs, e) from None
        return ParallelVecEnv(make, num_envs, device=device, seed=seed, max_episode_steps=steps)
    build.__name__ = build.__qualname__ = f"mpe2_{name}"
    return build
