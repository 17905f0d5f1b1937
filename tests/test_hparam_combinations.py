"""Hyper-parameters that each pass their own check and together failed or did something else than they say."""

import math

import pytest
import torch

from dask_podracer.agents import make_agent
from dask_podracer.config import ConfigError
from dask_podracer.envs import make_vec_env
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentSpec, run_segment
from dask_podracer.train.state import flatten_state, unflatten_state


def _spaces(env="CartPole"):
    env = make_vec_env(env, 1)
    return env.single_observation_space, env.single_action_space


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_a_rollout_of_one_transition_trains_with_finite_metrics(algorithm, tmp_path):
    """num_envs = 1 with rollout_steps = 1 (A2C as an online actor-critic): explained_variance took the sample
    variance of one return, NaN, and every segment failed as non-finite."""
    hparams = {"num_envs": 1, "rollout_steps": 1, "hidden": [8], "normalize_advantages": True}
    if algorithm == "ppo":
        hparams["num_minibatches"] = 1
    torch.manual_seed(0)
    env = make_vec_env("CartPole", 1, seed=0)
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, steps, metrics = agent.train_iteration(env, obs)
        assert steps == 1 and all(math.isfinite(v) for v in metrics.values()), metrics
    assert metrics["explained_variance"] == 0.0  # one return: nothing to explain
    store = PodracerStore(tmp_path / "store.zarr", create=True)
    result = run_segment(SegmentSpec(key="a", store_url=store.url, env="CartPole-v1", algorithm=algorithm,
                                     hparams=hparams, seed=1, env_step_budget=20, eval_episodes=2))
    assert result.segment_env_steps == 20 and store.checkpoint_keys() == ["a"]


def test_an_epsilon_schedule_that_would_rise_is_refused():
    """eps_end above eps_start passed both [0, 1] checks, and epsilon grew over exploration_steps: the agent explored
    more as it learned, while the docs say epsilon decays."""
    for algorithm in ("dqn", "double_dqn", "d3qn"):
        with pytest.raises(ConfigError, match=r"hparams.eps_end must be <= eps_start \(= 0.1\), got 0.5"):
            make_agent(algorithm, *_spaces(), {"eps_start": 0.1, "eps_end": 0.5})
    agent = make_agent("dqn", *_spaces(), {"eps_start": 0.3, "eps_end": 0.3})  # a constant epsilon is fine
    assert agent.epsilon() == 0.3


@pytest.mark.parametrize("learning_rate", [1e-7, 0.5])
def test_an_adaptive_rate_must_start_within_its_bounds(learning_rate):
    """lr_schedule = "adaptive" keeps the rate within lr_bounds only once it is there: a learning_rate of 1e-7 under
    the default [1e-6, 1e-2] was raised tenfold by the first step whose KL said to lower it, and one of 0.5 stayed
    above 1e-2 for steps while the KL said the policy moved too far. Refused, naming both; a fixed rate is free."""
    with pytest.raises(ConfigError, match=r"hparams.learning_rate must be within lr_bounds \[1e-06, 0.01\] with "
                                          r"lr_schedule = \"adaptive\", got " + str(learning_rate)):
        make_agent("ppo", *_spaces(), {"lr_schedule": "adaptive", "learning_rate": learning_rate})
    make_agent("ppo", *_spaces(), {"learning_rate": learning_rate})
    edge = make_agent("ppo", *_spaces(), {"lr_schedule": "adaptive", "learning_rate": 1e-2})
    assert edge.optimizer.param_groups[0]["lr"] == 1e-2


@pytest.mark.parametrize("algorithm", ["sac", "dqn"])
def test_a_fraction_of_an_update_carries_over_to_the_child_segment(algorithm):
    """utd_ratio * num_envs < 1 earns one update over several env steps. A checkpoint dropped the fraction earned,
    so a lineage of segments shorter than one update's worth (here 3 steps at 0.25 an env step) never updated, and
    any resume made fewer updates than one run straight through."""
    hparams = {"num_envs": 1, "utd_ratio": 0.25, "learning_starts": 0, "batch_size": 1, "buffer_size": 64,
               "hidden": [8]}
    env_name = "Pendulum" if algorithm == "sac" else "CartPole"
    env = make_vec_env(env_name, 1, seed=0)
    spaces = env.single_observation_space, env.single_action_space
    torch.manual_seed(0)
    parent = make_agent(algorithm, *spaces, hparams)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, _, _ = parent.train_iteration(env, obs)
    assert parent.updates == 0
    for generation in range(3):  # each child trains one more step, 4 steps of 0.25 since the last update
        arrays, skeleton = flatten_state(parent.state_dict())  # as a checkpoint stores it
        child = make_agent(algorithm, *spaces, hparams)
        child.load_state_dict(unflatten_state(skeleton, arrays))
        obs, _ = env.reset(seed=generation)
        for _ in range(1 if generation == 0 else 4):
            obs, _, _ = child.train_iteration(env, obs)
        assert child.updates == generation + 1
        parent = child


