"""Envs of one's own and gymnasium envs that misbehave or are unusual: refused in one line naming what is wrong
(before any cluster, where the preflight builds them), checked with the rule they break, or trained correctly."""

import re

import pytest
import torch

from dask_podracer.agents import make_agent
from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.envs import VecEnvCheckError, check_vec_env, make_vec_env
from dask_podracer.population import check_without_cluster

BROKEN_ENVS = """import gymnasium as gym
import numpy as np
import torch

from dask_podracer.envs import CartPoleVecEnv, PendulumVecEnv


class FloatFlags(CartPoleVecEnv):
    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        return obs, reward, terminated.float(), truncated.float(), info


class NanObs(PendulumVecEnv):
    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        obs[0, 0] = float("nan")
        return obs, reward, terminated, truncated, info


class GrowingObs(PendulumVecEnv):
    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        return torch.cat([obs, obs[:, :1]], 1), reward, terminated, truncated, info


def always_four(num_envs, device="cpu", seed=None):
    return PendulumVecEnv(4, device, seed)


class NoLimit(PendulumVecEnv):
    max_episode_steps = None


class Image(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (6, 6, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.integers(0, 256, (6, 6, 3), dtype=np.uint8), {}

    def step(self, action):
        return self.np_random.integers(0, 256, (6, 6, 3), dtype=np.uint8), float(action), False, False, {}


class FromMinusOne(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(3, start=-1)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), float(action), False, False, {}


class Float64Obs(PendulumVecEnv):
    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        return obs.double(), reward, terminated, truncated, info


class NumpyObs(PendulumVecEnv):
    def reset(self, *, seed=None):
        obs, info = super().reset(seed=seed)
        return obs.numpy(), info


class ColumnReward(PendulumVecEnv):
    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        return obs, reward[:, None], terminated, truncated, info


class RaisesAtOnce(PendulumVecEnv):
    def step(self, actions):
        raise KeyError("no such joint")


class FixedStart(PendulumVecEnv):
    def reset(self, *, seed=None):
        obs, info = super().reset(seed=0)  # the same start whatever the seed: no fault in a tournament
        return obs, info


class IntegerActions(FromMinusOne):
    action_space = gym.spaces.Box(-3, 3, (1,), np.int64)
    seen = []

    def step(self, action):
        IntegerActions.seen.append(int(action[0]))
        return super().step(0)
"""


