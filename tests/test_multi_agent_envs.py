"""The multi-agent VecEnv contract: the VMAS adapter passes the checker, its spaces, seeding, registration, and
the evaluator's team score."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("vmas")

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.checker import VecEnvCheckError
from dask_podracer.envs.multi_agent import VmasVecEnv, check_multi_agent_env, is_multi_agent
from dask_podracer.train.evaluate import episode_scores

SCENARIOS = ["navigation", "balance", "transport", "sampling", "simple_tag"]  # simple_tag: competitive
SCENARIO_KWARGS = {"sampling": {"grid_spacing": 0.1}}  # its default grid's resets take 5 s of the check, this 1.5


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_vmas_scenarios_pass_the_checker(scenario):
    env = make_vec_env(f"vmas:{scenario}", 3, seed=0, max_episode_steps=8, **SCENARIO_KWARGS.get(scenario, {}))
    assert is_multi_agent(env)
    report = check_multi_agent_env(env, seed=0)
    assert report.truncations + report.terminations >= 3  # every env went through an auto-reset


def test_spaces_joint_and_per_agent_with_padding():
    env = VmasVecEnv("simple_tag", 2, seed=0)  # 3 adversaries see 16 numbers, the good agent 14
    assert env.n_agents == 4
    assert env.single_observation_space.shape == (4, 16) and env.single_action_space.shape == (4, 2)
    assert [s.shape for s in env.agent_observation_spaces] == [(16,), (16,), (16,), (14,)]
    assert all(np.all(s.low == -1) and np.all(s.high == 1) for s in env.agent_action_spaces)
    obs, _ = env.reset(seed=0)
    assert torch.equal(obs[:, 3, 14:], torch.zeros(2, 2))  # padding is zeros
    nav = make_vec_env("vmas:navigation", 2, seed=0, n_agents=2)  # scenario kwargs through env_kwargs
    assert nav.n_agents == 2 and nav.single_observation_space.shape[0] == 2
    assert not is_multi_agent(make_vec_env("Pendulum-v1", 2, seed=0))


def test_seeding_repeats_across_instances_and_differs_across_seeds():
    def trace(seed):
        env = VmasVecEnv("navigation", 4, seed=seed, max_episode_steps=5)
        gen = torch.Generator().manual_seed(1)
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for _ in range(7):  # through one auto-reset
            obs, reward, *_ = env.step(torch.rand((4, *env.single_action_space.shape), generator=gen) * 2 - 1)
            out += [obs, reward]
        return torch.cat([x.flatten() for x in out])

    assert torch.equal(trace(3), trace(3))
    assert not torch.equal(trace(3), trace(4))


def test_checker_catches_a_summed_team_return():
    class Summed(VmasVecEnv):
        def step(self, actions):
            obs, reward, terminated, truncated, info = super().step(actions)
            return obs, reward, terminated, truncated, {**info, "episode_return": info["agent_episode_return"].sum(1)}

    with pytest.raises(VecEnvCheckError, match="mean over agents"):
        check_multi_agent_env(Summed("navigation", 2, seed=0, max_episode_steps=3, n_agents=2))


def test_evaluation_scores_a_team_by_the_mean_over_agents():
    env = VmasVecEnv("navigation", 4, seed=0, max_episode_steps=6, n_agents=2)

    class Still:  # a team that always pushes the same way
        def act(self, obs, deterministic=True):
            return torch.full((obs.shape[0], 2, 2), 0.5)

    returns = episode_scores(Still(), env, seed=5)
    env.reset(seed=5)
    agent_sums = torch.zeros(4, 2, dtype=torch.float64)
    for _ in range(6):
        *_, info = env.step(torch.full((4, 2, 2), 0.5))
        agent_sums = info["agent_episode_return"].double()
    assert returns.shape == (4,)
    torch.testing.assert_close(returns, agent_sums.mean(1), rtol=1e-5, atol=1e-5)


# -- PettingZoo's parallel API (MPE2) ----------------------------------------------------------

@pytest.mark.parametrize("name", ["simple_spread_v3", "simple_tag_v3"])
def test_pettingzoo_envs_pass_the_checker(name):
    pytest.importorskip("mpe2")
    env = make_vec_env(f"mpe2:{name}", 3, seed=0, max_episode_steps=6)
    assert is_multi_agent(env) and env.single_action_space.shape[1] == 5  # MPE2's continuous actions, [0, 1]^5
    report = check_multi_agent_env(env, seed=0)
    assert report.truncations == 3


def test_pettingzoo_seeding_and_a_team_trains_on_it():
    pytest.importorskip("mpe2")
    from dask_podracer.agents import make_agent

    def first_obs(seed):
        return make_vec_env("mpe2:simple_spread_v3", 2, seed=seed).reset()[0]

    assert torch.equal(first_obs(1), first_obs(1)) and not torch.equal(first_obs(1), first_obs(2))
    env = make_vec_env("mpe2:simple_spread_v3", 4, seed=0)
    torch.manual_seed(0)
    team = make_agent("mappo", env.single_observation_space, env.single_action_space,
                      {"num_envs": 4, "rollout_steps": 25, "hidden": (8,), "num_minibatches": 2, "epochs": 1})
    obs, _ = env.reset(seed=0)
    obs, steps, metrics = team.train_iteration(env, obs)
    assert steps == 100 and np.isfinite(metrics["episode_return"]) and metrics["episode_return"] < 0
    assert bool(((team.act(obs) >= 0) & (team.act(obs) <= 1)).all())  # scaled into MPE's [0, 1] actions


def test_podracer_check_env_checks_a_team_env_against_the_multi_agent_contract(capsys):
    from dask_podracer.cli import main

    assert main(["check-env", "vmas:navigation", "--num-envs", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vmas:navigation: keeps the multi-agent VecEnv contract (4 envs on cpu, 4 agents, ")
