"""Sizes in a config that no machine holds are refused in one line before any cluster starts, not left to a worker
that builds them after it started (and fails every segment, or is OOM-killed) or to a segment that never ends.

The sizes are far beyond any machine, so that no machine running the suite allocates them."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from dask_podracer.cli import EXIT_USAGE, main
from dask_podracer.envs import make_vec_env
from dask_podracer.population import preflight

HUGE = 10**13


def _refused(tmp_path, capsys, toml: str) -> str:
    config = tmp_path / "big.toml"
    # bounded, should the check be missing: one segment, one worker, a minute
    bounded = toml.replace("[run]\n", '[run]\nmax_segments = 1\nbudget = "60s"\n', 1)
    config.write_text(bounded + '[cluster]\nworkers = 1\ndashboard_address = "127.0.0.1:0"\n')
    assert main(["train", str(config), "--store", str(tmp_path / "s.zarr")]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert not (tmp_path / "s.zarr").exists()
    prefix = f"podracer: error: {config}: "
    assert err.startswith(prefix), err
    return err[len(prefix):]


@pytest.mark.parametrize("algorithm", ["ppo", "sac", "impala"])
def test_eval_episodes_beyond_the_machine_are_refused(tmp_path, capsys, algorithm):
    # each of the eval_episodes is an env the worker built after training: `eval_episodes = 1000000000` held 8 GB
    # on a worker (under a 12 GB limit) before the segment failed, after the cluster started
    err = _refused(tmp_path, capsys, f'[run]\nenv = "Pendulum-v1"\nalgorithm = "{algorithm}"\n'
                                     f'[segment]\neval_episodes = {HUGE}\n')
    assert err.startswith("segment.eval_episodes = 10,000,000,000,000 envs of 'Pendulum-v1' need at least "
                          "288,710.0 GiB (31 bytes each), more than this machine's "), err


def test_impalas_num_envs_beyond_the_machine_are_refused(tmp_path, capsys):
    # IMPALA preallocates no buffer: its envs and rollouts were built on the worker, after the cluster started
    err = _refused(tmp_path, capsys, f'[run]\nenv = "Pendulum-v1"\nalgorithm = "impala"\n[hparams]\n'
                                     f'num_envs = {HUGE}\n')
    assert err.startswith(f"cannot build the env and agents this config asks for on this machine: MemoryError: "
                          f"a rollout of hparams.rollout_steps x num_envs = 20 x {HUGE:,} steps of"), err


def test_impalas_rollout_beyond_the_machine_is_refused(tmp_path, capsys):
    # a rollout is built step by step: `rollout_steps = 1000000000` grew a worker's memory for the whole budget
    # (873 MB after 50 s) and no segment ended
    err = _refused(tmp_path, capsys, f'[run]\nenv = "Pendulum-v1"\nalgorithm = "impala"\n[hparams]\n'
                                     f'rollout_steps = {HUGE}\n')
    assert err.startswith(f"cannot build the env and agents this config asks for on this machine: MemoryError: "
                          f"a rollout of hparams.rollout_steps x num_envs = {HUGE:,} x 8 steps of 9 float32 values "
                          f"needs at least"), err


@pytest.mark.parametrize("algorithm", ["sac", "td3", "ddpg"])
def test_a_critic_ensemble_beyond_the_machine_is_refused(tmp_path, capsys, algorithm):
    # the config's check built the agent on the client: a billion critics were a 2 TB allocation there
    err = _refused(tmp_path, capsys, f'[run]\nenv = "Pendulum-v1"\nalgorithm = "{algorithm}"\n[hparams]\n'
                                     f'num_critics = {HUGE}\nhidden = [64, 64]\n')
    assert err.startswith("hparams.num_critics = 10,000,000,000,000 critics of hidden = [64, 64] make at least "), err


@pytest.mark.parametrize("env", ["mpe2:simple_spread_v3", "vmas:balance"])
def test_a_teams_eval_episodes_beyond_the_machine_are_refused(tmp_path, capsys, env):
    if importlib.util.find_spec(env.split(":")[0]) is None:
        pytest.skip(f"{env.split(':')[0]} is not installed")
    err = _refused(tmp_path, capsys, f'[run]\nenv = "{env}"\nalgorithm = "mappo"\n'
                                     f'[segment]\neval_episodes = {HUGE}\n')
    assert err.startswith(f"segment.eval_episodes = 10,000,000,000,000 envs of '{env}' need at least"), err


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs the mujoco extra")
@pytest.mark.parametrize("env, kwargs, each, built", [
    ("MujocoAnt-v5", {"threads": 1}, "410,067", "the MjData of 10,000,000,000,000 envs \\(409,600 bytes each\\)"),
    # gymnasium's env objects too
    ("gym:Ant-v5", {}, "412,067", "10,000,000,000,000 envs and their MjData \\(411,600 bytes each\\)"),
])
def test_mujoco_envs_count_their_mjdata(tmp_path, capsys, monkeypatch, env, kwargs, each, built):
    # an MjData is 450-480 KB resident (gym:Ant-v5's envs 1.28 MB): 100,000 of them are 48 GB, built by a worker
    # after the cluster started
    env_kwargs = "".join(f"env_kwargs = {{ {key} = {value} }}\n" for key, value in kwargs.items())
    err = _refused(tmp_path, capsys, f'[run]\nenv = "{env}"\n{env_kwargs}algorithm = "sac"\n'
                                     f'[segment]\neval_episodes = 100000000\n')
    assert err.startswith(f"segment.eval_episodes = 100,000,000 envs of '{env}' need at least "), err
    assert f"GiB ({each} bytes each)" in err  # the MjData's floor, not only an observation's and action's bytes
    # num_envs too, where the agent's buffer fits: 100,000 transitions of Ant are 88 MB, its envs 38 GiB (more than
    # the 16 GiB this machine is said to have)
    monkeypatch.setattr(preflight.psutil, "virtual_memory", lambda: SimpleNamespace(total=16 * 2**30))
    err = _refused(tmp_path, capsys, f'[run]\nenv = "{env}"\n{env_kwargs}algorithm = "sac"\n'
                                     f'[hparams]\nnum_envs = 100000\nbuffer_size = 100000\n')
    assert err.startswith(f"hparams.num_envs = 100,000 envs of '{env}' need at least 38.") and err.endswith(
        f" GiB ({each} bytes each), more than this machine's 16.0 GiB"), err
    with pytest.raises(MemoryError, match=rf"^{env}: {built} needs at least [\d,.]+ GiB, more than the "):
        make_vec_env(env, HUGE, device="cpu", **kwargs)


def test_a_prioritised_buffer_counts_its_priorities_and_sum_tree(monkeypatch):
    # the rows alone fitted (`buffer_size = 400000000` on CartPole: 17.6 GB of 23.5 GiB) and the sum tree's 6.4 GB
    # came on top of them, on the client; here a machine of 1 GB, where 2**24 rows (738 MB) fit and the whole does not
    import torch

    from dask_podracer.agents.prioritized_replay import PrioritizedReplayBuffer
    from dask_podracer.envs import devices

    monkeypatch.setattr(devices, "device_memory", lambda device: 10**9)
    with pytest.raises(MemoryError, match=r"^a prioritised replay buffer of hparams.buffer_size = 16,777,216 "
                                          r"transitions of 11 float32 values, their priorities and sum tree needs "
                                          r"at least 1\.0 GiB, more than the 0\.9 GiB of cpu$"):
        PrioritizedReplayBuffer(2**24, obs_dim=4, act_dim=1, device=torch.device("cpu"))


@pytest.mark.parametrize("kwargs", [f"assets = {HUGE}", f"days = {HUGE}"])
def test_a_generated_market_beyond_the_machine_is_refused(tmp_path, capsys, kwargs):
    # `assets = 1000000` asked numpy for 149 GiB; `days = 2e10` ran a Python loop over every day first
    err = _refused(tmp_path, capsys, f'[run]\nenv = "StockTrading-v0"\nalgorithm = "ppo"\n[run.env_kwargs]\n{kwargs}\n')
    assert err.startswith("cannot build the env and agents this config asks for on this machine: MemoryError: a "
                          "generated market of assets = "), err
    assert "(OHLCV in float64) needs at least " in err


@pytest.mark.parametrize("algorithm, field, value, allowed", [
    ("sac", "utd_ratio", "1e300", "in (0, 1000] (gradient updates per transition), got 1e+300"),
    ("dqn", "utd_ratio", "1001.0", "in (0, 1000] (gradient updates per transition), got 1001.0"),
    ("maddpg", "utd_ratio", "1e300", "in (0, 1000] (gradient updates per team transition), got 1e+300"),
    ("ppo", "epochs", str(HUGE), f"in [1, 1000], got {HUGE}"),
    ("mappo", "epochs", str(HUGE), f"in [1, 1000], got {HUGE}"),
])
def test_work_per_transition_no_segment_finishes_is_refused(tmp_path, capsys, algorithm, field, value, allowed):
    # `utd_ratio = 1e300` passed every check and each segment trained forever: a run with a wall-clock budget ended
    # with 0 segments recorded and nothing said why; `epochs = 10**12` likewise on the first rollout
    env = "CartPole-v1" if algorithm == "dqn" else "Pendulum-v1"
    err = _refused(tmp_path, capsys, f'[run]\nenv = "{env}"\nalgorithm = "{algorithm}"\n[hparams]\n{field} = {value}\n')
    assert err == f"hparams.{field} must be {allowed}", err


def test_a_prior_that_can_draw_endless_work_is_refused(tmp_path, capsys):
    err = _refused(tmp_path, capsys, '[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\n'
                                     '[search]\nutd_ratio = { log_uniform = [0.5, 2000.0] }\n')
    assert err == ("search.utd_ratio: its prior can draw 2000.0, and utd_ratio must be in (0, 1000] (gradient updates "
                   "per transition), got 2000.0"), err


@pytest.mark.parametrize("algorithm, prior, said", [
    ("sac", f"buffer_size = {{ int_uniform = [10000, {HUGE}] }}",
     f"search.buffer_size: its prior can draw {HUGE}, and a replay buffer of hparams.buffer_size = 10,000,000,000,000 "
     f"transitions of 9 float32 values needs at least 335,276.1 GiB, more than the "),
    ("ppo", f"num_envs = {{ int_uniform = [1, {HUGE}] }}",
     f"search.num_envs: its prior can draw {HUGE}, and a rollout of hparams.rollout_steps x num_envs = 64 x "
     f"10,000,000,000,000 steps of 13 values needs at least "),
    ("sac", "hidden = { choice = [[64, 64], [10000000, 10000000]] }",
     "search.hidden: its prior can draw [10000000, 10000000], and hparams.hidden = [10000000, 10000000] makes one "
     "network of 100,000,040,000,000 weights: with its optimiser's moments at least "),
])
def test_a_prior_that_can_draw_sizes_beyond_the_machine_is_refused(tmp_path, capsys, algorithm, prior, said):
    # each agent that drew such a value built it on a worker after the cluster started, and failed its segment
    err = _refused(tmp_path, capsys, f'[run]\nenv = "Pendulum-v1"\nalgorithm = "{algorithm}"\n[search]\n{prior}\n')
    assert err.startswith(said), err


def test_plain_gymnasium_envs_count_their_objects(tmp_path, capsys):
    # each gymnasium env is 2.3-3 KB of Python objects (CartPole, Pendulum, Acrobot), and 0.5-1 ms to build: counted
    # as its observation and step alone (35 bytes), `eval_episodes = 100000000` passed and a worker built envs for hours
    err = _refused(tmp_path, capsys, '[run]\nenv = "gym:CartPole-v1"\nalgorithm = "ppo"\n'
                                     '[segment]\neval_episodes = 100000000\n')
    assert err.startswith("segment.eval_episodes = 100,000,000 envs of 'gym:CartPole-v1' need at least 189.9 GiB "
                          "(2,039 bytes each), more than this machine's "), err
    with pytest.raises(MemoryError, match=r"^gym:CartPole-v1: 10,000,000,000,000 envs \(2,000 bytes each\) needs at "):
        make_vec_env("gym:CartPole-v1", HUGE, device="cpu")


def test_more_actors_than_the_embedded_cluster_will_have_is_refused_before_it_starts(tmp_path):
    # `actors.workers = 1000000` was refused only once a cluster of this machine's cores had started for it: the
    # checks made before any cluster (`check_without_cluster`) refuse it now
    from dask_podracer.config import ConfigError, config_from_dict
    config = config_from_dict({"run": {"env": "CartPole-v1", "algorithm": "impala", "store": str(tmp_path / "s.zarr")},
                               "cluster": {"workers": 3}, "actors": {"workers": 1000000}})
    with pytest.raises(ConfigError, match=r"actors.workers = 1000000 needs 1000001 slots per segment \(a learner and "
                                          r"1000000 actors\) but the cluster offers 3 \(CPU\); lower actors.workers"):
        preflight.check_without_cluster(config, embedded=True)
    config = config_from_dict({"run": {"env": "CartPole-v1", "algorithm": "impala", "store": str(tmp_path / "s.zarr")},
                               "cluster": {"workers": 3}, "actors": {"workers": 2}})
    preflight.check_without_cluster(config, embedded=True)  # a learner and 2 actors fit 3 workers


def test_a_buffer_beyond_the_memory_available_now_is_refused(monkeypatch):
    # within the machine's RAM but beyond what its other processes left: torch zero-fills it, and the OOM killer took
    # the process (the client's, in the preflight) with no message
    import torch

    from dask_podracer.agents.replay import ReplayBuffer
    from dask_podracer.envs import devices

    machine = devices.psutil.virtual_memory()
    monkeypatch.setattr(devices.psutil, "virtual_memory", lambda: SimpleNamespace(total=machine.total, available=10**8))
    with pytest.raises(MemoryError, match=r"^a replay buffer of hparams.buffer_size = 10,000,000 transitions of 9 "
                                          r"float32 values needs at least 0\.3 GiB, more than the 0\.1 GiB of cpu "
                                          r"available now \(of [\d,.]+ GiB in all\)$"):
        ReplayBuffer(10_000_000, obs_dim=3, act_dim=1, device=torch.device("cpu"))