@pytest.fixture
def misbehaving_envs(tmp_path, monkeypatch):
    (tmp_path / "misbehaving_envs.py").write_text(BROKEN_ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_the_checker_names_the_step_rule_an_env_breaks_not_only_that_it_did_not_repeat(misbehaving_envs):
    # the seeding replays ran before the step checks: float flags failed inside them with torch's
    # '"bitwise_or_cpu" not implemented for 'Float'', and a NaN or a shape that changes only "did not repeat"
    for name, rule in (("FloatFlags", "terminated has dtype torch.float32, expected torch.bool"),
                       ("NanObs", "obs has non-finite values"),
                       ("GrowingObs", r"obs has shape \(2, 4\), expected \(2, 3\)")):
        with pytest.raises(VecEnvCheckError, match=rf"^{name}: {rule}$"):
            check_vec_env(make_vec_env(f"misbehaving_envs:{name}", 2, seed=0), max_steps=5)


def test_a_factory_must_make_what_it_is_asked_for_and_say_its_time_limit(misbehaving_envs, tmp_path):
    # a factory that ignored num_envs trained a batch of 4 under an agent sized for hparams.num_envs, silently;
    # a time limit of None failed every segment with "'>=' not supported between instances of 'Tensor' and 'NoneType'"
    with pytest.raises(ValueError, match=r"^env 'misbehaving_envs:always_four' built 4 envs, asked for 2: a VecEnv "
                                         r"factory must make num_envs envs"):
        make_vec_env("misbehaving_envs:always_four", 2)
    with pytest.raises(ValueError, match=r"^env 'misbehaving_envs:NoLimit': max_episode_steps must be an integer >= 1 "
                                         r"\(evaluation plays each episode to its end\), got None$"):
        make_vec_env("misbehaving_envs:NoLimit", 2)
    config = config_from_dict({"run": {"env": "misbehaving_envs:NoLimit", "algorithm": "ppo",
                                       "store": str(tmp_path / "s.zarr")}})
    with pytest.raises(ConfigError, match=r"max_episode_steps must be an integer >= 1"):
        check_without_cluster(config)  # before any cluster
    assert make_vec_env("misbehaving_envs:always_four", 4).num_envs == 4


def test_observations_of_an_integer_box_or_a_tuple_are_checked_in_their_own_dtype(misbehaving_envs):
    # a uint8 image reaches torch as float32, which gymnasium never finds in a uint8 Box: every such env failed
    # "reset obs outside single_observation_space"; a Tuple space (Blackjack) failed with a TypeError
    assert check_vec_env(make_vec_env("misbehaving_envs:Image", 2, seed=0, max_episode_steps=5)).truncations == 2
    # the gym: adapter presents Blackjack's Tuple flattened (tests/test_gym_flat_observations.py); a VecEnv that
    # declares a Tuple itself is refused in one line
    blackjack = make_vec_env("gym:Blackjack-v1", 2, seed=0, max_episode_steps=5)
    assert check_vec_env(blackjack).truncations + check_vec_env(blackjack).terminations > 0
    blackjack.single_observation_space = blackjack.flattened
    with pytest.raises(VecEnvCheckError, match=r"single_observation_space Tuple\(Discrete\(32\), .* has no shape"):
        check_vec_env(blackjack)


def test_a_discrete_action_space_that_does_not_start_at_0_is_refused(misbehaving_envs):
    # agents pick 0 .. n-1: Discrete(3, start=-1) got action 2, which it does not have, or trained on shifted actions
    env = make_vec_env("misbehaving_envs:FromMinusOne", 2, seed=0, max_episode_steps=5)
    with pytest.raises(ValueError, match=r"^dqn picks Discrete actions from 0, but the action space is "
                                         r"Discrete\(3, start=-1\): shift it to start at 0"):
        make_agent("dqn", env.single_observation_space, env.single_action_space, {})


@pytest.mark.parametrize("algorithm, env, message", [
    ("sac", "CartPole-v1", "sac needs a continuous (Box) action space, got Discrete(2); for Discrete actions use a2c, "
                           "d3qn, double_dqn, dqn, impala, ppo"),
    ("dqn", "Pendulum-v1", "dqn needs a Discrete action space, got Box(-2.0, 2.0, (1,), float32); for Box actions use "
                           "a2c, ddpg, impala, ppo, sac, td3"),
])
def test_an_algorithm_paired_with_actions_it_cannot_take_names_those_that_can(algorithm, env, message):
    # a new user's first config (SAC on CartPole) was told only what SAC needs, not what would fit
    data = {"run": {"env": env, "algorithm": algorithm}, "segment": {"device": "cpu"}}
    with pytest.raises(ConfigError, match=f"^<config>: {re.escape(message)}$"):
        check_without_cluster(config_from_dict(data))


def test_integer_box_actions_are_rounded_not_cut_toward_0(misbehaving_envs):
    from misbehaving_envs import IntegerActions

    env = make_vec_env("misbehaving_envs:IntegerActions", 4, seed=0, max_episode_steps=5)
    env.reset(seed=0)
    IntegerActions.seen.clear()
    env.step(torch.tensor([[0.9], [-0.9], [2.6], [-1.4]]))
    assert IntegerActions.seen == [1, -1, 3, -1]


@pytest.mark.parametrize("name, says", [
    ("Float64Obs", r"breaks the VecEnv contract: Float64Obs: obs has dtype torch.float64, expected "
                   r"torch.float32 \(`podracer check-env misbehaving_envs:Float64Obs` checks it in full\)$"),  # trained
    ("NumpyObs", r"breaks the VecEnv contract: NumpyObs: reset obs is ndarray, not a torch.Tensor"),  # every segment
    ("ColumnReward", r"breaks the VecEnv contract: ColumnReward: reward has shape \(1, 1\), expected \(1,\)"),
    ("RaisesAtOnce", r"failed in its first 3 steps: KeyError: 'no such joint'$"),
])
def test_the_preflight_steps_an_env_of_ones_own_before_any_cluster(misbehaving_envs, tmp_path, name, says):
    # before: the preflight only built the env, so each of these started a cluster and then failed every segment
    # (numpy, [B, 1] rewards under PPO, an env that raises) or trained on what the contract does not promise
    config = config_from_dict({"run": {"env": f"misbehaving_envs:{name}", "algorithm": "ppo",
                                       "store": str(tmp_path / "s.zarr")}})
    with pytest.raises(ConfigError, match=rf"run.env 'misbehaving_envs:{name}' {says}"):
        check_without_cluster(config)
    assert not (tmp_path / "s.zarr").exists()


def test_an_env_whose_start_is_fixed_keeps_the_contract_and_check_env_says_the_seed_changed_nothing(
        misbehaving_envs, tmp_path, capsys):
    # check-env refused it ("different seeds gave identical initial observations"); it trains, and nothing in the
    # contract asks a seed to change the run
    from dask_podracer.cli import main

    config = config_from_dict({"run": {"env": "misbehaving_envs:FixedStart", "algorithm": "ppo",
                                       "store": str(tmp_path / "s.zarr")}})
    check_without_cluster(config)
    assert check_vec_env(make_vec_env("misbehaving_envs:FixedStart", 2, seed=0), max_steps=5).seed_matters is False
    assert check_vec_env(make_vec_env("Pendulum-v1", 2, seed=0), max_steps=5).seed_matters is True
    assert main(["check-env", "misbehaving_envs:FixedStart", "--num-envs", "2", "--max-steps", "5"]) == 0
    assert "seeds 0 and 1 gave the same run: right for an env whose start and dynamics are fixed" in \
        capsys.readouterr().out
    assert main(["check-env", "Pendulum-v1", "--num-envs", "2", "--max-steps", "5"]) == 0
    assert "gave the same run" not in capsys.readouterr().out
