"""Bad input through the Python API (a config built or changed in Python, run_tournament's arguments, make_vec_env,
PodracerStore): a one-line error naming what is wrong, before any cluster starts or anything is stored.

Each case was accepted before (and failed after the cluster had started, or in every segment), or failed with an
error that named nothing the caller wrote (docs/developing.md, "The Python API's bad input")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dask_podracer.agents import algorithm_info
from dask_podracer.config import ConfigError, GroupConfig, config_from_dict, load_config
from dask_podracer.envs import make_vec_env
from dask_podracer.population import run_tournament
from dask_podracer.population.cluster import ClusterError
from dask_podracer.store import PodracerStore, StoreError

PENDULUM = "workflows/configs/pendulum.toml"


@pytest.fixture(scope="module")
def config():
    return load_config(PENDULUM)


def _section(config, name, **fields):
    return dataclasses.replace(config, **{name: dataclasses.replace(getattr(config, name), **fields)})


def _group(config, **fields):
    return dataclasses.replace(config, groups=(dataclasses.replace(config.groups[0], **fields),))


@pytest.mark.parametrize("section, fields, says", [
    ("cluster", {"workers": 1.5}, "cluster.workers must be an integer, got float 1.5"),
    ("tournament", {"pool_size": 1.5}, "tournament.pool_size must be an integer"),
    ("tournament", {"leaderboard_size": 2.5}, "tournament.leaderboard_size must be an integer"),
    ("tournament", {"retries": 0.5}, "tournament.retries must be an integer"),
    ("tournament", {"perturb": "actor_lr"}, "tournament.perturb must be a list, got str 'actor_lr'"),
    ("store", {"keep_per_agent": 1.5}, "store.keep_per_agent must be an integer"),
    ("store", {"retention": "no"}, "store.retention must be true or false, got str 'no'"),
    ("segment", {"eval_episodes": 1.5}, "segment.eval_episodes must be an integer"),
    ("segment", {"torch_threads": 1.5}, "segment.torch_threads must be an integer"),
    ("segment", {"env_steps": True}, "segment.env_steps must be an integer, got bool True"),
    ("segment", {"env_steps": "x"}, "segment.env_steps must be an integer, got str 'x'"),
    ("segment", {"device": 5}, "segment.device must be a string, got int 5"),
    ("cluster", {"mps": "yes"}, "cluster.mps must be true or false"),
    ("run", {"store": 5}, "run.store must be a string, got int 5"),
    ("run", {"env": None}, "run.env must be a string, got NoneType None"),
    ("run", {"target_return": "high"}, "run.target_return must be a number, got str 'high'"),
    ("logging", {"tensorboard": 5}, "logging.tensorboard must be a string"),
])
def test_a_section_changed_in_python_is_held_to_a_files_types(config, section, fields, says):
    with pytest.raises(ConfigError) as refused:
        _section(config, section, **fields)
    assert says in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("change, says", [
    (lambda c: dataclasses.replace(c, segment={"env_steps": 100}), "segment must be a SegmentConfig, got dict"),
    (lambda c: dataclasses.replace(c, segment=c.cluster), "segment must be a SegmentConfig, got ClusterConfig"),
    (lambda c: dataclasses.replace(c, run=None), "run must be a RunConfig, got NoneType"),
    (lambda c: dataclasses.replace(c, groups=()), "groups must be a non-empty tuple of GroupConfig"),
    (lambda c: _group(c, weight=0), "groups['sac'].weight must be > 0"),
    (lambda c: _group(c, env_steps=-5), "groups['sac'].env_steps must be >= 0"),
    (lambda c: _group(c, name="a/b"), "groups['a/b'].name must be ASCII letters"),
    (lambda c: _group(c, hparams={**c.hparams, "actor_lr": "x"}), "groups['sac'].hparams.actor_lr must be a number"),
    (lambda c: _group(c, hparams={**c.hparams, "gamma": float("nan")}), "groups['sac'].hparams.gamma must be"),
    (lambda c: _group(c, hparams={**c.hparams, "bogus": 1}), "unknown key groups['sac'].hparams.bogus"),
    (lambda c: dataclasses.replace(c, run=dataclasses.replace(c.run, algorithm=None), groups=(c.groups[0],) * 2),
     "groups must be named differently"),
    (lambda c: _section(c, "tournament", perturb=("bogus",)),
     "tournament.perturb: 'bogus' is not a tunable hyper-parameter of sac"),
    (lambda c: c.replace(algorithm="ppo"), "run.algorithm is 'ppo' and the config's groups train 'sac'"),
    (lambda c: c.replace(bogus=1), "unknown key run.bogus"),
    (lambda c: c.replace(max_segments="x"), "run.max_segments must be an integer"),
    (lambda c: c.with_logging(bogus="x"), "unknown key logging.bogus"),
    (lambda c: GroupConfig(name="g", algorithm="bogus", hparams={}), "groups['g'].algorithm must be one of"),
])
def test_a_config_changed_in_python_is_checked_as_a_whole(config, change, says):
    with pytest.raises(ConfigError) as refused:
        change(config)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_group_built_in_python_gets_every_hyper_parameter_as_a_files_does():
    from dask_podracer.agents import algorithm_info

    group = GroupConfig(name="g", algorithm="sac", hparams={"actor_lr": 1e-3})
    assert group.hparams == dataclasses.asdict(algorithm_info("sac").config_cls(actor_lr=1e-3))


@pytest.mark.parametrize("call, says", [
    (lambda: config_from_dict(None), "a config is a table of sections (run, tournament, ...), got NoneType None"),
    (lambda: config_from_dict(["run"]), "a config is a table of sections (run, tournament, ...), got list"),
    (lambda: load_config(PENDULUM, settings="run.seed=1"), "settings must be a list of 'SECTION.KEY=VALUE' strings"),
    (lambda: load_config(PENDULUM, settings=[5]), "settings must be a list of 'SECTION.KEY=VALUE' strings"),
    (lambda: load_config(None), "a config is read from a path, got NoneType None"),
])
def test_configs_are_read_from_tables_and_paths_only(call, says):
    with pytest.raises(ConfigError) as refused:
        call()
    assert says in str(refused.value)


@pytest.mark.parametrize("arguments, error, says", [
    ({"config": {}}, TypeError, "run_tournament needs a Config (from load_config or config_from_dict), got dict"),
    ({"client": "tcp://127.0.0.1:8786"}, TypeError, "client must be a dask.distributed.Client, got str"),
    ({"on_progress": "x"}, TypeError, "on_progress must be callable, got str"),
    ({"on_start": 5}, TypeError, "on_start must be callable, got int"),
    ({"segment_fn": None}, TypeError, "segment_fn must be callable, got NoneType"),
    ({"poll_seconds": "1"}, ValueError, "poll_seconds must be a positive number, got '1'"),
    ({"scheduler": 8786}, TypeError, "scheduler must be an address such as 'tcp://host:8786', got int"),
    ({"tls": ("ca.pem", "cert.pem", "key.pem")}, TypeError, "tls must be a TLSFiles, got tuple"),
])
def test_run_tournament_names_an_argument_that_cannot_work_before_anything_runs(config, tmp_path, arguments, error,
                                                                               says):
    store = tmp_path / "s.zarr"
    arguments = {"config": config.replace(store=str(store)), **arguments}
    with pytest.raises(error) as refused:
        run_tournament(**arguments)
    assert says in str(refused.value)
    assert not store.exists()


def test_run_tournament_takes_one_cluster_and_a_running_client(config, cpu_cluster, tmp_path):
    from distributed import Client

    store = tmp_path / "s.zarr"
    with Client(cpu_cluster) as client:
        with pytest.raises(ValueError, match="give client= or scheduler=, not both"):
            run_tournament(config.replace(store=str(store)), client, scheduler="tcp://127.0.0.1:1")
    with pytest.raises(ClusterError, match="the client given is closed, not running"):
        run_tournament(config.replace(store=str(store)), client)
    assert not store.exists()


@pytest.mark.parametrize("arguments, error, says", [
    ({"name": "gym:Pendulum-v1", "num_envs": 0}, ValueError, "num_envs must be an integer >= 1, got 0"),
    ({"name": None, "num_envs": 2}, TypeError, "an env's name is a string such as 'Pendulum-v1', got NoneType"),
    ({"name": "Pendulum-v1", "num_envs": "4"}, ValueError, "num_envs must be an integer >= 1, got '4'"),
    ({"name": "Pendulum-v1", "num_envs": True}, ValueError, "num_envs must be an integer >= 1, got True"),
    ({"name": "Pendulum-v1", "num_envs": 2, "seed": 1.5}, ValueError, "seed must be None or an integer"),
    ({"name": "gym:Pendulum-v1", "num_envs": 2, "seed": -1}, ValueError, "seed must be None or an integer"),
    ({"name": "Pendulum-v1", "num_envs": 2, "seed": 2**64}, ValueError, "seed must be None or an integer"),
    ({"name": "Pendulum-v1", "num_envs": 2, "device": "nonsense"}, ValueError, "device 'nonsense' cannot be used"),
    # a callable that is not an env factory failed with its own TypeError ("getcwd() takes no keyword arguments")
    ({"name": "os:getcwd", "num_envs": 2}, TypeError,
     "env 'os:getcwd': getcwd cannot be called as a VecEnv class or factory with num_envs, device, seed"),
])
def test_make_vec_env_names_an_argument_that_cannot_work(arguments, error, says):
    with pytest.raises(error) as refused:
        make_vec_env(**arguments)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_make_vec_env_names_a_device_this_machine_lacks_in_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError) as refused:
        make_vec_env("Pendulum-v1", 2, device="cuda")
    assert str(refused.value).startswith("device 'cuda' cannot be used here: ") and "\n" not in str(refused.value)


def test_make_vec_env_takes_numpy_integers():
    env = make_vec_env("Pendulum-v1", np.int64(3), seed=np.int64(7))
    assert env.num_envs == 3 and isinstance(env.num_envs, int)


@pytest.mark.parametrize("url, create, error, says", [
    (None, False, TypeError, "a store is named by a path or a URL, got NoneType"),
    (5, False, TypeError, "a store is named by a path or a URL, got int"),
    ("s.zarr", "no", TypeError, "create must be True or False, got 'no'"),
    ("file/s.zarr", True, StoreError, "is a file, not a directory"),
])
def test_a_store_is_named_by_a_path_or_url(tmp_path, monkeypatch, url, create, error, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(error) as refused:
        PodracerStore(url, create=create)
    assert says in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_generator_of_entries_is_refused_and_the_board_kept(tmp_path):
    # checking a generator's items used them up: the board written after the check was empty
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    board = [{"key": "s000000-aaaaaaaa", "score": -150.0}]
    store.write_leaderboard(board)
    with pytest.raises(TypeError, match="must be a list of mappings, got generator"):
        store.write_leaderboard(entry for entry in board)
    with pytest.raises(TypeError, match="a history record of store .* must be a mapping, got str"):
        store.append_history("abc")
    assert store.read_leaderboard() == board and store.read_history() == []


def test_saving_with_a_replay_base_that_is_not_stored_is_refused(tmp_path):
    # the rows it stood for were stored nowhere: the checkpoint loaded with an empty replay buffer
    from gymnasium.spaces import Box

    from dask_podracer.agents import make_agent
    from dask_podracer.train import SegmentResult, save_agent

    store = PodracerStore(tmp_path / "s.zarr", create=True)
    agent = make_agent("sac", Box(-1, 1, (3,)), Box(-2, 2, (1,)), {"hidden": [8], "num_envs": 2})
    result = SegmentResult(key="s000001-aaaaaaaa", parent=None, algorithm="sac", env="Pendulum-v1",
                           hparams={"hidden": [8], "num_envs": 2}, score=0.0, segment_env_steps=0, lineage_env_steps=0,
                           train_seconds=0.0, eval_seconds=0.0, generation=0, device="cpu", metrics={})
    with pytest.raises(ValueError, match="replay_base 's000000-bbbbbbbb' is not a checkpoint of store"):
        save_agent(store, result.key, agent, result, 0, replay_base="s000000-bbbbbbbb", own_rows=5)
    with pytest.raises(ValueError, match="own_rows must be an integer >= 0, got -5"):
        save_agent(store, result.key, agent, result, 0, own_rows=-5)
    assert store.checkpoint_keys() == []


@pytest.mark.parametrize("fields, says", [
    ({"seconds": float("nan"), "env_step_budget": 0}, "seconds must be a finite number >= 0, got nan"),  # never ended
    ({"env_step_budget": -100, "seconds": 3.0}, "env_step_budget must be an integer >= 0, got -100"),
    ({"eval_episodes": 0}, "eval_episodes must be an integer >= 1, got 0"),  # failed after the whole budget
    ({"hparams": None}, "hparams must be a dict, got NoneType"),
])
def test_a_segment_spec_that_cannot_run_is_refused_when_made(fields, says):
    from dask_podracer.train import SegmentSpec

    with pytest.raises(ValueError) as refused:
        SegmentSpec(**{"key": "s000000-aaaaaaaa", "store_url": "s.zarr", "env": "Pendulum-v1", "algorithm": "sac",
                       "hparams": {}, **fields})
    assert says in str(refused.value)


def test_an_action_space_without_finite_bounds_is_refused_by_every_algorithm_that_scales_into_it():
    # scaled into [-inf, inf], SAC's actions were NaN: every segment diverged after its first iteration
    from gymnasium.spaces import Box

    from dask_podracer.agents import make_agent

    unbounded = Box(np.array([-1.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32))
    for algorithm in ("sac", "td3", "ddpg", "ppo"):
        with pytest.raises(ValueError, match="the action space's bounds must be finite .* 2 of its 4 are not"):
            make_agent(algorithm, Box(-1, 1, (3,)), unbounded, {"hidden": [8]})


def test_check_vec_env_refuses_a_step_limit_that_checks_nothing():
    from dask_podracer.envs import check_vec_env

    env = make_vec_env("Pendulum-v1", 2, seed=0)
    for steps in (0, -1, 2.5):
        with pytest.raises(ValueError, match=f"max_steps must be None or an integer >= 1 .*got {steps}"):
            check_vec_env(env, max_steps=steps)
    assert check_vec_env(env, max_steps=3)  # a small limit still checks


def _saved_sac(tmp_path):
    from dask_podracer.agents import make_agent
    from dask_podracer.train import SegmentResult, save_agent

    store = PodracerStore(tmp_path / "s.zarr", create=True)
    env = make_vec_env("Pendulum-v1", 1)
    hparams = {"hidden": [16, 16], "num_envs": 2}
    agent = make_agent("sac", env.single_observation_space, env.single_action_space, hparams)
    result = SegmentResult(key="s000000-aaaaaaaa", parent=None, algorithm="sac", env="Pendulum-v1", hparams=hparams,
                           score=0.0, segment_env_steps=0, lineage_env_steps=0, train_seconds=0.0, eval_seconds=0.0,
                           generation=0, device="cpu", metrics={})
    save_agent(store, result.key, agent, result, 0)
    return store, result.key


@pytest.mark.parametrize("algorithm, hparams, says", [
    # a PPO checkpoint of a SAC agent's tensors was stored, and failed only when it was loaded
    ("ppo", {"hidden": [8], "num_envs": 2}, "result.algorithm is 'ppo' but the agent is a 'sac' agent: its "
                                            "checkpoint would not load"),
    ("sac", {"hidden": [16], "num_envs": 2}, "result.hparams do not describe the agent: hidden is (16,) there and "
                                             "(8,) in the agent: its checkpoint would load as another agent"),
    ("sac", {}, "result.hparams do not describe the agent: num_envs is 4 there and 2 in the agent (1 more differ)"),
    ("sac", {"hiden": [8]}, "result.hparams do not describe the agent: unknown key result.hparams.hiden"),
])
def test_saving_an_agent_with_a_result_of_another_is_refused(tmp_path, algorithm, hparams, says):
    from gymnasium.spaces import Box

    from dask_podracer.agents import make_agent
    from dask_podracer.train import SegmentResult, load_agent, save_agent

    store = PodracerStore(tmp_path / "s.zarr", create=True)
    agent = make_agent("sac", Box(-1, 1, (3,)), Box(-2, 2, (1,)), {"hidden": [8], "num_envs": 2})
    result = SegmentResult(key="s000001-aaaaaaaa", parent=None, algorithm=algorithm, env="Pendulum-v1",
                           hparams=hparams, score=0.0, segment_env_steps=0, lineage_env_steps=0, train_seconds=0.0,
                           eval_seconds=0.0, generation=0, device="cpu", metrics={})
    with pytest.raises(ValueError) as refused:
        save_agent(store, result.key, agent, result, 0)
    assert str(refused.value).startswith(says), str(refused.value)
    assert "\n" not in str(refused.value)
    assert store.checkpoint_keys() == []
    # the agent's own description saves, and loads back
    save_agent(store, result.key, agent, dataclasses.replace(result, algorithm="sac",
                                                             hparams={"hidden": [8], "num_envs": 2}), 0)
    assert load_agent(store, result.key).config == agent.config


def test_loading_with_hparams_of_other_networks_names_them_in_one_line(tmp_path):
    # torch's own error was six lines, one per tensor, and named no hyper-parameter
    from dask_podracer.train import load_agent

    store, key = _saved_sac(tmp_path)
    with pytest.raises(ValueError) as refused:
        load_agent(store, key, hparams={"hidden": [8]})
    says = str(refused.value)
    assert says.startswith(f"checkpoint '{key}' does not fit the networks hparams {{'hidden': [8]}} build (size "
                           f"mismatch for ") and says.endswith("it was saved with {'hidden': [16, 16]}")
    assert "\n" not in says
    assert load_agent(store, key, hparams={"hidden": [16, 16], "actor_lr": 0.1}) is not None  # other rates fit


def test_the_checkpoint_functions_name_a_store_given_as_a_url(tmp_path):
    # a URL where the store object goes gave "'str' object has no attribute 'load_checkpoint'"
    from dask_podracer.train import load_agent, replay_layout, replay_sources

    store, key = _saved_sac(tmp_path)
    for call in (lambda: load_agent(store.url, key), lambda: replay_layout(store.url, key),
                 lambda: replay_sources(str(tmp_path / "s.zarr"), key)):
        with pytest.raises(TypeError, match=r"store must be a PodracerStore \(open one with PodracerStore\(url\)\), "
                                            r"got str '.*s\.zarr'"):
            call()


def test_a_board_entry_without_a_key_or_a_score_is_refused_and_the_board_kept(tmp_path):
    # every reader ranks and shows entries by their key and score: `podracer status` gave a traceback on one
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    board = [{"key": "s000000-aaaaaaaa", "score": -150.0}]
    store.write_leaderboard(board)
    for bad, says in (({"key": "k"}, "score None"), ({"key": "k", "score": "high"}, "score 'high'"),
                      ({"key": "k", "score": True}, "score True"), ({"score": 1.0}, "key None")):
        with pytest.raises(TypeError, match=f"leaderboard entry 1 of store .* needs a key .* {says}"):
            store.write_leaderboard([*board, bad])
    assert store.read_leaderboard() == board


def test_the_store_commands_show_a_damaged_table_with_dashes(tmp_path, capsys):
    # a board or history changed by hand (or damaged) that lacks a score: status, leaderboard and lineage gave
    # tracebacks; they show what is there, "-" where a number is missing
    import json

    from dask_podracer.cli import main

    store = PodracerStore(tmp_path / "s.zarr", create=True)
    store.write_leaderboard([{"key": "k1", "score": -150.0}])
    store.append_history({"key": "k1", "status": "finished", "score": None})
    meta = tmp_path / "s.zarr" / "leaderboard" / "zarr.json"  # as a hand edit would leave it
    doc = json.loads(meta.read_text())
    doc["attributes"]["entries"] = [{"key": "k1"}]
    meta.write_text(json.dumps(doc))
    assert main(["status", store.url]) == 0
    assert "best       -  k1  (-, 0 env steps)" in capsys.readouterr().out
    assert main(["leaderboard", store.url]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["1", "k1", "-", "-", "-", "0", "-"]
    assert main(["lineage", store.url, "k1"]) == 0
    assert "k1  gen 0  score -  agent -" in capsys.readouterr().out


@pytest.mark.parametrize("hparams, says", [
    ({"hidden": "big"}, "hparams.hidden must be a list, got str 'big'"),  # was: invalid literal for int(): 'b'
    ({"actor_lr": "0.1"}, "hparams.actor_lr must be a number, got str '0.1'"),  # was: '>' not supported
    ({"gamma": None}, "hparams.gamma must be a number, got NoneType None"),
    ({"num_envs": 2.5}, "hparams.num_envs must be an integer, got float 2.5"),  # was: zeros() must be tuple of ints
    ({"gamma": 1.5}, "hparams.gamma must be in [0, 1], got 1.5"),
    (None, "hparams must be a mapping of hyper-parameters, got NoneType"),
])
def test_make_agent_holds_its_hyper_parameters_to_their_types_as_a_config_file_does(hparams, says):
    from gymnasium.spaces import Box

    from dask_podracer.agents import make_agent

    with pytest.raises(ConfigError) as refused:
        make_agent("sac", Box(-1, 1, (3,)), Box(-1, 1, (1,)), hparams)
    assert str(refused.value) == says


def test_an_observation_space_that_is_not_a_box_is_named_by_every_single_agent_algorithm():
    # a Dict space gave "'NoneType' object is not subscriptable" (its shape is None)
    from gymnasium.spaces import Box, Dict, Discrete

    from dask_podracer.agents import make_agent

    observations = Dict({"position": Box(-1, 1, (3,))})
    for algorithm, actions in (("sac", Box(-1, 1, (1,))), ("ppo", Discrete(2)), ("dqn", Discrete(2)),
                               ("impala", Discrete(2))):
        with pytest.raises(ValueError, match=f"^{algorithm} needs a Box observation space, got Dict.*: flatten it "
                                             r"\(gymnasium.wrappers.FlattenObservation\)$"):
            make_agent(algorithm, observations, actions, {})


@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "impala", "mappo", "maddpg"])
@pytest.mark.parametrize("seed", [2**32, 2**32 + 7, -1])
def test_an_agent_seed_beyond_32_bits_is_refused(algorithm, seed):
    # torch's CPU generator keeps a seed's low 32 bits: 7 and 2**32 + 7 trained the same agents
    config_cls = algorithm_info(algorithm).config_cls
    with pytest.raises(ValueError, match=r"^seed must be in \[0, 2\*\*32 - 1\], got -?\d+$"):
        config_cls(seed=seed)
    config_cls(seed=2**32 - 1)
