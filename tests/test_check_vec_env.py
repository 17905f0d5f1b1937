"""`check_vec_env` passes on every registered env and on gymnasium envs through the adapter, and catches breaks."""

import math

import pytest
import torch

from dask_podracer.envs import PendulumVecEnv, canonical_env_name, make_vec_env, registered_envs
from dask_podracer.envs.checker import VecEnvCheckError, check_vec_env
from dask_podracer.envs.wrappers import EpisodeStatistics

# A whole Warp episode is 1000 steps at ~0.03-0.3 s each on this CPU: each Warp task's checker runs
# (through truncations of 3-step episodes, and through terminations) are in that module.
CHECKED_ELSEWHERE = {n: "checked in tests/test_envs_warp.py" for n in registered_envs() if n.startswith("Warp")}
REGISTERED = sorted({canonical_env_name(n) for n in registered_envs()  # aliases share a class
                     if not n.startswith(("vmas:", "mpe2:"))})  # multi-agent: tests/test_multi_agent_envs.py checks them


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.skip(reason=CHECKED_ELSEWHERE[n])) if n in CHECKED_ELSEWHERE else n
    for n in REGISTERED
])
def test_checker_passes_on_every_registered_env(name):
    """Random actions, until every env has finished an episode (for most, at the time limit)."""
    report = check_vec_env(make_vec_env(name, 4, seed=0))
    assert report.terminations + report.truncations >= 4


# Policies that drive each torch env to its terminal states, so the checker walks the termination path.
TERMINATING = {
    "Acrobot-v1": lambda obs: torch.where(obs[:, 5] >= 0, 2, 0),  # torque with the elbow's swing
    "CartPole-v1": None,  # random pushes topple the pole
    "MountainCar-v0": lambda obs: torch.where(obs[:, 1] >= 0, 2, 0),  # push with the motion: pumps energy
    "MountainCarContinuous-v0": lambda obs: torch.where(obs[:, 1:2] >= 0, 1.0, -1.0),
    "PointChase-v0": lambda obs: (8.0 * obs[:, 4:6] + obs[:, 6:8] - obs[:, 2:4]).clamp(-1, 1),  # pursuit
}


@pytest.mark.parametrize("name", sorted(TERMINATING))
def test_checker_passes_through_terminations_in_float64(name):
    """Every env terminates before its time limit; simulated in float64, the outputs must still be float32."""
    env = make_vec_env(name, 4, seed=0, dtype=torch.float64)
    report = check_vec_env(env, policy=TERMINATING[name])
    assert report.terminations >= 4 and report.truncations == 0


def test_pendulum_in_float64_truncates_and_reports_a_float32_return():
    env = make_vec_env("Pendulum", 4, seed=0, dtype=torch.float64)
    assert check_vec_env(env).truncations == 4
    env.reset(seed=0)
    _, _, _, _, info = env.step(torch.zeros(4, 1))
    assert info["episode_return"].dtype == torch.float32


def test_checker_passes_on_gymnasium_pendulum_through_the_adapter():
    env = make_vec_env("gym:Pendulum-v1", 3, seed=0)
    assert check_vec_env(env).truncations == 3
    env.close()


def test_checker_passes_on_a_mujoco_env_through_the_adapter():
    pytest.importorskip("mujoco")
    env = make_vec_env("gym:Hopper-v5", 2, seed=0)  # Hopper falls quickly: both envs finish within the limit
    assert check_vec_env(env, max_steps=300).terminations >= 2
    env.close()


def test_checker_passes_on_ant_through_the_adapter():
    pytest.importorskip("mujoco")
    env = make_vec_env("gym:Ant-v5", 2, seed=0, max_episode_steps=20)  # a short limit: every env finishes
    report = check_vec_env(env)
    assert report.truncations >= 1 and report.terminations + report.truncations >= 2
    env.close()


# -- envs broken on purpose: the checker must reject each ------------------------------------


class _LeakyFinalObs:
    """A Pendulum whose final_obs is off everywhere: it differs from obs where nothing ended."""

    def __init__(self):
        self._env = make_vec_env("Pendulum", 2, seed=0)

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, actions):
        obs, reward, terminated, truncated, info = self._env.step(actions)
        info["final_obs"] = obs + 1.0
        return obs, reward, terminated, truncated, info


