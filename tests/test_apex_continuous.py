"""Ape-X for continuous actions (issue 25): TD3 and DDPG actors on the rungs of a ladder of Gaussian noise scales
send transitions with initial priorities to a prioritised replay learner. The pure parts in one process; TD3 on
Pendulum on a real LocalCluster of worker processes."""

from __future__ import annotations

import pickle

import pytest
import torch
from helpers import actor_learner_segment, learner_and_actor

from dask_podracer.agents.apex import chunk_batch
from dask_podracer.config import ConfigError, config_from_dict

HPARAMS = {"num_envs": 4, "prioritized": True, "apex_send_steps": 25, "learning_starts": 1000}


def _agents(algorithm: str = "td3", **hparams):
    return learner_and_actor("Pendulum-v1", algorithm, {**HPARAMS, **hparams})


# -- the pure parts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["td3", "ddpg"])
def test_each_actor_takes_its_rung_of_the_noise_ladder(algorithm):
    _, _, actor = _agents(algorithm)  # the defaults: 0.5 down to 0.02
    # sigma_i = 0.5 * (0.02 / 0.5)^(i / (N - 1)): 0.5, 0.5 * 0.04^0.5 = 0.1, 0.02
    assert [actor.start_acting(i, 3) for i in range(3)] == [{"noise_scale": pytest.approx(s)} for s in (0.5, 0.1, 0.02)]
    assert actor.start_acting(0, 1) == {"noise_scale": pytest.approx(0.5)}  # a lone actor: the top of the ladder
    _, _, actor = _agents(algorithm, apex_noise_largest=0.4, apex_noise_smallest=0.1)
    assert [actor.start_acting(i, 3)["noise_scale"] for i in range(3)] == pytest.approx([0.4, 0.2, 0.1])
    assert [actor.start_acting(i, 5)["noise_scale"] for i in range(5)] == pytest.approx(
        [0.4 * 0.25 ** (i / 4) for i in range(5)])


def test_an_actor_explores_with_its_rung_from_its_first_step():
    env, _, actor = _agents()
    spreads = []
    for index in range(2):  # 0.5 and 0.02 of the half range (Pendulum's: 2), no uniform warm-up
        actor.start_acting(index, 2)
        torch.manual_seed(1)
        _, chunk, _ = actor.collect(env, env.reset(seed=3)[0])
        with torch.no_grad():
            deviation = chunk["actions"] - actor.actor(chunk["obs"])
        spreads.append(float(deviation.std()))
        assert float(chunk["noise_scale"]) == pytest.approx([0.5, 0.02][index])
    # 100 draws each: the wide rung's spread is near 1 (less where clipped to [-2, 2]), the narrow one's near 0.04
    assert 0.6 < spreads[0] < 1.1 and 0.03 < spreads[1] < 0.05, spreads


@pytest.mark.parametrize("algorithm", ["td3", "ddpg"])
def test_initial_priorities_are_the_td_errors_of_the_actors_networks_and_reach_the_replay(algorithm):
    env, learner, actor = _agents(algorithm, target_noise=0.0)  # no smoothing noise: the target worked out by hand
    actor.load_policy_state(pickle.loads(pickle.dumps(learner.policy_state())))  # what crosses the socket
    for name in ("actor", "actor_target", "critic", "critic_target"):
        for mine, theirs in zip(getattr(actor, name).parameters(), getattr(learner, name).parameters()):
            assert torch.equal(mine, theirs)
    with torch.no_grad():  # the actor drifts from the learner: its own networks must be the ones used
        for p in actor.critic.parameters():
            p.add_(0.1)
    actor.start_acting(1, 2)
    _, chunk, _ = actor.collect(env, env.reset(seed=3)[0])
    batch = chunk_batch(chunk, actor.obs_norm)
    with torch.no_grad():  # y = r + gamma * (1 - terminated) * min_i Q'_i(s', mu'(s')); priority mean_i |Q_i - y|
        next_q = actor.critic_target(batch["next_obs"], actor.actor_target(batch["next_obs"])).min(0).values
        y = chunk["rewards"] + 0.99 * (1 - chunk["terminated"].float()) * next_q
        expected = (actor.critic(batch["obs"], chunk["actions"]) - y).abs().mean(0)
        stale = (learner.critic(batch["obs"], chunk["actions"]) - y).abs().mean(0)
    assert actor.critic.size == (2 if algorithm == "td3" else 1)
    assert chunk["priorities"].shape == (100,) and torch.allclose(chunk["priorities"], expected)
    assert not torch.allclose(chunk["priorities"], stale)
    arrays = pickle.loads(pickle.dumps(actor.trajectory_arrays(chunk)))  # what crosses the socket
    metrics = learner.learn([learner.trajectory_from_arrays(arrays)])
    assert learner.updates == 0 and learner.replay.size == 100  # below learning_starts: stored, no update yet
    assert torch.allclose(learner.replay.priority[:100], chunk["priorities"] + learner.config.priority_epsilon)
    assert metrics["actor_priorities_received"] == 100 and metrics["actor_noise_scale_max"] == pytest.approx(0.02)


