"""Ape-X DQN (issue 25): actors on the rungs of an epsilon ladder send transitions with initial priorities to a
prioritised replay learner. The pure parts in one process; the whole on a real LocalCluster of worker processes."""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from helpers import actor_learner_segment, learner_and_actor

from dask_podracer.agents import make_agent
from dask_podracer.agents.dqn import q_learning_target
from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.envs import make_vec_env
from dask_podracer.train import evaluate

HPARAMS = {"num_envs": 4, "prioritized": True, "apex_send_steps": 25, "learning_starts": 1000}


def _agents(algorithm: str = "dqn", **hparams):
    return learner_and_actor("CartPole-v1", algorithm, {**HPARAMS, **hparams})


# -- the pure parts ----------------------------------------------------------------------------------
def test_each_actor_takes_its_rung_of_the_epsilon_ladder():
    _, _, actor = _agents()
    assert actor.start_acting(0, 3) == {"epsilon": pytest.approx(0.4)} and actor.epsilon() == pytest.approx(0.4)
    assert actor.start_acting(1, 3)["epsilon"] == pytest.approx(0.4 ** 4.5)
    assert actor.start_acting(2, 3)["epsilon"] == pytest.approx(0.4 ** 8)
    assert actor.start_acting(0, 1)["epsilon"] == pytest.approx(0.4)  # a lone actor: the top of the ladder
    _, _, actor = _agents(apex_epsilon=0.5, apex_alpha=1.0)
    assert [actor.start_acting(i, 2)["epsilon"] for i in range(2)] == pytest.approx([0.5, 0.25])


def test_an_actor_acts_with_its_epsilon_from_its_first_step():
    env, _, actor = _agents(apex_epsilon=1.0)  # the top rung explores always: every action uniform
    actor.start_acting(0, 2)
    torch.manual_seed(1)
    _, chunk, _ = actor.collect(env, env.reset(seed=3)[0])
    greedy = actor.q_net(chunk["obs"]).argmax(-1)
    assert 0.3 < (chunk["actions"] != greedy).float().mean() < 0.7  # half of uniform picks differ from greedy
    _, _, actor = _agents()  # a ladder from 0.4 has a near-greedy last rung
    actor.start_acting(1, 2)
    _, chunk, _ = actor.collect(env, env.reset(seed=3)[0])
    assert torch.equal(chunk["actions"], actor.q_net(chunk["obs"]).argmax(-1))  # eps = 0.4^8: 100 greedy steps


@pytest.mark.parametrize("algorithm", ["dqn", "double_dqn"])
def test_initial_priorities_are_the_td_errors_of_the_actors_networks_and_reach_the_replay(algorithm):
    env, learner, actor = _agents(algorithm)
    actor.load_policy_state(pickle.loads(pickle.dumps(learner.policy_state())))  # what crosses the socket
    for name in ("q_net", "q_target"):
        for mine, theirs in zip(getattr(actor, name).parameters(), getattr(learner, name).parameters()):
            assert torch.equal(mine, theirs)
    with torch.no_grad():  # the actor drifts from the learner: its own networks must be the ones used
        for p in actor.q_net.parameters():
            p.add_(0.1)
    actor.start_acting(0, 2)
    _, chunk, _ = actor.collect(env, env.reset(seed=3)[0])
    with torch.no_grad():
        q = actor.q_net(chunk["obs"]).gather(-1, chunk["actions"][:, None]).squeeze(-1)
        online = actor.q_net(chunk["next_obs"]) if algorithm == "double_dqn" else None
        target = q_learning_target(chunk["rewards"], chunk["terminated"].float(), actor.q_target(chunk["next_obs"]),
                                   online, 0.99)
        stale = learner.q_net(chunk["obs"]).gather(-1, chunk["actions"][:, None]).squeeze(-1)
    assert torch.allclose(chunk["priorities"], (q - target).abs())
    assert not torch.allclose(chunk["priorities"], (stale - target).abs())
    arrays = pickle.loads(pickle.dumps(actor.trajectory_arrays(chunk)))  # what crosses the socket
    metrics = learner.learn([learner.trajectory_from_arrays(arrays)])
    n = chunk["rewards"].numel()  # 100 rows, below learning_starts: stored, no update yet
    assert learner.updates == 0 and learner.replay.size == n
    assert torch.allclose(learner.replay.priority[:n], chunk["priorities"] + learner.config.priority_epsilon)
    assert metrics["actor_priorities_received"] == n and metrics["actor_epsilon_max"] == pytest.approx(0.4)


