"""Massive-env training: every algorithm steps 4096 envs as one batch (on the CPU here) and learns from them."""

import pytest
import torch

from dask_podracer.agents import algorithm_info, make_agent, registered_algorithms
from dask_podracer.envs import make_vec_env

N = 4096
OFF_POLICY = {"num_envs": N, "hidden": (8,), "batch_size": 32, "buffer_size": 3 * N, "learning_starts": N,
              "utd_ratio": 4 / N}  # 4 updates per iteration: learning starts with the first one
ON_POLICY = {"num_envs": N, "rollout_steps": 2, "hidden": (8,)}
CASES = {name: ("CartPole" if name in ("dqn", "double_dqn", "d3qn", "a2c", "impala") else "Pendulum",
                ON_POLICY if name in ("ppo", "a2c", "impala") else OFF_POLICY)
         for name in registered_algorithms()}
CASES.update({name: ("vmas:navigation", ON_POLICY) for name in ("mappo", "ippo")})  # teams of 4 agents
CASES["maddpg"] = ("vmas:navigation", {**OFF_POLICY, "steps_per_iteration": 1})


@pytest.mark.parametrize("algorithm, pipeline", [(name, False) for name in sorted(CASES)] + [("sac", True)])
def test_every_algorithm_trains_on_4096_envs(algorithm, pipeline):
    env_name, hparams = CASES[algorithm]
    if pipeline:
        hparams = {**hparams, "pipeline": True}
    if algorithm == "ppo":
        hparams = {**hparams, "epochs": 1, "num_minibatches": 4}
    torch.manual_seed(0)
    env = make_vec_env(env_name, N, seed=0)
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    obs, _ = env.reset(seed=0)
    iterations = 3 if pipeline else 2
    steps = 0
    for i in range(iterations):
        if pipeline and i == iterations - 1:
            agent.loop.pause()  # so that the learner thread has finished some updates to report on
        obs, n, metrics = agent.train_iteration(env, obs)
        steps += n
    assert steps == iterations * N * hparams.get("rollout_steps", 1)
    assert metrics and all(torch.isfinite(torch.tensor(v)) for v in metrics.values()), metrics
    assert agent.act(obs).shape[0] == N
    if algorithm not in ("ppo", "a2c", "impala", "mappo", "ippo"):
        assert agent.replay.size == iterations * N and agent.updates == 4 * iterations


@pytest.mark.parametrize("algorithm", ["ddpg", "td3", "sac", "dqn"])
def test_a_replay_buffer_smaller_than_an_iteration_is_refused(algorithm):
    config_cls = algorithm_info(algorithm).config_cls
    message = r"^buffer_size must be >= num_envs \* steps_per_iteration \(= 8192\), got 5000$"
    with pytest.raises(ValueError, match=message):
        config_cls(num_envs=N, steps_per_iteration=2, buffer_size=5000)
    assert config_cls(num_envs=N, steps_per_iteration=2, buffer_size=8192).buffer_size == 8192
