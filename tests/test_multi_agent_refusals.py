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


# -- a hunt of 2026-11-29 (later): the team algorithms' hyper-parameters, MPE2's env_kwargs, the team export --------

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from dask_podracer.agents.base import make_agent  # noqa: E402
from dask_podracer.config import ConfigError  # noqa: E402


def _navigation() -> object:
    return make_vec_env("vmas:navigation", 2, seed=0, n_agents=2, max_episode_steps=5)


@pytest.mark.parametrize("algorithm, hparams, expected", [
    # exp(100) overflowed into NaN actions, a bare AssertionError from VMAS in every segment; 20 trained garbage
    ("mappo", {"log_std_init": 100.0}, r"hparams.log_std_init must be in \[-5.0, 2.0\], got 100.0"),
    ("ippo", {"log_std_init": -10.0}, r"hparams.log_std_init must be in \[-5.0, 2.0\], got -10.0"),
    # the replay never holds more than buffer_size: learning never started, every segment acted at random
    ("maddpg", {"buffer_size": 2000, "learning_starts": 5000},
     r"hparams.learning_starts must be in \[0, buffer_size=2000\], got 5000"),
])
def test_team_hyper_parameters_that_fail_or_never_learn_are_refused(algorithm, hparams, expected):
    env = _navigation()
    with pytest.raises(ConfigError, match=expected):
        make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)


@pytest.mark.parametrize("algorithm, hparams, expected", [
    # one more than this machine's RAM and the client was OOM-killed in its preflight, with no message; far
    # more, torch's allocator error named no hyper-parameter
    ("mappo", {"num_envs": 10**6, "rollout_steps": 10**6}, "mappo's rollout buffer of hparams.num_envs"),
    ("maddpg", {"buffer_size": 10**13, "learning_starts": 0}, "maddpg's replay buffer of hparams.buffer_size"),
])
def test_a_team_buffer_larger_than_the_machine_is_a_memory_error_naming_it(algorithm, hparams, expected):
    env = _navigation()
    with pytest.raises(MemoryError, match=expected) as e:
        make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    assert "GiB" in str(e.value) and "\n" not in str(e.value)


def test_nan_actions_are_named_not_a_bare_assertion():
    # a policy that diverged (mappo learning_rate = 1e30) failed every segment with "AssertionError: ", nothing else
    env = _navigation()
    env.reset(seed=0)
    actions = torch.zeros(2, *env.single_action_space.shape)
    actions[1, 1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"vmas:navigation: the actions of agent\(s\) \[1\] hold NaN"):
        env.step(actions)


