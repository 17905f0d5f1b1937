"""What trying every classic-control, toy-text and box2d gymnasium id with every algorithm that fits found."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs.checker import VecEnvCheckError, check_vec_env


class _AngleOutOfBounds:
    """A VecEnv whose obs[0] leaves the declared [-pi, pi] at step 3, as gymnasium's BipedalWalkerHardcore-v3's
    unwrapped hull angle does (3.1525 at step 213 of `podracer check-env gym:BipedalWalkerHardcore-v3`)."""

    num_envs = 2
    device = torch.device("cpu")
    max_episode_steps = 10
    single_observation_space = gym.spaces.Box(np.float32([-np.pi, -1.0]), np.float32([np.pi, 1.0]), dtype=np.float32)
    single_action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None):
        self.t = 0
        return torch.zeros(2, 2), {}

    def step(self, actions):
        self.t += 1
        obs = torch.zeros(2, 2)
        obs[1, 0] = 0.5 * self.t if self.t < 3 else 3.1525
        zeros = torch.zeros(2, dtype=torch.bool)
        return obs, torch.zeros(2), zeros, zeros.clone(), {
            "final_obs": obs.clone(), "episode_return": torch.zeros(2),
            "episode_length": torch.full((2,), self.t, dtype=torch.int64)}

    def close(self):
        pass


def test_an_obs_outside_its_box_is_named_with_the_env_the_index_the_value_and_the_bound():
    with pytest.raises(VecEnvCheckError, match=r"step 2: obs outside single_observation_space "
                                               r"\(env 1, obs\[0\] = 3\.1525 > high 3\.1416\)"):
        check_vec_env(_AngleOutOfBounds(), max_steps=5, seeding=False)


def test_a_box2d_id_without_box2d_names_our_extra(monkeypatch):
    # gymnasium's advice alone (swig, then gymnasium[box2d]) builds box2d-py from source; box2d 2.3.10 has wheels
    import sys

    from dask_podracer.envs import make_vec_env

    for name in [m for m in sys.modules if m.startswith("gymnasium.envs.box2d")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "Box2D", None)  # an import of it fails, as where it is not installed
    with pytest.raises(ImportError, match=r"^gym:LunarLander-v3 cannot be made here: .*Box2D.* \(Box2D ids: pip "
                                          r"install 'dask-podracer\[box2d\]', a wheel: no swig needed\)$"):
        make_vec_env("gym:LunarLander-v3", 1)
