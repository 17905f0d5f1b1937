"""The Isaac Gym adapter's logic, checked against a task of our own that implements the VecTask interface.

`isaacgym` cannot be installed here, so `PendulumTask` below re-creates the parts of
IsaacGymEnvs' `tasks/base/vec_task.py` that the adapter relies on (its `step`, `reset`,
`reset_done`, the reset/time-out/progress buffers, and a task whose `post_physics_step`
resets finished envs only at the *next* step, as IsaacGymEnvs' Ant does). This is a test of
our adapter against the documented interface, not a mock of our own code: the physics is
our torch Pendulum, but everything the adapter sees is shaped like a VecTask.
"""

import gymnasium as gym
import numpy as np
import torch

from dask_podracer.envs.checker import check_vec_env
from dask_podracer.envs.isaacgym import IsaacGymVecEnv
from dask_podracer.envs.pendulum import PendulumVecEnv


class PendulumTask:
    """A VecTask-shaped Pendulum: torque = 2·action, done when |speed| > 6 or after max_episode_length - 1 steps."""

    def __init__(self, num_envs: int, max_episode_length: int = 40, device: str = "cpu"):
        self.num_envs, self.num_obs, self.num_actions, self.num_states = num_envs, 3, 1, 0
        self.device = self.rl_device = device
        self.max_episode_length = max_episode_length
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.clip_obs, self.clip_actions = 10.0, 1.0
        self.physics = PendulumVecEnv(num_envs, device)
        self.physics.reset(seed=0)
        self.obs_buf = torch.zeros(num_envs, 3, device=device)
        self.rew_buf = torch.zeros(num_envs, device=device)
        self.reset_buf = torch.ones(num_envs, dtype=torch.long, device=device)
        self.timeout_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.progress_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.extras, self.obs_dict = {}, {}

    # -- what a concrete IsaacGymEnvs task implements --
    def pre_physics_step(self, actions):
        self.actions = 2.0 * actions

    def post_physics_step(self):
        self.progress_buf += 1
        env_ids = self.reset_buf.nonzero(as_tuple=False).flatten()
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        self.compute_observations()
        self.rew_buf[:] = self._reward
        speeding = self.physics.theta_dot.abs() > 6.0
        timeout = self.progress_buf >= self.max_episode_length - 1
        self.reset_buf = (speeding | timeout).long()

    def reset_idx(self, env_ids):
        # Like Ant's reset_idx: new states from torch's global generator, no new observations.
        n = len(env_ids)
        self.physics.theta[env_ids] = (torch.rand(n, device=self.device) * 2 - 1) * np.pi
        self.physics.theta_dot[env_ids] = torch.rand(n, device=self.device) * 2 - 1
        self.progress_buf[env_ids] = 0
        self.reset_buf[env_ids] = 0

    def compute_observations(self):
        self.obs_buf[:] = self.physics._observe()

    # -- VecTask's own methods, as in vec_task.py (no sim, no randomisation) --
    def step(self, actions):
        self.pre_physics_step(torch.clamp(actions, -self.clip_actions, self.clip_actions))
        self._reward, _ = self.physics._dynamics(self.actions)  # stands for gym.simulate(sim)
        self.post_physics_step()
        self.timeout_buf = (self.progress_buf >= self.max_episode_length - 1) & (self.reset_buf != 0)
        self.extras["time_outs"] = self.timeout_buf
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs)
        return self.obs_dict, self.rew_buf, self.reset_buf, self.extras

    def reset(self):
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs)
        return self.obs_dict

    def reset_done(self):
        done_env_ids = self.reset_buf.nonzero(as_tuple=False).flatten()
        if len(done_env_ids) > 0:
            self.reset_idx(done_env_ids)
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs)
        return self.obs_dict, done_env_ids


def test_adapter_passes_the_checker():
    env = IsaacGymVecEnv(PendulumTask(6))
    assert env.max_episode_steps == 39 and env.single_action_space.shape == (1,)
    check_vec_env(env)


def test_finished_envs_restart_in_the_same_step_with_fresh_observations():
    env = IsaacGymVecEnv(PendulumTask(64))
    obs, _ = env.reset(seed=0)
    seen_termination = seen_timeout = False
    for _ in range(80):
        obs, _reward, terminated, truncated, info = env.step(torch.ones(64, 1))
        done = terminated | truncated
        seen_termination |= bool(terminated.any())
        seen_timeout |= bool(truncated.any())
        if done.any():
            assert torch.all(info["final_obs"][done][:, 2][terminated[done]].abs() > 6.0)
            assert torch.all(obs[done][:, 2].abs() <= 1.0)  # a fresh state, not the final one
        assert torch.equal(obs[~done], info["final_obs"][~done])
    assert seen_termination and seen_timeout


def test_without_recomputing_a_task_like_ant_hands_back_the_stale_final_obs():
    """Why the adapter calls compute_observations(): reset_idx alone leaves obs_buf at the final obs."""
    env = IsaacGymVecEnv(PendulumTask(64), recompute_obs_after_reset=False)
    env.reset(seed=0)
    for _ in range(39):
        obs, _, terminated, truncated, info = env.step(torch.zeros(64, 1))
    done = terminated | truncated
    assert done.any()
    assert torch.equal(obs[done], info["final_obs"][done])
