"""The Isaac Gym adapter's logic, checked against a task of our own that implements the VecTask interface.

`isaacgym` cannot be installed here, so `PendulumTask` below re-creates the parts of
IsaacGymEnvs' `tasks/base/vec_task.py` that the adapter relies on (its `step`, `reset`,
`reset_done`, `get_state`, the reset/time-out/progress buffers, the sim device / rl_device
split, and a task whose `post_physics_step` resets finished envs only at the *next* step,
as IsaacGymEnvs' Ant does). `VecTask.step` is copied in its two published forms: the
current one (isaac-sim/IsaacGymEnvs 225bb06: time-outs computed after post_physics_step and
ANDed with reset_buf) and an older one (9656bac: computed before post_physics_step, no AND).
This is a test of our adapter against the documented interface, not a mock of our own code:
the physics is our torch Pendulum, but everything the adapter sees is shaped like a VecTask.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs.checker import VecEnvCheckError, check_seeding, check_vec_env
from dask_podracer.envs.isaacgym import IsaacGymVecEnv
from dask_podracer.envs.pendulum import PendulumVecEnv


class PendulumTask:
    """A VecTask-shaped Pendulum: torque = 2·action, done when |speed| > 6 or after max_episode_length - 1 steps.

    `num_states=2` makes it asymmetric: states = (theta, theta_dot), the privileged raw state.
    """

    def __init__(self, num_envs: int, max_episode_length: int = 40, device: str = "cpu", rl_device: str = "cpu",
                 num_states: int = 0, legacy_time_outs: bool = False):
        self.num_envs, self.num_obs, self.num_actions, self.num_states = num_envs, 3, 1, num_states
        self.device, self.rl_device = device, rl_device
        self.max_episode_length = max_episode_length
        self.legacy_time_outs = legacy_time_outs
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.num_obs,), np.float32)
        self.state_space = gym.spaces.Box(-np.inf, np.inf, (num_states,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_actions,), np.float32)
        self.clip_obs, self.clip_actions = 10.0, 1.0
        self.physics = PendulumVecEnv(num_envs, device)
        self.physics.reset(seed=0)
        # VecTask.allocate_buffers, on the sim device
        self.obs_buf = torch.zeros(num_envs, self.num_obs, device=device)
        self.states_buf = torch.zeros(num_envs, num_states, device=device)
        self.rew_buf = torch.zeros(num_envs, device=device)
        self.reset_buf = torch.ones(num_envs, dtype=torch.long, device=device)
        self.timeout_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.progress_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.extras, self.obs_dict = {}, {}

    # -- what a concrete IsaacGymEnvs task implements --
    def pre_physics_step(self, actions):
        self.actions = 2.0 * actions.to(self.device)

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
        if self.num_states > 0:
            self.states_buf[:] = torch.stack([self.physics.theta, self.physics.theta_dot], dim=-1)

    # -- VecTask's own methods, as in vec_task.py (no sim, no randomisation, no viewer) --
    def get_state(self):
        return torch.clamp(self.states_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)

    def step(self, actions):
        self.pre_physics_step(torch.clamp(actions, -self.clip_actions, self.clip_actions))
        self._reward, _ = self.physics._dynamics(self.actions)  # stands for gym.simulate(sim)
        if self.legacy_time_outs:  # 9656bac
            self.timeout_buf = torch.where(self.progress_buf >= self.max_episode_length - 1,
                                           torch.ones_like(self.timeout_buf), torch.zeros_like(self.timeout_buf))
            self.post_physics_step()
        else:  # 225bb06
            self.post_physics_step()
            self.timeout_buf = (self.progress_buf >= self.max_episode_length - 1) & (self.reset_buf != 0)
        self.extras["time_outs"] = self.timeout_buf.to(self.rl_device)
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        if self.num_states > 0:
            self.obs_dict["states"] = self.get_state()
        return self.obs_dict, self.rew_buf.to(self.rl_device), self.reset_buf.to(self.rl_device), self.extras

    def reset(self):
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        if self.num_states > 0:
            self.obs_dict["states"] = self.get_state()
        return self.obs_dict

    def reset_done(self):
        done_env_ids = self.reset_buf.nonzero(as_tuple=False).flatten()
        if len(done_env_ids) > 0:
            self.reset_idx(done_env_ids)
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        if self.num_states > 0:
            self.obs_dict["states"] = self.get_state()
        return self.obs_dict, done_env_ids


@pytest.mark.parametrize("legacy_time_outs", [False, True], ids=["vec_task-225bb06", "vec_task-9656bac"])
def test_adapter_passes_the_checker_and_reports_time_outs_as_truncations(legacy_time_outs):
    env = IsaacGymVecEnv(PendulumTask(6, legacy_time_outs=legacy_time_outs))
    assert env.max_episode_steps == 39 and env.single_action_space.shape == (1,)
    report = check_vec_env(env)
    assert report.truncations > 0  # the older VecTask never flags these itself: the adapter reads progress_buf
    # Hanging still (theta = pi), every pendulum reaches the time limit: truncated on step 39, not terminated.
    env.reset(seed=0)
    env.task.physics.set_state(torch.full((6,), np.pi), torch.zeros(6))
    for t in range(39):
        _, _, terminated, truncated, info = env.step(torch.zeros(6, 1))
        assert not terminated.any() and truncated.all() == (t == 38), f"step {t}"
    assert info["episode_length"].tolist() == [39] * 6


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


def test_asymmetric_states_are_passed_on_final_and_after_the_reset():
    """states = (theta, theta_dot), so their theta_dot must match the obs' third entry, final and fresh."""
    env = IsaacGymVecEnv(PendulumTask(16, num_states=2))
    obs, info = env.reset(seed=0)
    assert info["states"].shape == (16, 2) and torch.equal(info["states"][:, 1], obs[:, 2])
    seen_done = False
    for _ in range(45):
        obs, _, terminated, truncated, info = env.step(torch.ones(16, 1))
        done = terminated | truncated
        seen_done |= bool(done.any())
        assert torch.equal(info["final_states"][:, 1], info["final_obs"][:, 2])
        assert torch.equal(info["states"][:, 1], obs[:, 2])  # recomputed after reset_idx, like the obs
        assert torch.equal(info["states"][~done], info["final_states"][~done])
        assert not torch.equal(info["states"][done], info["final_states"][done]) or not done.any()
    assert seen_done
    check_vec_env(env)


