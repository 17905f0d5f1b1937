"""The multi-agent VecEnv contract: a batch of `num_envs` environments, each holding `n_agents` agents.

It is the single-agent VecEnv (`dask_podracer.envs.base`) with an agent dimension after the batch one, so
that everything that drives a VecEnv (a segment, the evaluator, wrappers that forward attributes) drives
one unchanged:

    obs                     [B, n_agents, obs_dim]   float32, agent i's observation in row i
    actions                 [B, n_agents, act_dim]   float32 (Box action spaces)
    reward                  [B, n_agents]            float32, each agent's own reward
    terminated, truncated   [B]                      bool, shared: an episode ends for the whole team
    info["final_obs"]       [B, n_agents, obs_dim]   the observation the step led to (same-step autoreset)
    info["episode_return"]  [B]                      float32, the TEAM return: the mean over agents of
                                                     each agent's return (where terminated | truncated)
    info["agent_episode_return"] [B, n_agents]       each agent's own return (where terminated | truncated)
    info["episode_length"]  [B]                      int64
    info["agent_done"]      [B, n_agents] (optional) bool, agents that are out of the episode already (they
                                                     still get observations and a reward of 0)

`single_observation_space` and `single_action_space` are the joint spaces of one env, Boxes of shape
`(n_agents, obs_dim)` and `(n_agents, act_dim)`; `agent_observation_spaces` and `agent_action_spaces` are
each agent's own. Agents whose own spaces are smaller than the joint one are padded with zeros
(observations) or have their trailing action entries ignored, so a shared network sees one width.

The centralised view a critic may use is the joint observation, `obs.flatten(1)` `[B, n_agents * obs_dim]`:
an env with a global state of its own may offer it as `state()` `[B, state_dim]` with `state_space` and
`info["final_state"]`; none of ours does yet, so no algorithm reads it.
"""

from __future__ import annotations

import traceback
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from dask_podracer.envs.base import VEC_ENV_MEMBERS, StepResult


class MultiAgentVecEnv(Protocol):
    """What the multi-agent algorithms expect of a batch of multi-agent environments (see the module docstring)."""

    num_envs: int
    device: torch.device
    n_agents: int
    single_observation_space: gym.spaces.Box
    single_action_space: gym.spaces.Box
    agent_observation_spaces: tuple[gym.spaces.Space, ...]
    agent_action_spaces: tuple[gym.spaces.Space, ...]
    max_episode_steps: int

    def reset(self, *, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]: ...

    def step(self, actions: torch.Tensor) -> StepResult: ...

    def close(self) -> None: ...


MULTI_AGENT_MEMBERS = (*VEC_ENV_MEMBERS, "n_agents", "agent_observation_spaces", "agent_action_spaces")
"""What an object needs to be a multi-agent VecEnv (looked up with hasattr, as VEC_ENV_MEMBERS)."""


def is_multi_agent(env: object) -> bool:
    """Whether `env` (a VecEnv, or one wrapped) has an agent dimension: it says how many agents it holds."""
    return isinstance(getattr(env, "n_agents", None), int)


def joint_box(spaces: tuple[gym.spaces.Box, ...], pad_low: float, pad_high: float) -> gym.spaces.Box:
    """One Box `(n_agents, max_dim)` holding every agent's 1-D Box; an agent's entries past its own width are
    bounded by [pad_low, pad_high]. Its `agent_widths` attribute holds each agent's own width."""
    width = max(s.shape[0] for s in spaces)
    low = np.full((len(spaces), width), pad_low, dtype=np.float32)
    high = np.full((len(spaces), width), pad_high, dtype=np.float32)
    for i, s in enumerate(spaces):
        low[i, : s.shape[0]] = s.low
        high[i, : s.shape[0]] = s.high
    box = gym.spaces.Box(low, high, dtype=np.float32)
    # the bounds cannot tell padding from an agent's own entries (both [-1, 1] on VMAS): the team algorithms
    # read the widths to leave the padded action entries out of their log-probabilities and critics
    box.agent_widths = tuple(int(s.shape[0]) for s in spaces)  # type: ignore[attr-defined]
    return box


def check_max_episode_steps(value: Any) -> int:
    """`max_episode_steps` of an adapter's env_kwargs as an int >= 1, or a ValueError naming it."""
    # a float or a string here was truncated (2.5 ran 2 steps) or failed with int()'s message, which names no field
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"max_episode_steps must be an integer >= 1, got {value!r}")
    return int(value)


def check_not_reserved(env_name: str, kwargs: dict[str, Any], reserved: dict[str, str]) -> None:
    """A ValueError naming the first key of `kwargs` that the adapter sets itself (`reserved`: key -> why): given
    again it clashed in the simulator's "got multiple values for keyword argument"."""
    for key in kwargs:
        if key in reserved:
            raise ValueError(f"{env_name}: env_kwargs may not set {key!r}: {reserved[key]}")


QUOTED_FLAGS = frozenset({"true", "false", "yes", "no", "on", "off"})


def check_no_quoted_flags(env_name: str, kwargs: dict[str, Any]) -> None:
    """A ValueError naming the first of `kwargs` whose value is a flag written as a string (`shared_rew =
    "false"`): the simulators test flags for truth, and any non-empty string is true, so it trained the opposite
    team silently. Neither adapter knows which of a scenario's keys are flags, so any such string is refused."""
    for key, value in kwargs.items():
        if isinstance(value, str) and value.strip().lower() in QUOTED_FLAGS:
            raise ValueError(f"{env_name}: env_kwargs.{key} is the string {value!r}, and the simulator takes any "
                             f"non-empty string as true: give a boolean (true or false, without quotes)")


def kwargs_refusal(env_name: str, kwargs: dict[str, Any], error: BaseException) -> ValueError:
    """One line for what a simulator raised building an env from `kwargs`: many of its checks are bare asserts,
    whose message is empty, so the failing line of source is named instead."""
    message = str(error).splitlines()[0] if str(error).strip() else ""
    if not message:
        frames = traceback.extract_tb(error.__traceback__)
        message = (frames[-1].line or "").strip() if frames else ""
    return ValueError(f"{env_name} refuses env_kwargs {kwargs}: {type(error).__name__}: {message}")
