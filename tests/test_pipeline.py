"""Pipeline mode: the worker runs ahead with a bounded-stale snapshot while a learner thread updates."""

import threading

import pytest
import torch
from helpers import score, train_agent

from dask_podracer.agents import make_agent
from dask_podracer.agents.loop import LoopStats
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
    return agent, history, vec, obs


@pytest.mark.parametrize("algorithm, env", [("sac", "Pendulum"), ("td3", "Pendulum"), ("ddpg", "Pendulum"),
                                            ("d3qn", "CartPole")])
def test_paused_pipelined_agents_have_made_the_updates_of_sequential_ones(algorithm, env):
    # learning_starts 36 falls inside the 5th iteration (8 env steps each): the rule of which steps earn
    # updates is per step in both loops, so even that iteration earns the same.
    hparams = {**TINY, "learning_starts": 36, "utd_ratio": 1.5, "steps_per_iteration": 4}
    sequential, _, _, _ = _run(algorithm, hparams, 12, env)
    pipelined, history, _, _ = _run(algorithm, {**hparams, "pipeline": True}, 12, env)
    pipelined.loop.pause()  # what act() and state_dict() do first: the learner makes every update owed
    assert pipelined.updates == sequential.updates == int(1.5 * (12 * 8 - 36 + 2)) > 0
    assert pipelined.replay.size == sequential.replay.size == 12 * 8
    metrics = history[-1]
    assert 0 < metrics["learner_busy_fraction"] <= 1 and 0 < metrics["policy_lag_max"] <= 64
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())


def test_the_worker_runs_ahead_of_a_learner_that_makes_no_progress():
    hparams = {**TINY, "utd_ratio": 1.0, "steps_per_iteration": 5, "pipeline": True, "max_policy_lag": 64}
    agent, _, vec, obs = _run("sac", hparams, 8)  # 80 env steps: past learning_starts, the learner at work
    agent.loop.pause()
    pipe, before = agent.loop.pipe, agent.updates
    done = threading.Event()

    def iterate():
        agent.train_iteration(vec, obs)  # 5 steps x 2 envs earn 10 updates: within the lag bound, no refresh
        done.set()

    with pipe.params_lock:  # the learner cannot update while we hold this
        threading.Thread(target=iterate, daemon=True).start()
        assert done.wait(timeout=60), "the worker waited for the learner"
        assert agent.updates == before and pipe.scheduled == before + 10 and agent.replay.size == 90
    agent.loop.pause()
    assert agent.updates == before + 10


def test_the_acting_policy_lags_at_most_max_policy_lag_updates():
    # 2 updates earned per env step and a bound of 3: without the bound the snapshot would lag up to 16 updates.
    hparams = {**TINY, "utd_ratio": 1.0, "steps_per_iteration": 8, "pipeline": True, "max_policy_lag": 3}
    agent, history, _, _ = _run("sac", hparams, 20)
    assert 2 <= history[-1]["policy_lag_max"] <= 3  # one step's 2 updates are always owed when it acts next
    agent.loop.pause()
    pipe = agent.loop.pipe
    assert pipe.scheduled - pipe.snapshot_version <= 3 + 2  # the last step's updates came after its bound check

    def flat(module):
        return torch.cat([p.flatten() for p in module.parameters()])

    assert not torch.equal(flat(agent.actor), flat(pipe.snapshot))  # it acted with a stale copy
    pipe.refresh(agent)
    assert torch.equal(flat(agent.actor), flat(pipe.snapshot))


def test_a_learner_failure_is_raised_in_the_worker():
    hparams = {**TINY, "utd_ratio": 1.0, "pipeline": True}
    agent, _, vec, obs = _run("td3", hparams, 20)
    agent.loop.pause()
    agent.critic_optim.param_groups[0]["lr"] = None  # a broken optimizer: the learner thread's next step raises
    with pytest.raises(TypeError):
        for _ in range(200):
            obs, _, _ = agent.train_iteration(vec, obs)
            agent.act(obs)


def test_the_busy_fraction_counts_the_training_phase_not_the_pauses():
    now = [0.0]
    stats = LoopStats(clock=lambda: now[0])
    stats.open_span()
    stats.busy_seconds, now[0] = 3.0, 4.0
    assert stats.busy_fraction() == 3 / 4
    stats.close_span()  # handed back to the caller (an evaluation) from t = 4 to t = 10
    now[0] = 10.0
    stats.open_span()
    stats.open_span()  # a second train_iteration call in the same span changes nothing
    stats.busy_seconds, now[0] = 4.0, 12.0
    assert stats.busy_fraction() == 4 / 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_pipeline_makes_the_updates_of_the_cpu_one():
    hparams = {**TINY, "learning_starts": 36, "utd_ratio": 1.5, "steps_per_iteration": 4, "pipeline": True}
    torch.manual_seed(0)
    vec = make_vec_env("Pendulum", 2, device="cuda", seed=0)
    agent = make_agent("sac", vec.single_observation_space, vec.single_action_space, hparams, device="cuda")
    obs, _ = vec.reset(seed=0)
    for _ in range(12):
        obs, _, metrics = agent.train_iteration(vec, obs)
    action = agent.act(obs)  # pauses: every update owed is made, the default stream sees the result
    assert agent.updates == int(1.5 * (12 * 8 - 36 + 2)) and action.device.type == "cuda"
    assert torch.isfinite(action).all() and all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    state = agent.state_dict()
    assert torch.isfinite(state["replay"]["obs"]).all() and state["replay"]["obs"].shape[0] == 12 * 8


@pytest.mark.slow
def test_pipelined_sac_learns_pendulum():
    # Not reproducible (thread timing), so each run is like a new seed: after 3000 env steps the sequential
    # SAC's seeds 0-4 reach -157 to -342 here and one pipelined run only -624, so it gets 5000 steps;
    # a random policy scores about -1300.
    hparams = {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 1.0, "pipeline": True}
    trained = score(train_agent("sac", hparams, env_steps=5000))
    assert trained > -600, f"pipelined SAC reached only {trained:.0f} after 5000 env steps (random: about -1300)"


@pytest.mark.slow
def test_pipelined_dqn_learns_cartpole():
    # DQN rather than TD3: TD3 at this budget fails for some seeds (seed 3 scores about -1400), and a
    # pipelined run is like a fresh seed. Learning rate 1e-3, not 2e-3: 60 runs with two at once on 2 cores
    # scored 136-224 here, where 2e-3 ranged 101-294 and once reached only 96 in CI (random: 10-40).
    hparams = {"num_envs": 16, "exploration_steps": 5000, "utd_ratio": 0.25, "learning_rate": 1e-3, "batch_size": 64,
               "pipeline": True}
    trained = score(train_agent("dqn", hparams, env_steps=12_000, env="CartPole"), env="CartPole")
    assert trained > 100, f"pipelined DQN reached only {trained:.0f} after 12k env steps (random: 10-40)"


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
                       seed=1, env_step_budget=160, eval_episodes=3, device="cpu")
    result = run_segment(spec)
    assert result.segment_env_steps == 160 and result.metrics
    agent = load_agent(store, "a")
    assert agent.algorithm == algorithm
    if hparams.get("pipeline"):  # the checkpoint holds every update owed: the learner was drained before saving
        assert agent.updates == int(hparams.get("utd_ratio", 1.0 if algorithm == "td3" else 0.25) * (160 - 32 + 2))