@pytest.mark.parametrize("field, value, message", [
    ("num_obs", 4, r"task.num_obs = 4 but task.observation_space has shape \(3,\); expected \(4,\)"),
    ("num_actions", 2, r"task.num_actions = 2 but task.action_space has shape \(1,\)"),
    ("num_states", 3, r"task.num_states = 3 but task.state_space has shape \(2,\)"),
])
def test_sizes_that_disagree_with_the_spaces_are_a_clear_error(field, value, message):
    task = PendulumTask(2, num_states=2)
    setattr(task, field, value)
    with pytest.raises(ValueError, match=message):
        IsaacGymVecEnv(task)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: torch has only one CPU device")
def test_sim_on_the_cpu_and_rl_device_on_cuda():
    env = IsaacGymVecEnv(PendulumTask(8, device="cpu", rl_device="cuda", num_states=2))
    assert env.device.type == "cuda"
    obs, info = env.reset(seed=0)
    assert obs.device == env.device and info["states"].device == env.device
    check_vec_env(env)


def test_without_recomputing_a_task_like_ant_hands_back_the_stale_final_obs():
    """Why the adapter calls compute_observations(): reset_idx alone leaves obs_buf at the final obs."""
    env = IsaacGymVecEnv(PendulumTask(64), recompute_obs_after_reset=False)
    env.reset(seed=0)
    for _ in range(39):
        obs, _, terminated, truncated, info = env.step(torch.zeros(64, 1))
    done = terminated | truncated
    assert done.any()
    assert torch.equal(obs[done], info["final_obs"][done])


def test_the_isaac_gym_adapter_hands_out_a_reward_its_task_does_not_rewrite():
    """A VecTask returns its rew_buf itself when the sim and rl devices agree; the adapter returned it as the step's
    reward, so the next step overwrote the reward a caller had kept."""
    env = IsaacGymVecEnv(PendulumTask(4))
    env.reset(seed=0)
    _, first, *_ = env.step(torch.ones(4, 1))
    kept = first.clone()
    env.step(-torch.ones(4, 1))
    assert torch.equal(first, kept)


class _AliasedReward(IsaacGymVecEnv):
    """The adapter as it was: the reward is the task's buffer."""

    def step(self, actions):
        obs, _, terminated, truncated, info = super().step(actions)
        return obs, self.task.rew_buf, terminated, truncated, info


def test_the_checker_rejects_outputs_that_the_next_step_rewrites():
    with pytest.raises(VecEnvCheckError, match="reward step 0 returned changed when the env stepped again"):
        check_vec_env(_AliasedReward(PendulumTask(6)))


def test_the_checkers_seeding_replays_compare_every_step_not_only_the_last_values_of_a_buffer():
    """An env whose first reward does not repeat, handed out in a buffer it rewrites: the replays kept references,
    so they compared the buffer's last values only and the seeding rule passed."""
    class NoisyFirstStep(_AliasedReward):
        def reset(self, *, seed=None):
            self.steps = 0
            return super().reset(seed=seed)

        def step(self, actions):
            out = super().step(actions)
            self.steps += 1
            if self.steps == 1:  # from OS entropy: not repeatable; the next step rewrites the buffer
                self.task.rew_buf += torch.from_numpy(np.random.default_rng().random(self.num_envs)).float()
            return out

    env = NoisyFirstStep(PendulumTask(6))
    # check_vec_env's step rules name the aliased buffer first (above); the seeding replays, on their own, must
    # still see that the first reward did not repeat
    with pytest.raises(VecEnvCheckError, match="did not repeat"):
        check_seeding(env, lambda: (lambda obs: torch.zeros(env.num_envs, *env.single_action_space.shape)), 0, 5)
