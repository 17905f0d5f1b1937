"""Bad env_kwargs for VMAS scenarios (a hunt of 2026-11-29): each is refused in one ValueError naming the
scenario and what is wrong, where before it was a bare AssertionError (a traceback from `podracer train`), a
RuntimeError blamed on the machine, or a key VMAS ignored with a warning while the run trained the default team.
And `vmas:wheel`, registered, failed every step: its rewards are `[B, 1]`."""

import pytest
import torch

pytest.importorskip("vmas")

from dask_podracer.envs import make_vec_env  # noqa: E402
from dask_podracer.envs.multi_agent import check_multi_agent_env  # noqa: E402


@pytest.mark.parametrize("scenario, kwargs, expected", [
    ("navigation", {"n_agents": 0}, "assert 1 <= self.agents_with_same_goal <= self.n_agents"),  # bare assert
    ("balance", {"n_agents": 1}, "AssertionError"),
    ("navigation", {"agent_radius": -1}, "Radius must be > 0, got -1"),
    ("transport", {"n_agents": 0}, "RuntimeError: stack expects a non-empty TensorList"),
])
def test_kwargs_a_scenario_refuses_are_one_value_error_naming_it(scenario, kwargs, expected):
    with pytest.raises(ValueError, match=f"vmas:{scenario} refuses env_kwargs") as e:
        make_vec_env(f"vmas:{scenario}", 2, seed=0, **kwargs)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_a_key_the_scenario_does_not_take_is_refused():
    # before: VMAS warned and the run trained navigation's default team, the key stored as if it had counted
    with pytest.raises(ValueError, match=r"vmas:navigation: Scenario kwargs: \{'colour': 3\} passed but not used"):
        make_vec_env("vmas:navigation", 2, seed=0, colour=3)


@pytest.mark.parametrize("kwargs, expected", [
    ({"max_steps": 10}, "may not set 'max_steps': give max_episode_steps"),  # "got multiple values for ..."
    ({"continuous_actions": False}, "may not set 'continuous_actions'"),
    ({"max_episode_steps": 2.5}, "max_episode_steps must be an integer >= 1, got 2.5"),  # silently 2
    ({"max_episode_steps": "x"}, "max_episode_steps must be an integer >= 1, got 'x'"),  # int()'s message
])
def test_keys_the_adapter_keeps_are_named(kwargs, expected):
    with pytest.raises(ValueError, match=expected):
        make_vec_env("vmas:navigation", 2, seed=0, **kwargs)


def test_wheel_steps_and_passes_the_checker():
    env = make_vec_env("vmas:wheel", 3, seed=0, max_episode_steps=5)
    check_multi_agent_env(env)
    env.reset(seed=0)
    _, reward, *_ = env.step(torch.zeros(3, *env.single_action_space.shape))
    assert reward.shape == (3, env.n_agents)
