"""`check_vec_env` passes on every registered env and on gymnasium envs through the adapter, and catches breaks."""

import pytest
import torch

from dask_podracer.envs import canonical_env_name, make_vec_env, registered_envs
from dask_podracer.envs.checker import VecEnvCheckError, check_vec_env


# Aliases share a class; WarpAnt needs minutes of CPU for a whole episode: tests/test_envs_warp.py checks it.
@pytest.mark.parametrize("name", sorted({canonical_env_name(n) for n in registered_envs()} - {"WarpAnt-v0"}))
def test_checker_passes_on_every_registered_env(name):
    check_vec_env(make_vec_env(name, 4, seed=0))


def test_checker_passes_on_gymnasium_pendulum_through_the_adapter():
    env = make_vec_env("gym:Pendulum-v1", 3, seed=0)
    check_vec_env(env)
    env.close()


def test_checker_passes_on_a_mujoco_env_through_the_adapter():
    pytest.importorskip("mujoco")
    env = make_vec_env("gym:Hopper-v5", 2, seed=0)  # Hopper falls quickly: both envs finish within the limit
    check_vec_env(env, max_steps=300)
    env.close()


class _LeakyFinalObs:
    """A Pendulum whose final_obs is the reset observation: the bug the checker exists to catch."""

    def __init__(self):
        self._env = make_vec_env("Pendulum", 2, seed=0)

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, actions):
        obs, reward, terminated, truncated, info = self._env.step(actions)
        info["final_obs"] = obs + 1.0
        return obs, reward, terminated, truncated, info


def test_checker_catches_a_wrong_final_obs_and_a_wrong_dtype():
    with pytest.raises(VecEnvCheckError, match="final_obs differs from obs"):
        check_vec_env(_LeakyFinalObs())

    class Float64Reward(_LeakyFinalObs):
        def step(self, actions):
            obs, reward, terminated, truncated, info = self._env.step(actions)
            return obs, reward.double(), terminated, truncated, info

    with pytest.raises(VecEnvCheckError, match="reward has dtype torch.float64"):
        check_vec_env(Float64Reward())


def test_same_seed_same_trajectory_in_a_fresh_process():
    """Seeding does not depend on anything a process accumulated (global RNG state, import order)."""
    import subprocess
    import sys

    code = (
        "import torch; torch.set_num_threads(1)\n"
        "from dask_podracer.envs import make_vec_env\n"
        "env = make_vec_env('PointChase', 8, seed=11); obs, _ = env.reset(); g = torch.Generator().manual_seed(0)\n"
        "for _ in range(300): obs, *_ = env.step(torch.rand(8, 2, generator=g) * 2 - 1)\n"
        "print(repr(obs.sum().item()))\n"
    )
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    torch.manual_seed(123)  # a different global state here must not matter
    env = make_vec_env("PointChase", 8, seed=11)
    obs, _ = env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        obs, *_ = env.step(torch.rand(8, 2, generator=g) * 2 - 1)
    assert here.strip() == repr(obs.sum().item())
