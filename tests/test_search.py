"""Perturbing hyper-parameters by type (floats, ints, categoricals), and children that change their ensemble."""

import dataclasses
import random

import pytest
import torch
from helpers import train_agent

from dask_podracer.agents import algorithm_info, make_agent
from dask_podracer.envs import make_vec_env
from dask_podracer.search import Prior, perturb_hparams

TINY = {"hidden": (16, 16), "num_envs": 2, "learning_starts": 32, "batch_size": 16, "buffer_size": 1000,
        "utd_ratio": 1.0}


def _outcomes(hparams, name, seeds=range(200), **kwargs):
    return {perturb_hparams(hparams, [name], 1.25, random.Random(s), **kwargs)[name] for s in seeds}


def test_a_float_is_multiplied_or_divided_by_the_factor():
    assert _outcomes({"lr": 1.0}, "lr") == {1.25, 0.8}


def test_an_int_moves_by_the_factor_and_at_least_by_one():
    assert _outcomes({"n": 2}, "n") == {3, 1}  # 2 * 1.25 and 2 / 1.25 both round back to 2
    assert _outcomes({"n": 16}, "n") == {20, 13}
    assert all(isinstance(v, int) for v in _outcomes({"n": 16}, "n"))


def test_a_categorical_moves_to_another_of_its_options():
    modes = ("mean", "min", "redq", "weighted")
    assert _outcomes({"how": "min"}, "how", options={"how": modes}) == {"mean", "redq", "weighted"}
    prior = Prior("choice", ("min", "redq"))  # a prior's options win over the declared ones
    assert _outcomes({"how": "min"}, "how", priors={"how": prior}, options={"how": modes}) == {"redq"}
    assert _outcomes({"flag": True}, "flag") == {False}
    assert _outcomes({"how": "min"}, "how") == {"min"}  # no options known: it keeps its value


def test_resampling_and_validity_still_apply_to_ints():
    prior = Prior("int_uniform", (5, 5))
    assert _outcomes({"n": 2}, "n", priors={"n": prior}, resample_probability=1.0) == {5}

    def at_least_two(h):
        if h["n"] < 2:
            raise ValueError("n must be >= 2")

    assert _outcomes({"n": 2}, "n", valid=at_least_two) == {2, 3}  # 1 would be illegal: the parent's 2 stays


def test_floats_draw_from_the_rng_as_before():
    # The tournament's seeded runs stay as they were: one coin per float (and one more per resampled one).
    rng = random.Random(3)
    child = perturb_hparams({"a": 1.0, "b": 2.0}, ["a", "b"], 2.0, rng)
    coins = random.Random(3)
    assert child == {"a": 2.0 if coins.random() < 0.5 else 0.5, "b": 4.0 if coins.random() < 0.5 else 1.0}


@pytest.mark.parametrize("algorithm", ["td3", "sac"])
def test_children_with_perturbed_ensembles_load_their_parent_and_train(algorithm):
    info = algorithm_info(algorithm)
    parent = train_agent(algorithm, {**TINY, "num_critics": 2}, env_steps=64)
    state = parent.state_dict()
    base = dataclasses.asdict(info.config_cls(**TINY, num_critics=2))
    env = make_vec_env("Pendulum", 2, seed=0)
    sizes, combines = set(), set()
    for seed in range(6):
        hparams = perturb_hparams(base, info.tunable, 1.25, random.Random(seed), valid=lambda h: info.config_cls(**h),
                                  options=info.choices)
        sizes.add(hparams["num_critics"])
        combines.add(hparams["target_combine"])
        torch.manual_seed(seed)
        child = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
        child.load_state_dict(state)
        obs, _ = env.reset(seed=seed)
        for _ in range(2):
            obs, _, metrics = child.train_iteration(env, obs)
        assert child.critic.size == hparams["num_critics"] and child.updates > parent.updates
        assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert len(sizes) > 1 and len(combines) > 1  # the tournament really changed the ensemble
    if algorithm == "td3":
        assert min(sizes) >= 2  # TD3's twin critics: a child never drops to one


def test_a_log_uniform_over_an_integer_draws_rounded_integers_and_its_ends_are_checked_as_such():
    # `buffer_size = { log_uniform = [1e4, 1e6] }` (the usual scale for sizes) was refused: its ends were checked as
    # the floats 10000.0 and 1000000.0, though every draw of an integer hyper-parameter is rounded to one
    from dask_podracer.config import ConfigError, config_from_dict
    from dask_podracer.search import sample_hparams

    data = {"run": {"env": "Pendulum-v1", "algorithm": "sac"},
            "search": {"buffer_size": {"log_uniform": [1e4, 1e6]}, "batch_size": {"uniform": [63.6, 256]}}}
    group = config_from_dict(data).groups[0]
    draws = [sample_hparams(group.hparams, group.search, random.Random(seed)) for seed in range(50)]
    assert all(type(d["buffer_size"]) is int and 10_000 <= d["buffer_size"] <= 1_000_000 for d in draws)
    assert all(type(d["batch_size"]) is int and 64 <= d["batch_size"] <= 256 for d in draws)
    assert group.search["buffer_size"].edges(group.hparams["buffer_size"]) == (10_000, 1_000_000)
    assert group.search["buffer_size"].edges() == (10_000.0, 1_000_000.0)  # without the hyper-parameter's type
    # an end that rounds to an illegal integer is still refused, naming the integer a draw would be
    data["search"] = {"batch_size": {"log_uniform": [0.4, 256]}}
    with pytest.raises(ConfigError, match=r"search.batch_size: its prior can draw 0, and batch_size must be "):
        config_from_dict(data)
