"""VMAS (Vectorized Multi-Agent Simulator, `pip install dask_podracer[multiagent]`) scenarios as multi-agent
VecEnvs, registered as "vmas:<scenario>" (e.g. "vmas:navigation").

VMAS steps a batch of worlds as torch code on any device, which is what our VecEnv is; this adapter stacks
its per-agent lists into `[B, n_agents, ...]` tensors, keeps the time limit itself (`max_episode_steps`,
default 100 as in BenchMARL's VMAS tasks) and resets finished worlds in the step that ends them, handing
the observation the step led to as `info["final_obs"]`. Actions are continuous and clamped to each agent's
range. Every other env_kwarg goes to the scenario (`n_agents`, `shared_rew`, ...).

Seeding: VMAS draws from a random state of its own, shared by all VMAS envs of a process and kept apart
from torch's global one; `reset(seed=s)` seeds it, so a seeded env repeats itself when nothing else draws
from VMAS in between.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import StepResult, canonical_device
from dask_podracer.envs.devices import device_memory
from dask_podracer.envs.multi_agent.base import (check_max_episode_steps, check_no_quoted_flags,
                                                 check_not_reserved, joint_box, kwargs_refusal)

PREFIX = "vmas:"

VMAS_SCENARIOS = (
    "navigation", "balance", "transport", "sampling", "wheel", "dispersion", "flocking", "discovery",
    "give_way", "passage", "reverse_transport", "joint_passage", "ball_passage", "ball_trajectory",
    "buzz_wire", "dropout", "multi_give_way", "wind_flocking",
    # VMAS's ports of the multi-agent particle envs; simple_tag, simple_adversary and simple_push are competitive
    "simple", "simple_spread", "simple_tag", "simple_adversary", "simple_push", "simple_reference",
    "simple_speaker_listener", "simple_crypto", "simple_world_comm",
)
"""The scenarios registered (tested against the checker: navigation, balance, transport, sampling, simple_tag)."""

DEFAULT_MAX_EPISODE_STEPS = 100

PROBED_ABOVE = 65_536
"""A batch of more worlds is sized on a probe of PROBE_WORLDS before it is built: 100,000,000 navigation worlds got
the process OOM-killed with no message (the client's, under `podracer check-env`). Below it the largest world
measured (navigation with 16 agents, 35 KB at its peak) fits in 2.3 GiB."""

PROBE_WORLDS = 16

PEAK_PER_STATE_BYTE = 16
"""A world's peak memory while it steps (peak RSS over three steps of 20,000-100,000 worlds on the CPU) over the
bytes of batched tensors a probe holds once built: flocking 13, navigation with 16 agents 13, balance 12, navigation
9, simple_spread 7, transport 5. Rounded up: the check is there to refuse a batch that cannot fit."""

RESERVED_KWARGS = {"continuous_actions": "actions are always continuous",
                   "max_steps": "give max_episode_steps: the adapter keeps the time limit itself",
                   "clamp_actions": "actions are always clamped to each agent's range",
                   "dict_spaces": "observations are always stacked from VMAS's lists",
                   "num_envs": "the segment sets it (hparams.num_envs)",
                   "device": "the segment sets it (segment.device)",
                   "seed": "the segment sets it", "scenario": "the env name gives it (vmas:<scenario>)"}
"""env_kwargs this adapter passes to vmas.make_env itself: given again they clashed there in a TypeError."""


def batched_tensor_bytes(root: Any, batch: int) -> int:
    """Bytes of the tensors with a leading axis of `batch` reachable from `root` through the attributes, lists
    and dicts of VMAS's and this adapter's objects: a batch of worlds' state. Each storage is counted once."""
    storages: dict[int, int] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Tensor):
            if obj.dim() and obj.shape[0] == batch:
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and type(obj).__module__.split(".")[0] in ("vmas", "dask_podracer"):
            stack.extend(vars(obj).values())
    return sum(storages.values())


def _gymnasium_box(space: Any) -> gym.spaces.Box:
    """A gymnasium Box from VMAS's gym (0.26) Box."""
    return gym.spaces.Box(np.asarray(space.low, np.float32), np.asarray(space.high, np.float32), dtype=np.float32)