def test_the_learner_makes_utd_ratio_updates_per_transition_received(monkeypatch):
    env, learner, actor = _agents(learning_starts=200, batch_size=32, utd_ratio=0.25)
    actor.start_acting(0, 1)
    obs = env.reset(seed=3)[0]
    replay, update = learner.replay, learner.update
    before, drawn = [], []  # the priorities the last chunk's first update sees; each update's rows and |TD error|

    def recording_update(batch):
        if not before:
            before.append(replay.priority.clone())  # the chunk's own rows stored, no update made yet
        drawn.append((batch["index"].clone(), learner.initial_priorities(batch)))  # |TD| under these networks
        return update(batch)

    updates = []
    for i in range(4):
        if i == 3:
            monkeypatch.setattr(learner, "update", recording_update)
        obs, chunk, _ = actor.collect(env, obs)
        learner.learn([chunk])
        updates.append(learner.updates)
    assert updates == [0, 25, 50, 75]  # 100 rows a chunk; learning from the 200th transition on
    # drawn rows got their |TD error| + epsilon back (a row drawn again: its last), the others kept theirs
    expected = before[0].clone()
    for index, td in drawn:
        expected[index] = td + learner.config.priority_epsilon
    rows = torch.cat([index for index, _ in drawn]).unique()
    assert len(drawn) == 25 and torch.equal(replay.priority, expected)
    assert not torch.allclose(replay.priority[rows], before[0][rows])  # the draws moved them: not a vacuous check


def test_reward_normalisation_is_refused_with_actors(tmp_path):
    raw = {"run": {"env": "CartPole-v1", "algorithm": "dqn", "store": str(tmp_path / "r.zarr"), "budget": "1m"},
           "hparams": {"normalize_rewards": True}, "actors": {"workers": 2}}
    with pytest.raises(ConfigError, match=r"hparams.normalize_rewards must be false with \[actors\]") as error:
        config_from_dict(raw)
    assert "\n" not in str(error.value)
    raw["hparams"] = {"prioritized": True}
    assert config_from_dict(raw).actors.workers == 2  # the DQN family learns from actors


# -- a learner task and two actor processes --------------------------------------------------------
LEARN_HPARAMS = {"num_envs": 8, "prioritized": True, "apex_send_steps": 10, "learning_starts": 1000,
                 "utd_ratio": 0.25, "batch_size": 64, "learning_rate": 2e-3}


def _initial_score(seed: int) -> float:
    """The score of the segment's own starting policy: the same seed, the same evaluation env."""
    torch.manual_seed(seed)
    env = make_vec_env("CartPole-v1", 1, device="cpu")
    agent = make_agent("dqn", env.single_observation_space, env.single_action_space, LEARN_HPARAMS)
    return evaluate(agent, make_vec_env("CartPole-v1", 10, device="cpu", seed=1_000_003), seed=1_000_003)


@pytest.mark.slow
def test_apex_dqn_learns_cartpole_from_two_actors_on_their_rungs(three_slots, tmp_path):
    record = actor_learner_segment(three_slots, str(tmp_path / "apex.zarr"), "CartPole-v1", "dqn", 30_000,
                                   LEARN_HPARAMS, budget="3m")
    metrics, score = record["metrics"], record["score"]
    initial = _initial_score(0)  # the first segment's seed: run.seed (0 by default) x 1,000,003
    print("APEX", score, initial, record["train_seconds"], metrics)
    # 109 to 237 in five runs of 25,000 transitions (the interleaving of actors and learner is not reproducible)
    assert score > initial + 60, (score, initial, metrics)
    assert metrics["actors_joined"] == 2 and metrics["actors_lost"] == 0
    # the two actors acted on the two ends of the ladder, and every transition came with its initial priority
    assert metrics["actor_epsilons"] == 2
    assert metrics["actor_epsilon_max"] == pytest.approx(0.4) and metrics["actor_epsilon_min"] == pytest.approx(0.4**8)
    assert metrics["actor_priorities_received"] == metrics["transitions_received"] == record["segment_env_steps"]
    assert metrics["actor_priority_mean"] > 0
    # a replay learner drops nothing; it makes utd_ratio updates per transition once learning started
    assert metrics["rollouts_dropped_stale"] == 0
    chunk = 8 * 10  # transitions an actor sends at once; the one reaching learning_starts earns its updates
    before = chunk * (math.ceil(1000 / chunk) - 1)  # transitions received before learning started
    assert metrics["learner_updates"] == 0.25 * (metrics["transitions_received"] - before)
    assert metrics["policy_lag_max"] >= metrics["policy_lag_median"] >= 0
