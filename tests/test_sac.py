"""SAC: learns Pendulum on a tiny budget, repeats itself given a seed, restores exactly."""

import pytest
import torch
from helpers import score, train_agent

from dask_podracer.agents import make_agent
from dask_podracer.agents.sac import SACConfig
from dask_podracer.envs import make_vec_env

FAST = {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 1.0, "learning_starts": 500}


def test_sac_learns_pendulum_well_beyond_random():
    torch.manual_seed(0)  # the untrained policy's weights: the baseline must not depend on the tests before it
    random_policy = make_agent("sac", *_spaces(), {"hidden": (64, 64)})  # untrained: a near-random policy
    baseline = score(random_policy)
    agent = train_agent("sac", FAST, env_steps=3000)
    trained = score(agent)
    assert baseline < -900
    assert trained > -400, f"SAC reached only {trained:.0f} after 3000 env steps (random: {baseline:.0f})"


def test_same_seed_same_parameters():
    a = train_agent("sac", {**FAST, "learning_starts": 100}, env_steps=300, seed=3)
    b = train_agent("sac", {**FAST, "learning_starts": 100}, env_steps=300, seed=3)
    c = train_agent("sac", {**FAST, "learning_starts": 100}, env_steps=300, seed=4)
    for (name, pa), pb in zip(a.actor.state_dict().items(), b.actor.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.actor.state_dict()["body.0.weight"], c.actor.state_dict()["body.0.weight"])


def test_state_dict_round_trip_and_new_learning_rates_win():
    agent = train_agent("sac", {**FAST, "learning_starts": 100}, env_steps=300)
    state = agent.state_dict()
    clone = make_agent("sac", *_spaces(), {**FAST, "learning_starts": 100, "actor_lr": 5e-4, "critic_lr": 2e-3})
    clone.load_state_dict(state)
    obs = torch.randn(32, 3)
    assert torch.equal(agent.act(obs), clone.act(obs))
    assert clone.replay.size == agent.replay.size == 300
    assert torch.equal(clone.replay.state_dict()["obs"], agent.replay.state_dict()["obs"])
    assert [g["lr"] for g in clone.actor_optim.param_groups] == [5e-4]  # not the parent's 1e-3
    assert [g["lr"] for g in clone.critic_optim.param_groups] == [2e-3]
    assert clone.env_steps == agent.env_steps and clone.updates == agent.updates


def test_batched_critic_ensemble_equals_its_members_one_by_one():
    agent = make_agent("sac", *_spaces(), {**FAST, "num_critics": 3})
    obs, action = torch.randn(5, 3), torch.rand(5, 1)
    q = agent.critic(obs, action)
    assert q.shape == (3, 5)
    for i in range(3):  # the batched ensemble equals its members run one by one
        member = torch.relu(torch.cat([obs, action], -1) @ agent.critic.net[0].weight[i] + agent.critic.net[0].bias[i])
        member = torch.relu(member @ agent.critic.net[2].weight[i] + agent.critic.net[2].bias[i])
        member = (member @ agent.critic.net[4].weight[i] + agent.critic.net[4].bias[i]).squeeze(-1)
        torch.testing.assert_close(q[i], member)


@pytest.mark.parametrize("field, value, message", [
    ("gamma", 1.5, "gamma must be in"),
    ("batch_size", 0, "batch_size must be"),
    ("hidden", (), "hidden must be"),
    ("tau", 0.0, "tau must be"),
])
def test_bad_hyper_parameters_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        SACConfig(**{field: value})


def _spaces():
    env = make_vec_env("Pendulum", 1)
    return env.single_observation_space, env.single_action_space