def test_actors_on_different_rungs_all_send_priorities_and_the_learner_trains_on_them():
    env, learner, actor = _agents(learning_starts=200, batch_size=32, utd_ratio=0.5)
    obs = env.reset(seed=3)[0]
    updates = []
    for index in (0, 1, 0, 1):  # two actors' chunks (one copy of the networks, two rungs), 100 rows each
        actor.start_acting(index, 2)
        obs, chunk, _ = actor.collect(env, obs)
        metrics = learner.learn([chunk])
        updates.append(learner.updates)
    assert updates == [0, 50, 100, 150]  # 0.5 per transition, from the 200th on
    assert metrics["actor_noise_scales"] == 2 and metrics["actor_noise_scale_min"] == pytest.approx(0.02)
    assert metrics["actor_noise_scale_max"] == pytest.approx(0.5)
    assert metrics["actor_priorities_received"] == 400 and metrics["actor_priority_mean"] > 0
    assert {"critic_loss", "actor_loss", "replay_size"} <= metrics.keys()


def _raw(tmp_path, algorithm: str = "td3", **hparams) -> dict:
    return {"run": {"env": "Pendulum-v1", "algorithm": algorithm, "store": str(tmp_path / "r.zarr"), "budget": "1m"},
            "hparams": hparams, "actors": {"workers": 2}}


@pytest.mark.parametrize("algorithm, hparams, message", [
    ("td3", {"apex_noise_smallest": 0.0}, r"hparams.apex_noise_smallest must be > 0"),
    ("ddpg", {"apex_noise_largest": 0.01}, r"hparams.apex_noise_largest must be >= apex_noise_smallest \(= 0.02\)"),
    ("td3", {"apex_send_steps": 0}, r"hparams.apex_send_steps must be >= 1"),
    ("td3", {"normalize_rewards": True}, r"hparams.normalize_rewards must be false with \[actors\]"),
    ("sac", {}, (r"actors: group 'sac' uses 'sac', which cannot learn from actor tasks \(algorithms that can: d3qn, "
                 r"ddpg, double_dqn, dqn, impala, td3\)")),
])
def test_settings_that_cannot_work_are_refused_naming_the_field(tmp_path, algorithm, hparams, message):
    with pytest.raises(ConfigError, match=message) as error:
        config_from_dict(_raw(tmp_path, algorithm, **hparams))
    assert "\n" not in str(error.value)
    assert config_from_dict(_raw(tmp_path, "td3", prioritized=True)).actors.workers == 2


# -- a learner task and two actor processes --------------------------------------------------------
LEARN_HPARAMS = {"hidden": [64, 64], "num_envs": 4, "gamma": 0.98, "utd_ratio": 2.0, "batch_size": 128,
                 "prioritized": True, "apex_send_steps": 10, "learning_starts": 500}


@pytest.mark.slow
def test_apex_td3_learns_pendulum_from_two_actors_on_their_rungs(three_slots, tmp_path):
    record = actor_learner_segment(three_slots, str(tmp_path / "apex.zarr"), "Pendulum-v1", "td3", 4000,
                                   LEARN_HPARAMS)
    metrics, score = record["metrics"], record["score"]
    print("APEX-TD3", score, record["train_seconds"], metrics)
    # A random (or the untrained) policy scores about -1200 to -1400. Runs of this segment (4,000 transitions, about
    # 7,100 learner updates; the interleaving of actors and learner is not reproducible) scored -331 to -146.
    assert score > -800, (score, metrics)
    assert metrics["actors_joined"] == 2 and metrics["actors_lost"] == 0
    # the two actors acted on the two ends of the ladder, and every transition came with its initial priority
    assert metrics["actor_noise_scales"] == 2
    assert metrics["actor_noise_scale_max"] == pytest.approx(0.5)
    assert metrics["actor_noise_scale_min"] == pytest.approx(0.02)
    assert metrics["actor_priorities_received"] == metrics["transitions_received"] == record["segment_env_steps"]
    assert metrics["rollouts_dropped_stale"] == 0 and metrics["learner_updates"] > 0