@pytest.mark.parametrize("kwargs, expected", [
    ({"N": 0}, "mpe2:simple_spread_v3 refuses env_kwargs {'N': 0}: ValueError: zero-size array"),
    ({"local_ratio": 2}, "refuses env_kwargs {'local_ratio': 2}: AssertionError: local_ratio is a proportion"),
    ({"max_cycles": 10}, "may not set 'max_cycles': give max_episode_steps"),  # "got multiple values for ..."
    ({"continuous_actions": False}, "may not set 'continuous_actions'"),
    ({"render_mode": "human"}, "may not set 'render_mode'"),
    ({"max_episode_steps": 0}, "max_episode_steps must be an integer >= 1, got 0"),  # only the checker said so
    ({"max_episode_steps": 2.5}, "max_episode_steps must be an integer >= 1, got 2.5"),  # silently 2
])
def test_mpe2_env_kwargs_it_cannot_build_from_are_named(kwargs, expected):
    pytest.importorskip("mpe2")
    with pytest.raises(ValueError) as e:
        make_vec_env("mpe2:simple_spread_v3", 2, seed=0, **kwargs)
    assert expected in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_an_export_whose_evaluation_cannot_run_writes_nothing(tmp_path):
    # --episodes 100000000 on a team: policy.pt and agent_<i>.pt were written, then the evaluation was OOM-killed
    # (far more: a RuntimeError traceback), leaving policy files without a card, or beside another champion's card
    from dask_podracer.store import PodracerStore
    from dask_podracer.train.agent_checkpoints import save_agent
    from dask_podracer.train.spec import SegmentResult

    env_kwargs = {"n_agents": 2, "max_episode_steps": 5}
    hparams = {"num_envs": 2, "rollout_steps": 4, "num_minibatches": 1, "hidden": [8]}
    env = make_vec_env("vmas:navigation", 2, seed=0, **env_kwargs)
    torch.manual_seed(0)
    team = make_agent("mappo", env.single_observation_space, env.single_action_space, hparams)
    store = PodracerStore(str(tmp_path / "store.zarr"), create=True)
    result = SegmentResult(key="team-0", parent=None, algorithm="mappo", env="vmas:navigation", hparams=hparams,
                           score=0.0, segment_env_steps=1, lineage_env_steps=1, train_seconds=0.0, eval_seconds=0.0,
                           generation=0, device="cpu", metrics={}, env_kwargs=env_kwargs)
    save_agent(store, "team-0", team, result, seed=0)
    out = tmp_path / "champion"
    script = Path(__file__).resolve().parents[1] / "workflows" / "export_champion.py"
    done = subprocess.run([sys.executable, str(script), store.url, str(out), "--key", "team-0",
                           "--episodes", str(10**13)], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        "export_champion: error: --episodes 10,000,000,000,000 evaluates that many envs at once"), done.stderr
    assert not out.exists()


@pytest.mark.parametrize("name, says", [
    ("vmas:nope", "unknown env 'vmas:nope': 'nope' is not one of the registered vmas envs: navigation, balance"),
    ("mpe2:nope_v3", "unknown env 'mpe2:nope_v3': 'nope_v3' is not one of the registered mpe2 envs: simple_v3"),
])
def test_a_scenario_that_is_not_registered_is_named_with_the_known_ones(name, says):
    # read as an import path, it said "module 'vmas' has no attribute 'nope'"
    with pytest.raises(ValueError) as refused:
        make_vec_env(name, 2)
    assert str(refused.value).startswith(says)


@pytest.mark.parametrize("value", ["false", "False", "true", " no "])
def test_a_flag_given_as_a_string_is_refused(value):
    # before: VMAS tested the flag for truth, so shared_rew = "false" trained a team on a shared reward, silently
    with pytest.raises(ValueError, match=rf"^vmas:navigation: env_kwargs.shared_rew is the string '{value}', and the "
                                         "simulator takes any non-empty string as true: give a boolean"):
        make_vec_env("vmas:navigation", 2, seed=0, shared_rew=value)
    assert make_vec_env("vmas:navigation", 2, seed=0, shared_rew=False).n_agents >= 1


def test_an_mpe2_flag_given_as_a_string_is_refused():
    pytest.importorskip("mpe2")
    with pytest.raises(ValueError, match=r"^mpe2:simple_spread_v3: env_kwargs.dynamic_rescaling is the string 'false'"):
        make_vec_env("mpe2:simple_spread_v3", 2, seed=0, dynamic_rescaling="false")


def test_a_batch_of_worlds_beyond_the_machine_is_a_memory_error_naming_num_envs():
    # before: `podracer check-env vmas:navigation --num-envs 100000000` was OOM-killed with no message
    with pytest.raises(MemoryError, match=r"^vmas:navigation: num_envs = 1,000,000,000 worlds need about [\d,]+ GiB "
                                          r"\(\d+ bytes of state a world, and 16x that while stepping\), more than"):
        make_vec_env("vmas:navigation", 10**9, seed=0)


def test_the_state_of_a_batch_of_worlds_grows_with_the_batch():
    from dask_podracer.envs.multi_agent.vmas_adapter import batched_tensor_bytes

    small, large = (make_vec_env("vmas:balance", n, seed=0) for n in (16, 64))
    assert batched_tensor_bytes(small, 16) > 0
    assert batched_tensor_bytes(large, 64) == 4 * batched_tensor_bytes(small, 16)