class VmasVecEnv:
    """`num_envs` worlds of one VMAS scenario as a multi-agent VecEnv (see envs/multi_agent/base.py)."""

    def __init__(self, scenario: str, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS, **scenario_kwargs: Any) -> None:
        try:
            import vmas
        except ImportError as e:
            raise ImportError(f"env 'vmas:{scenario}' needs VMAS: pip install 'dask_podracer[multiagent]' ({e})") from e
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.max_episode_steps = check_max_episode_steps(max_episode_steps)
        check_not_reserved(f"vmas:{scenario}", scenario_kwargs, RESERVED_KWARGS)
        check_no_quoted_flags(f"vmas:{scenario}", scenario_kwargs)
        self.scenario = scenario
        self.num_envs = int(num_envs)
        self.device = canonical_device(device)
        if self.num_envs > PROBED_ABOVE:
            self._check_fits(seed, max_episode_steps, scenario_kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self._env = vmas.make_env(scenario, num_envs=self.num_envs, device=self.device, continuous_actions=True,
                                          max_steps=None, seed=seed, clamp_actions=True, **scenario_kwargs)
            except (AssertionError, RuntimeError, IndexError, ZeroDivisionError, TypeError, ValueError) as e:
                # n_agents = 0 was a bare AssertionError or "stack expects a non-empty TensorList": a traceback
                raise kwargs_refusal(f"vmas:{scenario}", scenario_kwargs, e) from None
        for warning in caught:
            # VMAS only warns of kwargs its scenario does not take, and the run trained without them: a misspelt
            # key (n_agent = 2) silently trained the default team
            if "passed but not used by the scenario" in str(warning.message):
                raise ValueError(f"vmas:{scenario}: {str(warning.message).split(' This will')[0]} (keys it takes are "
                                 f"those its make_world pops; see VMAS's scenarios/{scenario}.py)")
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        if self._env.n_agents < 1:
            raise ValueError(f"vmas:{scenario} with env_kwargs {scenario_kwargs} has no agents")
        self.n_agents = int(self._env.n_agents)
        self.agent_observation_spaces = tuple(_gymnasium_box(s) for s in self._env.observation_space)
        self.agent_action_spaces = tuple(_gymnasium_box(s) for s in self._env.action_space)
        for name, spaces in (("observation", self.agent_observation_spaces), ("action", self.agent_action_spaces)):
            if any(len(s.shape) != 1 for s in spaces):
                raise ValueError(f"vmas:{scenario}: only 1-D {name} spaces are supported, got {spaces}")
        self.single_observation_space = joint_box(self.agent_observation_spaces, 0.0, 0.0)
        self.single_action_space = joint_box(self.agent_action_spaces, -1.0, 1.0)
        self._obs_dims = [s.shape[0] for s in self.agent_observation_spaces]
        self._act_dims = [s.shape[0] for s in self.agent_action_spaces]
        self._needs_reset = True
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.agent_return = torch.zeros(self.num_envs, self.n_agents, device=self.device)

    def _check_fits(self, seed: int | None, max_episode_steps: int, scenario_kwargs: dict[str, Any]) -> None:
        """A MemoryError naming num_envs when a probe's state, scaled to this batch, exceeds the device's memory."""
        probe = VmasVecEnv(self.scenario, PROBE_WORLDS, self.device, seed, max_episode_steps, **scenario_kwargs)
        per_world = batched_tensor_bytes(probe, PROBE_WORLDS) / PROBE_WORLDS
        estimate, memory = self.num_envs * per_world * PEAK_PER_STATE_BYTE, device_memory(self.device)
        if memory is not None and estimate > memory:
            raise MemoryError(f"vmas:{self.scenario}: num_envs = {self.num_envs:,} worlds need about "
                              f"{estimate / 2**30:,.0f} GiB ({per_world:,.0f} bytes of state a world, and "
                              f"{PEAK_PER_STATE_BYTE}x that while stepping), more than the {memory / 2**30:,.0f} "
                              f"GiB of {self.device}")

    def _stack(self, per_agent: list[Tensor]) -> Tensor:
        """VMAS's list of `[B, dim_i]` observations as one zero-padded `[B, n_agents, obs_dim]` float32 tensor."""
        out = torch.zeros(self.num_envs, self.n_agents, self.single_observation_space.shape[1], device=self.device)
        for i, o in enumerate(per_agent):
            out[:, i, : o.shape[-1]] = o
        return out

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        obs = self._env.reset(seed=seed)
        self.elapsed = torch.zeros_like(self.elapsed)
        self.agent_return = torch.zeros_like(self.agent_return)
        self._needs_reset = False
        return self._stack(obs), {}

    def step(self, actions: Tensor) -> StepResult:
        if self._needs_reset:
            raise RuntimeError("VmasVecEnv.step() called before reset()")
        actions = torch.as_tensor(actions, device=self.device, dtype=torch.float32)
        try:
            obs, rewards, terminated, _ = self._env.step([actions[:, i, :d] for i, d in enumerate(self._act_dims)])
        except AssertionError:
            # VMAS asserts its actions hold no NaN: a bare AssertionError, the only word from a segment whose
            # policy diverged (a learning rate of 1e30, an extreme log_std_init). Checked only once VMAS refused
            # them, so the step costs no extra host sync.
            bad = [i for i, d in enumerate(self._act_dims) if bool(actions[:, i, :d].isnan().any())]
            if not bad:
                raise
            raise ValueError(f"vmas:{self.scenario}: the actions of agent(s) {bad} hold NaN (did the policy's "
                             f"training diverge?)") from None
        final_obs = self._stack(obs)
        # some scenarios (wheel) give each agent's reward as [B, 1]: stacked as is, it broke every step
        reward = torch.stack([r.reshape(self.num_envs) for r in rewards], dim=1).to(torch.float32)
        terminated = terminated.reshape(self.num_envs).to(torch.bool)
        self.elapsed = self.elapsed + 1
        self.agent_return = self.agent_return + reward
        truncated = (self.elapsed >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        info: dict[str, Any] = {
            "final_obs": final_obs,
            "episode_return": self.agent_return.mean(1),
            "agent_episode_return": self.agent_return,
            "episode_length": self.elapsed,
        }
        ended = done.nonzero().flatten().tolist()  # one host sync a step: VMAS resets a world at a time
        if not ended:
            return final_obs.clone(), reward, terminated, truncated, info
        for index in ended:
            self._env.reset_at(index, return_observations=False)
        obs = self._stack(self._env.get_from_scenario(get_observations=True, get_rewards=False, get_infos=False,
                                                      get_dones=False)[0])
        self.elapsed = self.elapsed.masked_fill(done, 0)
        self.agent_return = self.agent_return.masked_fill(done.unsqueeze(1), 0.0)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Nothing to release: VMAS's state is plain tensors."""


def vmas_factory(scenario: str):
    """The env factory registered as "vmas:<scenario>": `factory(num_envs=, device=, seed=, **env_kwargs)`."""
    def build(num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, **kwargs: Any) -> VmasVecEnv:
        return VmasVecEnv(scenario, num_envs, device=device, seed=seed, **kwargs)
    build.__name__ = build.__qualname__ = f"vmas_{scenario}"
    return build
