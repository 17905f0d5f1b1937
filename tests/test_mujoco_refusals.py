"""Bad env_kwargs of our MuJoCo envs (`MujocoAnt-v5`, ..., and the Warp ones `WarpAnt-v0`, ...) are refused in one
line naming the keyword when the env is built, which the preflight does before any cluster starts; and the Warp
envs' `xml_file` names the file gymnasium's keyword of that name names.

Before, a wrong type or an out-of-range value was accepted and failed (or gave NaN rewards) at the first reset or
step, after the preflight, in every segment; `threads = 0` and `nconmax = 0` trained on silently.
"""

import math
import os
import shutil

import gymnasium as gym
import pytest

from dask_podracer.cli import EXIT_USAGE, main
from dask_podracer.envs import make_vec_env
from dask_podracer.population import orchestrator

pytest.importorskip("mujoco")

CPU_REFUSED = [  # (env, env_kwargs, the keyword the message must name)
    ("MujocoAnt-v5", {"threads": 0}, "threads"),  # was taken as unset: every core
    ("MujocoAnt-v5", {"threads": 1.5}, "threads"),
    ("MujocoAnt-v5", {"max_episode_steps": 0}, "max_episode_steps"),
    ("MujocoAnt-v5", {"frame_skip": 0}, "frame_skip"),  # NaN rewards (dt = 0)
    ("MujocoHalfCheetah-v5", {"frame_skip": 2.5}, "frame_skip"),
    ("MujocoAnt-v5", {"reset_noise_scale": -0.1}, "reset_noise_scale"),  # failed at reset
    ("MujocoAnt-v5", {"reset_noise_scale": math.nan}, "reset_noise_scale"),
    ("MujocoAnt-v5", {"ctrl_cost_weight": math.nan}, "ctrl_cost_weight"),  # NaN rewards
    ("MujocoAnt-v5", {"ctrl_cost_weight": "0.5"}, "ctrl_cost_weight"),  # failed at the first step
    ("MujocoAnt-v5", {"terminate_when_unhealthy": "false"}, "terminate_when_unhealthy"),
    ("MujocoAnt-v5", {"healthy_z_range": (1.0, 0.2)}, "healthy_z_range"),  # every step terminated
    ("MujocoAnt-v5", {"healthy_z_range": 0.5}, "healthy_z_range"),
    ("MujocoAnt-v5", {"contact_force_range": (1.0, -1.0)}, "contact_force_range"),
    ("MujocoHopper-v5", {"healthy_state_range": (100.0, -100.0)}, "healthy_state_range"),
    ("MujocoWalker2d-v5", {"healthy_angle_range": (1.0, -1.0)}, "healthy_angle_range"),
    ("MujocoHumanoid-v5", {"contact_cost_range": (10.0, 0.0)}, "contact_cost_range"),
]


def _refusal(name: str, kwargs: dict) -> str:
    with pytest.raises(ValueError) as refused:
        make_vec_env(name, 2, seed=0, **kwargs)
    message = str(refused.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("name, kwargs, key", CPU_REFUSED, ids=[f"{n}-{k}" for n, k, _ in CPU_REFUSED])
def test_bad_kwargs_of_the_cpu_mujoco_envs_are_refused_when_built_naming_the_key(name, kwargs, key):
    message = _refusal(name, kwargs)
    assert message.startswith(f"{name}: {key} must be"), message


def test_what_a_toml_config_gives_is_still_taken():
    """TOML arrays are lists, and a weight may be written as an integer."""
    env = make_vec_env("MujocoAnt-v5", 2, seed=0, threads=1, healthy_z_range=[0, 1], ctrl_cost_weight=1,
                       max_episode_steps=10)
    assert env.task.healthy_z_range == [0, 1] and env.threads == 1
    env.close()


def test_threads_zero_is_refused_by_podracer_train_before_any_cluster(tmp_path, capsys, monkeypatch):
    def tripwire(*args, **kwargs):
        raise AssertionError("a cluster was started before the bad input was refused")

    monkeypatch.setattr(orchestrator, "_client_for", tripwire)
    store = tmp_path / "s.zarr"
    assert main(["train", "workflows/configs/ant.toml", "--store", str(store), "--budget", "30s",
                 "--set", "run.env_kwargs.threads=0"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "MujocoAnt-v5: threads must be an integer >= 1" in err, err
    assert not store.exists()


# The Warp envs: the task checks need no Warp; building needs MuJoCo Warp (no kernel runs: refused before)

WARP_TASK_REFUSED = [
    ({"frame_skip": 2.5}, "frame_skip"),  # failed at the first step (range(2.5))
    ({"max_episode_steps": 2.5}, "max_episode_steps"),
    ({"terminate_when_unhealthy": "false"}, "terminate_when_unhealthy"),
    ({"reset_noise_scale": math.nan}, "reset_noise_scale"),
    ({"ctrl_cost_weight": "x"}, "ctrl_cost_weight"),
    ({"healthy_z_range": 0.5}, "healthy_z_range"),  # a TypeError "object of type 'float' has no len()"
]


@pytest.mark.parametrize("kwargs, key", WARP_TASK_REFUSED, ids=[k for _, k in WARP_TASK_REFUSED])
def test_bad_kwargs_of_the_warp_tasks_are_refused_naming_the_key(kwargs, key):
    from dask_podracer.envs.warp import Ant

    with pytest.raises(ValueError, match=f"^the Warp version of Ant-v5: {key} must be"):
        Ant.configured(**kwargs)


@pytest.mark.parametrize("key", ["nconmax", "njmax"])
def test_warp_contact_and_constraint_capacities_below_one_are_refused(key):
    """0 was taken: nconmax = 0 dropped every contact, silently (the Ant fell through the floor and bounced),
    njmax = 0 every constraint, with an overflow warning at each step."""
    pytest.importorskip("mujoco_warp")
    assert f"the Warp version of Ant-v5: {key} must be an integer >= 1" in _refusal("WarpAnt-v0", {key: 0})


def test_a_warp_xml_file_that_is_missing_or_not_mjcf_is_one_line_naming_it(tmp_path):
    pytest.importorskip("mujoco_warp")
    assert _refusal("WarpAnt-v0", {"xml_file": "nope.xml"}).startswith("xml_file 'nope.xml': no such file")
    (tmp_path / "bad.xml").write_text("not xml at all")
    message = _refusal("WarpAnt-v0", {"xml_file": str(tmp_path / "bad.xml")})
    assert message.startswith(f"xml_file '{tmp_path / 'bad.xml'}' is not a model MuJoCo can load: XML parse error")


def test_a_warp_xml_file_starting_with_a_dot_is_in_the_working_directory_as_in_gymnasium(tmp_path, monkeypatch):
    """gymnasium reads "./ant.xml" from the working directory; the Warp env read gymnasium's own ant.xml, silently
    another model than the one the config named. Here ./ant.xml is gymnasium's hopper (3 actuators, not 8)."""
    pytest.importorskip("mujoco_warp")
    import gymnasium.envs.mujoco as gym_mujoco

    shutil.copy(os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", "hopper.xml"), tmp_path / "ant.xml")
    monkeypatch.chdir(tmp_path)
    theirs = gym.make("Ant-v5", xml_file="./ant.xml")
    ours = make_vec_env("WarpAnt-v0", 2, seed=0, xml_file="./ant.xml")
    assert ours.single_action_space.shape == theirs.action_space.shape == (3,)
    assert ours.single_observation_space.shape == theirs.observation_space.shape
    theirs.close()