class _ResetObsAsFinalObs(PendulumVecEnv):
    """The bug the final-obs checks exist for: final_obs is the reset observation where an episode ended."""

    max_episode_steps = 5

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        return obs, reward, terminated, truncated, {**info, "final_obs": obs.clone()}


class _HalvedFinalObs(PendulumVecEnv):
    """final_obs differs from the reset obs where an episode ended, but is not where the dynamics led."""

    max_episode_steps = 5

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        done = (terminated | truncated).unsqueeze(-1)
        return obs, reward, terminated, truncated, {**info, "final_obs": torch.where(done, info["final_obs"] / 2, obs)}


class _AutoResetFromGlobalRng(PendulumVecEnv):
    """reset(seed) draws from the env's generator, but auto-resets from torch's global one: not repeatable."""

    _in_reset = False

    def reset(self, *, seed=None):
        self._in_reset = True
        try:
            return super().reset(seed=seed)
        finally:
            self._in_reset = False

    def _uniform(self, low, high, shape):
        if self._in_reset:
            return super()._uniform(low, high, shape)
        return low + (high - low) * torch.rand(shape, dtype=self.dtype)


class _ClaimsCpu0(PendulumVecEnv):
    """Says its device is cpu:0, but its tensors report cpu: only a full device comparison tells."""

    def __init__(self):
        super().__init__(2, seed=0)
        self.device = torch.device("cpu", 0)


def test_checker_catches_a_wrong_final_obs_and_a_wrong_dtype():
    with pytest.raises(VecEnvCheckError, match="final_obs differs from obs where not done"):
        check_vec_env(_LeakyFinalObs())

    class Float64Reward(_LeakyFinalObs):
        def step(self, actions):
            obs, reward, terminated, truncated, info = self._env.step(actions)
            return obs, reward.double(), terminated, truncated, info

    with pytest.raises(VecEnvCheckError, match="reward has dtype torch.float64"):
        check_vec_env(Float64Reward())


def test_checker_rejects_a_final_obs_that_is_the_reset_obs():
    with pytest.raises(VecEnvCheckError, match="step 4: final_obs equals the new obs where an env ended"):
        check_vec_env(_ResetObsAsFinalObs(3, seed=0))


def test_checker_rejects_a_final_obs_the_dynamics_did_not_lead_to():
    with pytest.raises(VecEnvCheckError, match="step 4: final_obs is not the observation of the state the dynamics"):
        check_vec_env(_HalvedFinalObs(3, seed=0))


def test_checker_rejects_auto_resets_that_ignore_the_seed():
    env = _AutoResetFromGlobalRng(3, seed=0)
    check_vec_env(env, max_steps=199)  # no auto-reset before step 200: nothing to see yet
    with pytest.raises(VecEnvCheckError, match=r"did not repeat .*\(through the auto-resets too"):
        check_vec_env(env)


def test_checker_compares_the_whole_device_index_included():
    with pytest.raises(VecEnvCheckError, match=r"reset obs is on cpu, the env on cpu:0"):
        check_vec_env(_ClaimsCpu0())


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
    assert not math.isnan(float(here))


def test_checker_passes_a_wrapper_that_forwards_through_getattr():
    """Python 3.12's Protocol isinstance ignores __getattr__; the checker must not, as our wrappers forward with it."""
    report = check_vec_env(EpisodeStatistics(make_vec_env("Pendulum", 3, seed=0)))
    assert (report.terminations, report.truncations) == (0, 3)


def test_checker_names_the_members_an_env_lacks():
    class HalfAnEnv:
        num_envs, device = 2, torch.device("cpu")

        def reset(self, *, seed=None):
            return torch.zeros(2, 1), {}

    with pytest.raises(VecEnvCheckError, match="HalfAnEnv: lacks the VecEnv members single_observation_space, "
                                               "single_action_space, max_episode_steps, step, close"):
        check_vec_env(HalfAnEnv())
