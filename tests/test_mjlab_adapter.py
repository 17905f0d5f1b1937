"""mjlab's tasks as our VecEnv (`mjlab:<task id>`): the contract on mjlab's Unitree Go1 velocity task, on the CPU.

mjlab 1.6 pins MuJoCo 3.11 and the project's venv has MuJoCo 4, so these tests run in a venv of their
own: `bash .ci/mjlab` builds it and runs this file. Elsewhere they skip, except the ones that need no
mjlab (the name is routed to the adapter; a missing mjlab is one line naming what to install).

One env (2 worlds of Go1 on flat ground, episodes cut to 5 steps) is built once and shared: building
takes ~10-15 s with MuJoCo Warp's kernels cached (~/.cache/warp), plus ~1-2 minutes to compile them the
first time on 2 cores; an env step of 2 worlds on the CPU takes ~0.1-0.3 s.
"""

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs import canonical_env_name, make_vec_env
from dask_podracer.envs.checker import check_vec_env
from dask_podracer.envs.registry import module_imported_by

GO1 = "mjlab:Mjlab-Velocity-Flat-Unitree-Go1"
WORLDS = 2
EPISODE_S = 0.1
"""Seconds per episode: 5 steps of 0.02 s, so the contract check ends every episode by truncation."""

HAS_MJLAB = importlib.util.find_spec("mjlab") is not None


@pytest.fixture(scope="module")
def go1():
    pytest.importorskip("mjlab")
    env = make_vec_env(GO1, WORLDS, device="cpu", seed=0, episode_length_s=EPISODE_S)
    yield env
    env.close()


@pytest.mark.slow
def test_the_go1_velocity_task_keeps_the_vec_env_contract(go1):
    assert go1.single_observation_space == gym.spaces.Box(-np.inf, np.inf, (48,), np.float32)  # the actor group
    assert go1.single_action_space == gym.spaces.Box(-1.0, 1.0, (12,), np.float32)  # 12 joint targets, clipped
    assert go1.max_episode_steps == 5
    report = check_vec_env(go1, seed=0)
    assert report.truncations == WORLDS and report.terminations == 0


@pytest.mark.slow
def test_a_fall_terminates_and_resets_within_the_contract(go1):
    # fell_over fires above this tilt; at 0 rad every world, dropped onto the ground, has fallen on its first step
    fell_over = go1.env.termination_manager.get_term_cfg("fell_over")
    limit = fell_over.params["limit_angle"]
    fell_over.params["limit_angle"] = 0.0
    try:
        report = check_vec_env(go1, seed=1)
    finally:
        fell_over.params["limit_angle"] = limit
    assert report.steps == 1 and report.terminations == WORLDS and report.truncations == 0


@pytest.mark.slow
def test_actions_beyond_the_action_box_are_clipped_to_it(go1):
    def first_steps(scale: float) -> list[torch.Tensor]:
        go1.reset(seed=3)
        signs = torch.tensor([1.0, -1.0]).repeat(WORLDS, 6)
        out = []
        for _ in range(2):
            obs, reward, *_ = go1.step(scale * signs)
            out += [obs, reward]
        return out

    assert all(torch.equal(a, b) for a, b in zip(first_steps(1.0), first_steps(100.0)))
    assert not all(torch.equal(a, b) for a, b in zip(first_steps(1.0), first_steps(0.5)))


def test_other_observation_groups_and_refusals(go1):
    from dask_podracer.envs.mjlab_adapter import MjlabVecEnv

    critic = MjlabVecEnv(go1.env, observation_group="critic")  # the privileged group: 48 + foot terms
    assert critic.single_observation_space.shape == (72,)
    with pytest.raises(ValueError, match="observation_group 'policy' is not one of the task's: actor, critic"):
        MjlabVecEnv(go1.env, observation_group="policy")
    with pytest.raises(ValueError, match="clip_actions must be > 0"):
        MjlabVecEnv(go1.env, clip_actions=0.0)
    go1.env.cfg.auto_reset = True
    try:
        with pytest.raises(ValueError, match="auto_reset = False"):
            MjlabVecEnv(go1.env)
    finally:
        go1.env.cfg.auto_reset = False


def test_unknown_tasks_and_overrides_are_refused_before_anything_is_built():
    pytest.importorskip("mjlab")
    with pytest.raises(ValueError, match="mjlab has no task 'Mjlab-Velocity-Flat-Unitree-Go2'; its tasks: .*Go1"):
        make_vec_env("mjlab:Mjlab-Velocity-Flat-Unitree-Go2", 1)
    with pytest.raises(ValueError, match=r"overrides\['rewards.no_such_term.weight'\]: 'no_such_term' is not"):
        make_vec_env(GO1, 1, overrides={"rewards.no_such_term.weight": 1.0})
    with pytest.raises(ValueError, match=r"overrides\['sim.njmaks'\]: 'njmaks' is not"):
        make_vec_env(GO1, 1, overrides={"sim.njmaks": 300})
    with pytest.raises(ValueError, match="episode_length_s must be > 0"):
        make_vec_env(GO1, 1, episode_length_s=0.0)


def test_overrides_set_fields_and_dict_entries_of_the_task_config():
    pytest.importorskip("mjlab")
    from mjlab.tasks.registry import load_env_cfg

    from dask_podracer.envs.mjlab_adapter import _set_path

    cfg = load_env_cfg(GO1.removeprefix("mjlab:"))
    _set_path(cfg, "sim.njmax", 200, "Go1")
    _set_path(cfg, "rewards.pose.weight", 0.5, "Go1")
    _set_path(cfg, "commands.twist.ranges.lin_vel_x", [-0.5, 0.5], "Go1")  # a TOML array
    assert cfg.sim.njmax == 200 and cfg.rewards["pose"].weight == 0.5
    assert cfg.commands["twist"].ranges.lin_vel_x == (-0.5, 0.5)


def test_mjlab_names_go_to_the_adapter_and_import_nothing_a_name_chooses():
    assert canonical_env_name(GO1) == GO1
    assert module_imported_by(GO1) is None
    assert module_imported_by("mjlab:Cartpole") is None  # no dash: still not "<module>:<name>"


@pytest.mark.skipif(HAS_MJLAB, reason="mjlab is installed here")
def test_without_mjlab_building_one_says_what_to_install_in_one_line():
    with pytest.raises(ImportError, match=r"needs mjlab: pip install 'mjlab==1.6.0' .*\.ci/mjlab") as caught:
        make_vec_env(GO1, 1)
    assert "\n" not in str(caught.value)
