"""The DQN family on the torch CartPole: known-answer targets, dueling heads, learning, checkpoints."""

import pytest
import torch
from helpers import score, train_agent

from dask_podracer.agents import algorithm_info, make_agent
from dask_podracer.agents.dqn import QNetwork, linear_epsilon, q_learning_target
from dask_podracer.envs import make_vec_env
from dask_podracer.train.state import flatten_state, unflatten_state

FAST = {"num_envs": 16, "exploration_steps": 5000, "utd_ratio": 0.25, "learning_rate": 2e-3, "batch_size": 64}
TINY = {"hidden": (16, 16), "num_envs": 4, "learning_starts": 32, "batch_size": 16, "buffer_size": 1000}


def _spaces(env="CartPole"):
    env = make_vec_env(env, 1)
    return env.single_observation_space, env.single_action_space


def test_q_learning_targets_by_hand():
    reward, terminated = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0])
    next_q_target = torch.tensor([[2.0, 10.0, 4.0], [3.0, 1.0, 0.0]])
    next_q_online = torch.tensor([[0.0, 1.0, 5.0], [0.0, 9.0, 0.0]])
    # DQN: max of the target net: 1 + 0.5 * 10 = 6; the second is terminal: 1.
    torch.testing.assert_close(q_learning_target(reward, terminated, next_q_target, None, 0.5), torch.tensor([6.0, 1.0]))
    # Double DQN: the online net picks action 2, the target net values it at 4: 1 + 0.5 * 4 = 3.
    torch.testing.assert_close(q_learning_target(reward, terminated, next_q_target, next_q_online, 0.5),
                               torch.tensor([3.0, 1.0]))


def test_dueling_heads_average_to_the_state_value():
    net = QNetwork(4, 3, (8,), dueling=True)
    obs = torch.randn(5, 4)
    q = net(obs)
    value = net.value(net.body(obs)).squeeze(-1)
    torch.testing.assert_close(q.mean(-1), value)  # mean_a Q(s, a) = V(s), since the advantages are centred


def test_epsilon_schedule():
    assert linear_epsilon(0, 1.0, 0.05, 1000) == 1.0
    assert linear_epsilon(500, 1.0, 0.05, 1000) == pytest.approx(0.525)
    assert linear_epsilon(5000, 1.0, 0.05, 1000) == 0.05


def test_registered_names_differ_only_in_defaults():
    plain, double, d3qn = (algorithm_info(n).config_cls() for n in ("dqn", "double_dqn", "d3qn"))
    assert (plain.double, plain.dueling) == (False, False)
    assert (double.double, double.dueling) == (True, False)
    assert (d3qn.double, d3qn.dueling) == (True, True)
    assert make_agent("d3qn", *_spaces(), {}).q_net.dueling
    with pytest.raises(ValueError, match="Discrete"):
        make_agent("dqn", *_spaces("Pendulum"), {})
    with pytest.raises(ValueError, match=r"eps_end must be in \[0, 1\], got 2"):
        algorithm_info("dqn").config_cls(eps_end=2)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["dqn", "double_dqn", "d3qn"])
def test_learns_cartpole_well_beyond_random(algorithm):
    torch.manual_seed(0)  # an untrained Q-network's greedy policy depends on its initial weights
    random_policy = score(make_agent(algorithm, *_spaces(), {}), env="CartPole")
    trained = score(train_agent(algorithm, FAST, env_steps=12_000, env="CartPole"), env="CartPole")
    assert random_policy < 60
    assert trained > 100, f"{algorithm} reached only {trained:.0f} after 12k env steps (random: {random_policy:.0f})"


def test_state_dict_round_trip_and_new_learning_rate_wins():
    agent = train_agent("d3qn", TINY, env_steps=128, env="CartPole")
    clone = make_agent("d3qn", *_spaces(), {**TINY, "learning_rate": 3e-4})
    clone.load_state_dict(unflatten_state(*flatten_state(agent.state_dict())[::-1]))
    obs = torch.randn(32, 4)
    assert torch.equal(agent.act(obs), clone.act(obs))
    assert [g["lr"] for g in clone.optimizer.param_groups] == [3e-4]
    assert clone.updates == agent.updates > 0 and clone.replay.size == 128


def test_same_seed_same_result():
    def fingerprint(seed):
        agent = train_agent("double_dqn", TINY, env_steps=128, seed=seed, env="CartPole")
        return torch.cat([p.detach().flatten() for p in agent.q_net.parameters()])

    assert torch.equal(fingerprint(0), fingerprint(0))
    assert not torch.equal(fingerprint(0), fingerprint(1))
