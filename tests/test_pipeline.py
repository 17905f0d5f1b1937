"""Pipeline mode: the worker acts with a bounded-stale snapshot while a learner thread updates."""

import pytest
import torch
from helpers import score, train_agent

from dask_podracer.agents import make_agent
from dask_podracer.envs import make_vec_env

TINY = {"hidden": (16, 16), "num_envs": 2, "learning_starts": 32, "batch_size": 16, "buffer_size": 2000}


def _run(algorithm, hparams, iterations, env="Pendulum"):
    torch.manual_seed(0)
    vec = make_vec_env(env, hparams["num_envs"], seed=0)
    agent = make_agent(algorithm, vec.single_observation_space, vec.single_action_space, hparams)
    obs, _ = vec.reset(seed=0)
    history = []
    for _ in range(iterations):
        obs, _, metrics = agent.train_iteration(vec, obs)
        history.append(metrics)
    return agent, history


@pytest.mark.parametrize("algorithm, env", [("sac", "Pendulum"), ("td3", "Pendulum"), ("ddpg", "Pendulum"),
                                            ("d3qn", "CartPole")])
def test_pipelined_agents_update_as_many_times_as_sequential_ones(algorithm, env):
    hparams = {**TINY, "utd_ratio": 2.0, "steps_per_iteration": 4}
    sequential, _ = _run(algorithm, hparams, 12, env)
    pipelined, history = _run(algorithm, {**hparams, "pipeline": True}, 12, env)
    # The same update-to-data ratio, one iteration behind: the learner works on the data of the iterations before.
    assert pipelined.updates == sequential.updates - 2.0 * 4 * 2 > 0
    assert pipelined.replay.size == sequential.replay.size == 12 * 4 * 2
    metrics = history[-1]
    assert 0 < metrics["learner_busy_fraction"] <= 1 and metrics["policy_lag_max"] >= 0
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())


def test_policy_lag_stays_within_its_bound():
    # 16 updates per iteration and 8 worker steps: without the bound the snapshot would lag up to 16 updates.
    hparams = {**TINY, "utd_ratio": 1.0, "steps_per_iteration": 8, "pipeline": True, "max_policy_lag": 3}
    agent, history = _run("sac", hparams, 20)
    assert 0 < history[-1]["policy_lag_max"] <= 3
    pipe = agent._pipeline
    live = torch.cat([p.flatten() for p in agent.actor.parameters()])
    assert not torch.equal(live, torch.cat([p.flatten() for p in pipe.snapshot.parameters()]))  # it acted stale
    pipe.refresh(agent)
    assert torch.equal(live, torch.cat([p.flatten() for p in pipe.snapshot.parameters()]))


@pytest.mark.slow
def test_pipelined_sac_learns_pendulum():
    hparams = {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 1.0, "pipeline": True}
    trained = score(train_agent("sac", hparams, env_steps=3000))
    assert trained > -400, f"pipelined SAC reached only {trained:.0f} after 3000 env steps"


@pytest.mark.parametrize("algorithm, env, hparams", [
    ("td3", "Pendulum-v1", {"pipeline": True, "num_critics": 3, "target_combine": "redq"}),
    ("d3qn", "CartPole-v1", {"pipeline": True}),
    ("a2c", "CartPole-v1", {}),
])
def test_a_segment_trains_saves_and_reloads_the_new_agents(tmp_path, algorithm, env, hparams):
    from dask_podracer.store import PodracerStore
    from dask_podracer.train import SegmentSpec, load_agent, run_segment

    store = PodracerStore(tmp_path / "store.zarr", create=True)
    spec = SegmentSpec(key="a", store_url=store.url, env=env, algorithm=algorithm,
                       hparams={**TINY, **hparams} if algorithm != "a2c" else {"num_envs": 4, "hidden": (16,)},
                       seed=1, env_steps=160, eval_episodes=3, device="cpu")
    result = run_segment(spec)
    assert result.env_steps == 160 and result.metrics
    agent = load_agent(store, "a")
    assert agent.algorithm == algorithm
