"""An IsaacGymEnvs `VecTask` (or anything with its interface) as our VecEnv.

NOT RUN AGAINST ISAAC GYM: `isaacgym` is not on any package index this project can reach.
This adapter is written against the interface of IsaacGymEnvs' `tasks/base/vec_task.py`
and tested with a small task of our own that implements that interface (tests/test_isaacgym_adapter.py).

The interface used, and nothing else:
  attributes  num_envs, num_obs, num_actions, num_states (optional), observation_space, action_space,
              state_space (optional), max_episode_length, rl_device (or device), clip_obs,
              reset_buf [N] (nonzero = done), progress_buf [N] (optional), obs_buf [N, num_obs]
  methods     step(actions) -> (obs_dict, rew_buf, reset_buf, extras) with extras["time_outs"];
              reset_done() -> (obs_dict, done_env_ids), which calls reset_idx on envs whose reset_buf is set;
              compute_observations() and get_state() (optional, see below)

A VecTask does not reset finished envs in the step that finishes them: it returns the
final obs with reset_buf set, and resets them at the start of its next post_physics_step.
We want same-step auto-reset, so after every step we call `reset_done()` ourselves: the
obs it returns is the first of the next episode where a task's `reset_idx` recomputes
observations. Many tasks' `reset_idx` only writes new states (Ant, Humanoid); for those we
call `compute_observations()` after the reset when the task has it. In a real task that
call may read the simulator's state tensors before the next `simulate` has applied the
reset (stale state): this has not been run, see docs/envs.md.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import EpisodeTally, StepResult, canonical_device


def _box(space: Any) -> gym.spaces.Box:
    """A gymnasium Box from a gym (old) or gymnasium Box: IsaacGymEnvs uses the old `gym` package."""
    low = np.broadcast_to(np.asarray(space.low, dtype=np.float32), space.shape)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float32), space.shape)
    return gym.spaces.Box(low, high, dtype=np.float32)


def _check_sizes(task: Any) -> None:
    """num_obs / num_actions / num_states must agree with the task's spaces: one line naming the mismatch."""
    pairs = [("num_obs", "observation_space"), ("num_actions", "action_space")]
    if getattr(task, "num_states", 0) > 0 and hasattr(task, "state_space"):
        pairs.append(("num_states", "state_space"))
    for count, space in pairs:
        shape, n = tuple(getattr(task, space).shape), int(getattr(task, count))
        if shape != (n,):
            raise ValueError(f"task.{count} = {n} but task.{space} has shape {shape}; expected ({n},)")


class IsaacGymVecEnv:
    """Wrap a created VecTask-style `task` (its sim, device and seed are the task's own).

    `info["final_obs"]` is the VecTask's obs of the step; for asymmetric tasks (`num_states > 0`)
    `info["final_states"]` is its `states` of the step and `info["states"]` those after the reset.
    """

    def __init__(self, task: Any, recompute_obs_after_reset: bool = True) -> None:
        _check_sizes(task)
        self.task = task
        self.num_envs = int(task.num_envs)
        self.device = canonical_device(getattr(task, "rl_device", None) or task.device)
        self.single_observation_space = _box(task.observation_space)
        self.single_action_space = _box(task.action_space)
        # VecTask's time-out fires when progress_buf >= max_episode_length - 1, and progress
        # counts steps since the reset, so an episode that times out has max_episode_length - 1 steps.
        self.max_episode_steps = int(task.max_episode_length) - 1
        self.recompute_obs_after_reset = recompute_obs_after_reset and hasattr(task, "compute_observations")
        self._has_states = getattr(task, "num_states", 0) > 0
        self.tally = EpisodeTally(self.num_envs, self.device)

    def _obs_after_reset(self) -> dict[str, Tensor]:
        obs_dict, _ = self.task.reset_done()
        obs_dict = dict(obs_dict)
        if self.recompute_obs_after_reset:
            self.task.compute_observations()
            obs_dict["obs"] = torch.clamp(self.task.obs_buf, -self.task.clip_obs, self.task.clip_obs)
            if self._has_states and hasattr(self.task, "get_state"):
                obs_dict["states"] = self.task.get_state()
        return {k: v.to(self.device) for k, v in obs_dict.items()}

    def _time_outs(self, extras: dict[str, Any], done: Tensor) -> Tensor:
        """Which done envs hit the time limit. IsaacGymEnvs' VecTask has computed extras["time_outs"]
        two ways: after post_physics_step as `progress_buf >= max_episode_length - 1` ANDed with
        reset_buf (current), and before it without the AND (older releases), which reads the
        progress of the previous step and so never flags the step that times out when envs reset
        in the same step, as here. progress_buf read now gives the right answer for both."""
        time_outs = extras.get("time_outs", torch.zeros_like(done)).to(self.device).bool()
        progress = getattr(self.task, "progress_buf", None)
        if progress is not None:
            time_outs = time_outs | (progress.to(self.device) >= self.task.max_episode_length - 1)
        return time_outs & done

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        # A VecTask draws its reset states from torch's global generator (torch_rand_float):
        # seeding it here is the only way to make reset(seed=s) repeat.
        if seed is not None:
            torch.manual_seed(int(seed))
        self.task.reset_buf[:] = 1  # reset() alone returns the current obs; marking all envs done resets them
        obs_dict = self._obs_after_reset()
        self.tally.clear()
        info = {"states": obs_dict["states"]} if "states" in obs_dict else {}
        return obs_dict["obs"].to(torch.float32), info

    def step(self, actions: Tensor) -> StepResult:
        obs_dict, reward, reset_buf, extras = self.task.step(torch.as_tensor(actions, device=self.device))
        done = reset_buf.to(self.device) != 0
        truncated = self._time_outs(extras, done)  # read before reset_done zeroes progress_buf
        # An env that fails on its time limit's step is taken as truncated, against the protocol's "termination
        # wins": a VecTask's one reset_buf cannot say whether it also failed (the learner then bootstraps from the
        # failed state once an episode; a task's own termination flag, where it keeps one, would settle it).
        terminated = done & ~truncated
        # a copy: a VecTask returns its rew_buf itself (when sim and rl devices agree), which its next step overwrites
        reward = reward.to(self.device, torch.float32).clone()
        final_obs = obs_dict["obs"].to(self.device, torch.float32).clone()
        info: dict[str, Any] = {
            "final_obs": final_obs,
            **self.tally.add(reward),
            **{k: v for k, v in extras.items() if k != "time_outs"},
        }
        if "states" in obs_dict:
            info["final_states"] = obs_dict["states"].to(self.device).clone()
        self.tally.end(done)
        obs_dict = self._obs_after_reset()
        obs = torch.where(done.unsqueeze(-1), obs_dict["obs"].to(torch.float32), final_obs)
        if "states" in obs_dict:
            info["states"] = torch.where(done.unsqueeze(-1), obs_dict["states"], info["final_states"])
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """The task owns its sim; Isaac Gym releases it when the process ends."""