def test_prioritized_replay_gives_new_rows_the_largest_priority_seen_across_a_checkpoint():
    """New rows get the largest priority seen so far. A checkpoint kept the rows' priorities only, so a child whose
    parent's largest priority had since fallen (the row drawn again, or overwritten) gave its new rows less: a resume
    drew other batches than the run straight through."""
    hparams = {"num_envs": 2, "prioritized": True, "learning_starts": 8, "batch_size": 4, "buffer_size": 64,
               "hidden": [8]}
    env = make_vec_env("Pendulum", 2, seed=0)
    spaces = env.single_observation_space, env.single_action_space
    torch.manual_seed(0)
    parent = make_agent("ddpg", *spaces, hparams)
    obs, _ = env.reset(seed=0)
    for _ in range(8):
        obs, _, _ = parent.train_iteration(env, obs)
    parent.replay.update_priorities(torch.tensor([0]), torch.tensor([1e3]))  # the largest so far, then it falls
    parent.replay.update_priorities(torch.tensor([0]), torch.tensor([1e-3]))
    arrays, skeleton = flatten_state(parent.state_dict())
    child = make_agent("ddpg", *spaces, hparams)
    child.load_state_dict(unflatten_state(skeleton, arrays))
    assert float(child.replay.max_priority) == float(parent.replay.max_priority) == pytest.approx(1e3)
    row = parent.replay.position
    for agent in (parent, child):  # the next transition
        agent.replay.add(obs, torch.zeros(2, 1), torch.zeros(2), obs, torch.zeros(2))
        assert float(agent.replay.priority[row]) == pytest.approx(1e3)
    without_replay = {k: v for k, v in unflatten_state(skeleton, arrays).items() if k != "replay"}
    empty = make_agent("ddpg", *spaces, hparams)  # load_agent(replay=False): no rows, nothing of their priorities
    empty.load_state_dict(without_replay)
    assert float(empty.replay.max_priority) == 1.0


def _search_config(algorithm, search, hparams=None):
    from dask_podracer.config import config_from_dict
    return config_from_dict({"run": {"env": "CartPole-v1", "algorithm": algorithm}, "hparams": hparams or {},
                             "search": search})


def test_priors_that_can_draw_failing_values_together_are_refused_naming_them():
    """Each prior passed at its own edges, with the others at their defaults; together they drew eps_end above
    eps_start for 17 agents in 100, and each of those agents failed every segment it was given."""
    with pytest.raises(ConfigError, match=r"search: the priors of eps_end, eps_start can draw eps_end = 0\.5, "
                                          r"eps_start = 0\.05 together, and eps_end must be <= eps_start"):
        _search_config("dqn", {"eps_start": {"uniform": [0.05, 1.0]}, "eps_end": {"uniform": [0.01, 0.5]}})
    # three at a time: PPO's minibatches within num_envs * rollout_steps
    with pytest.raises(ConfigError, match=r"priors of num_envs, num_minibatches, rollout_steps can draw num_envs = 4, "
                                          r"num_minibatches = 64, rollout_steps = 8 together"):
        _search_config("ppo", {"num_envs": {"int_uniform": [4, 64]}, "rollout_steps": {"int_uniform": [8, 64]},
                               "num_minibatches": {"int_uniform": [1, 64]}})


def test_priors_narrowed_apart_are_taken_and_every_agent_they_draw_is_legal():
    import random

    from dask_podracer.agents import algorithm_info
    from dask_podracer.search import sample_hparams

    config = _search_config("dqn", {"eps_start": {"uniform": [0.5, 1.0]}, "eps_end": {"uniform": [0.01, 0.5]},
                                    "learning_rate": {"log_uniform": [1e-4, 1e-3]}})
    group = config.groups[0]
    for seed in range(200):
        algorithm_info("dqn").config_cls(**sample_hparams(group.hparams, group.search, random.Random(seed)))
