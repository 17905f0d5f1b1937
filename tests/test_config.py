"""Configs: the shipped one loads; bad ones are refused with one line naming the field, before any store exists."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dask_podracer.config import ConfigError, config_from_dict, load_config, parse_duration
from helpers import to_toml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "workflows" / "configs" / "pendulum.toml"
GOOD = {"run": {"env": "Pendulum-v1", "algorithm": "sac"}}


def test_shipped_config_loads_with_every_hparam_filled_in():
    import dataclasses

    from dask_podracer.agents import algorithm_info

    config = load_config(SHIPPED)
    assert config.run.env == "Pendulum-v1" and config.run.algorithm == "sac"
    assert config.run.target_return == -200.0 and config.run.budget_seconds == 300
    assert config.hparams["hidden"] == (64, 64) and config.hparams["gamma"] == 0.99
    defaults = {f.name: f.default for f in dataclasses.fields(algorithm_info("sac").config_cls)}
    assert set(config.hparams) == set(defaults)  # every field, those the file leaves out at their defaults
    assert "buffer_size" not in SHIPPED.read_text() and config.hparams["buffer_size"] == defaults["buffer_size"]
    assert config.store_url == "runs/pendulum.zarr"


@pytest.mark.parametrize("path", sorted((ROOT / "workflows" / "configs").glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_config_loads_and_builds_its_env_and_agents(path):
    from dask_podracer.population import check_constructs

    config = load_config(path)
    check_constructs(config)  # what `podracer train` does before it starts a cluster
    assert config.store_url == f"runs/{config.run.name}.zarr" and config.run.budget_seconds > 0


def test_defaults_and_aliases():
    config = config_from_dict({"run": {"env": "Pendulum", "algorithm": "ppo"}}, default_name="mine")
    assert config.run.env == "Pendulum-v1"  # checkpoints record the canonical name
    assert config.store_url == "runs/mine.zarr" and config.run.target_return is None


BAD_CONFIGS = [
    ({"run": {"env": "Pendulum-v1", "algorithm": "sac", "colour": 1}}, "unknown key run.colour"),
    ({**GOOD, "tournamnet": {}}, "unknown section 'tournamnet'; did you mean 'tournament'? (known: run, "),
    ({"run": {"env": "Pendulum-v9", "algorithm": "sac"}}, "run.env: unknown env 'Pendulum-v9'; did you mean 'Pendulum-v1'"),
    ({"run": {"env": "Pendulum-v1", "algorithm": "dqn9"}}, "run.algorithm must be one of"),
    ({"run": {"env": "Pendulum-v1", "algorithm": "SAC"}}, "got 'SAC'; did you mean 'sac'?"),
    ({**GOOD, "tournament": {"strategy": "PBT"}}, "got 'PBT'; did you mean 'pbt'?"),
    ({**GOOD, "search": {"actor_lr": {"loguniform": [1e-4, 1e-3]}}}, "got 'loguniform'; did you mean 'log_uniform'"),
    ({"run": {"algorithm": "sac"}}, "missing key run.env"),
    ({**GOOD, "tournament": {"pool_size": "two"}}, "tournament.pool_size must be an integer, got str 'two'"),
    ({**GOOD, "tournament": {"leaderboard_size": 0}}, "tournament.leaderboard_size must be >= 1, got 0"),
    ({**GOOD, "tournament": {"progress_margin": -1}}, "tournament.progress_margin must be >= 0, got -1"),
    ({**GOOD, "tournament": {"perturb": ["hidden"]}}, "tournament.perturb: 'hidden' is not a tunable"),
    ({**GOOD, "segment": {"env_steps": 1.5}}, "segment.env_steps must be an integer"),
    ({**GOOD, "segment": {"device": "gpu"}}, "segment.device must be"),
    ({**GOOD, "segment": {"env_steps": 0}}, "segment.env_steps must be > 0 unless segment.seconds is set"),
    ({**GOOD, "hparams": {"gamma": 1.5}}, "hparams.gamma must be in [0, 1], got 1.5"),
    ({**GOOD, "hparams": {"actor_lr": "fast"}}, "hparams.actor_lr must be a number, got str 'fast'"),
    ({**GOOD, "hparams": {"hidden": [64, "x"]}}, r"hparams.hidden\[1\] must be an integer"),
    ({**GOOD, "hparams": {"lerning_rate": 1e-3}}, "unknown key hparams.lerning_rate"),
    ({**GOOD, "hparams": {"hiden": [8]}}, "unknown key hparams.hiden; did you mean 'hidden'? (known: "),
    ({"run": {**GOOD["run"], "budget": "soon"}}, "run.budget must be a duration"),
    ({"run": {**GOOD["run"], "target_return": True}}, "run.target_return must be a number"),
    ({"run": "sac"}, "run must be a table"),
    ({**GOOD, "search": {"actor_lr": {"log_uniform": [0, 1e-2]}}}, "search.actor_lr: log_uniform needs low > 0"),
    ({**GOOD, "search": {"colour": {"uniform": [0, 1]}}}, "unknown key search.colour: not a hyper-parameter of sac"),
    ({**GOOD, "search": {"gamma": {"uniform": [0.5, 1.5]}}},
     "search.gamma: its prior can draw 1.5, and gamma must be in [0, 1]"),
    ({**GOOD, "search": {"gamma": {"normal": [0.9, 0.1]}}}, "search.gamma: prior must be one of"),
    ({**GOOD, "tournament": {"strategy": "evolve"}}, "tournament.strategy must be one of"),
    ({**GOOD, "cluster": {"resource": "TPU"}}, "cluster.resource must be"),
    ({**GOOD, "groups": [{"algorithm": "ppo"}]}, "run.algorithm must be left out when [[groups]] are declared"),
    ({"run": {"env": "Pendulum-v1"}, "groups": [{"algorithm": "sac"}, {"algorithm": "sac"}]},
     "groups: names must differ"),
    ({"run": {"env": "Pendulum-v1"}, "groups": [{"algorithm": "sac", "hparams": {"tau": 0}}]},
     "groups[0].hparams.tau must be in (0, 1]"),
    ({"run": {"env": "Pendulum-v1"}}, "missing key run.algorithm (or declare [[groups]])"),
    ({**GOOD, "cluster": {"shrink_delay": -1}}, "cluster.shrink_delay must be >= 0, got -1"),
    ({**GOOD, "tournament": {"replay": "keep"}}, "tournament.replay must be copy, share or reset, got 'keep'"),
    ({**GOOD, "cluster": {"allowed_failures": -1}}, "cluster.allowed_failures must be >= 0, got -1"),
    # keys in the wrong place name where they belong (a plain "unknown key" listed only the section's own fields)
    ({"algorithm": "sac", **GOOD}, "key 'algorithm' is outside any section: it belongs in [run] (write it below"),
    ({"colour": 1, **GOOD}, "key 'colour' is outside any section: every key belongs below a [section] line"),
    ({**GOOD, "tournament": {"max_segments": 3}}, "unknown key tournament.max_segments: it is a key of [run], not "
                                                  "of [tournament]"),
    ({**GOOD, "segment": {"gamma": 0.9}}, "unknown key segment.gamma: it is a hyper-parameter of sac, set in "
                                          "[hparams], not in [segment]"),
    ({"run": {"env": "Pendulum-v1"}, "groups": [{"algorithm": "sac", "gamma": 0.9}]},
     "unknown key groups[0].gamma: it is a hyper-parameter of sac; set it in a [groups.hparams] table below this "
     "[[groups]] line"),
    ({"run": {"env": "Pendulum-v1"}, "groups": [{"algorithm": "sac", "max_segments": 3}]},
     "unknown key groups[0].max_segments: it is a key of [run], which all groups share"),
]


@pytest.mark.parametrize("data, message", BAD_CONFIGS)
def test_bad_configs_name_the_field(data, message):
    with pytest.raises(ConfigError, match=message if "\\" in message else re.escape(message)):
        config_from_dict(data, source="x.toml")


def test_durations():
    assert parse_duration("90s") == 90 and parse_duration("10m") == 600 and parse_duration("1h30m") == 5400
    assert parse_duration("45") == 45 and parse_duration(2.5) == 2.5
    for bad in ("", "10 minutes", "0s", "-5", "m"):
        with pytest.raises(ConfigError):
            parse_duration(bad)


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "dask_podracer.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize("toml, message", [
    ('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nbogus = 1\n', "unknown key run.bogus"),
    ('[run]\nenv = "CartPole-v9"\nalgorithm = "sac"\n', "run.env: unknown env 'CartPole-v9'; did you mean 'CartPole-v1'"),
    ('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\n[hparams]\nbatch_size = -1\n', "hparams.batch_size must be"),
    ('[run\nenv = ', "not valid TOML"),
    ('[run]\nenv = "gym:Foo-v0"\nalgorithm = "sac"\n', "gym:Foo-v0: Environment `Foo` doesn't exist"),
])
def test_cli_refuses_bad_configs_in_one_line_and_touches_no_store(tmp_path, toml, message):
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    store = tmp_path / "store.zarr"
    result = _cli("train", str(config), "--store", str(store), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert message in result.stderr and "bad.toml" in result.stderr
    assert not store.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("data, message", BAD_CONFIGS)
def test_every_bad_config_is_one_line_and_exit_2_from_the_cli(tmp_path, capsys, monkeypatch, data, message):
    from dask_podracer.cli import main

    config = tmp_path / "bad.toml"
    config.write_text(to_toml(data))
    monkeypatch.chdir(tmp_path)
    code = main(["train", str(config), "--store", str(tmp_path / "store.zarr")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("podracer: error: ")
    assert re.search(message if "\\" in message else re.escape(message), err) and "bad.toml" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]  # no store, no runs/ directory


def test_cli_refuses_a_bad_budget_and_a_missing_config(tmp_path):
    result = _cli("train", str(SHIPPED), "--budget", "forever", "--store", str(tmp_path / "s.zarr"), cwd=tmp_path)
    assert result.returncode == 2
    assert "podracer: error: --budget must be a duration such as 90s, 10m or 1h30m, got 'forever'" in result.stderr
    result = _cli("train", str(tmp_path / "nope.toml"), cwd=tmp_path)
    assert result.returncode == 2 and "cannot read config" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_configuration_reference_is_generated_from_the_dataclasses():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_config_reference", ROOT / "docs" / "make_config_reference.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert maker.render() == written, "docs/configuration.md is stale: run python docs/make_config_reference.py"


def test_eval_env_kwargs_are_checked_like_env_kwargs():
    with pytest.raises(ConfigError, match=r"run.eval_env_kwargs must be a table of keyword arguments, got 3"):
        config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "eval_env_kwargs": 3}})
    config = config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac",
                                       "eval_env_kwargs": {"period": "validation"}}})
    assert config.run.eval_env_kwargs == {"period": "validation"}


def test_settings_change_the_config_as_its_file_would():
    before = SHIPPED.read_text()
    settings = ["hparams.gamma=0.97", "hparams.batch_size=64", "run.env=gym:Pendulum-v1",
                'tournament.perturb=["actor_lr"]', "run.budget=90s", "logging.mlflow=mlruns"]
    config = load_config(SHIPPED, settings)
    assert config.hparams["gamma"] == 0.97 and config.hparams["batch_size"] == 64
    assert config.run.env == "gym:Pendulum-v1" and config.tournament.perturb == ("actor_lr",)
    assert config.run.budget_seconds == 90 and config.logging.mlflow == "mlruns"  # a table the file lacks
    # the rest as the file has it: its values that differ from SAC's defaults (128 x 128, 0.5)
    assert config.hparams["hidden"] == (64, 64) and config.hparams["utd_ratio"] == 1.0
    assert config.settings == tuple(settings)  # recorded in the run state
    assert SHIPPED.read_text() == before
    mixed = ROOT / "workflows" / "configs" / "pendulum_mixed.toml"
    for setting in ("groups.1.hparams.gamma=0.9", "groups[1].hparams.gamma=0.9", "groups.ppo.hparams.gamma=0.9"):
        (first, second) = load_config(mixed, [setting]).groups
        assert second.hparams["gamma"] == 0.9
        assert first.hparams["gamma"] == load_config(mixed).groups[0].hparams["gamma"]
    with pytest.raises(ConfigError, match=r"groups has tables 0 to 1 or sac, ppo, not 'td3'"):
        load_config(mixed, ["groups.td3.hparams.gamma=0.9"])


@pytest.mark.parametrize("setting, message", [
    ("hparams.gamma", "--set hparams.gamma: expected SECTION.KEY=VALUE, e.g. hparams.gamma=0.97"),
    ("hparams..gamma=1", "--set hparams..gamma=1: expected SECTION.KEY=VALUE"),
    ("hparams.gama=0.9", "pendulum.toml with --set: unknown key hparams.gama; did you mean 'gamma'?"),
    ("hparams.batch_size=many", "pendulum.toml with --set: hparams.batch_size must be an integer, got str 'many'"),
    ("run.env.name=x", "--set run.env.name=x: run.env is str 'Pendulum-v1', not a table"),
    ("tournament.perturb.0=x", "--set tournament.perturb.0=x: tournament.perturb is a list; set it whole"),
    ("colour.hue=1", "pendulum.toml with --set: unknown section 'colour'"),
])
def test_a_bad_setting_is_one_line_and_exit_2_before_any_store(tmp_path, capsys, monkeypatch, setting, message):
    from dask_podracer.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["train", str(SHIPPED), "--store", str(tmp_path / "store.zarr"), "--set", "run.seed=1", setting])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("podracer: error: ") and message in err
    assert list(tmp_path.iterdir()) == []


def test_settings_reach_the_agents_of_a_run(tmp_path, cpu_cluster, capsys):
    from dask_podracer.cli import main
    from dask_podracer.store import PodracerStore

    store = tmp_path / "store.zarr"
    code = main(["train", str(SHIPPED), "--scheduler", cpu_cluster.scheduler_address, "--store", str(store),
                 "--quiet", "--set", "run.max_segments=1", "tournament.pool_size=1", "run.target_return=0.0",
                 "segment.env_steps=200", "segment.eval_episodes=2", "hparams.gamma=0.9", "hparams.hidden=[16, 16]",
                 "hparams.num_envs=2"])
    assert code == 0, capsys.readouterr().err
    (entry,) = PodracerStore(str(store)).read_leaderboard()
    assert entry["hparams"]["gamma"] == 0.9 and list(entry["hparams"]["hidden"]) == [16, 16]
    assert entry["env_steps"] == 200
    state = PodracerStore(str(store)).read_run_state()  # what ran, for `podracer status`
    assert state["config"] == f"{SHIPPED} with --set" and state["settings"][-1] == "hparams.num_envs=2"
    capsys.readouterr()
    assert main(["status", str(store)]) == 0
    assert f"config     {SHIPPED} with --set run.max_segments=1 tournament.pool_size=1" in capsys.readouterr().out


@pytest.mark.parametrize("command, said", [
    (["train", str(SHIPPED), "--json", "{tmp}/no/dir/s.json"],
     "--json {tmp}/no/dir/s.json: there is no directory '{tmp}/no/dir' to write it in"),
    (["train", str(SHIPPED), "--json", "{tmp}"], "--json {tmp}: is a directory; give a file name"),
    (["train", str(SHIPPED), "--tensorboard", "{tmp}/a_file"],
     "cannot write TensorBoard event files under '{tmp}/a_file/pendulum': Not a directory"),
    (["plot", "{tmp}/s.zarr", "--out", "{tmp}/no/c.html"], "--out {tmp}/no/c.html: there is no directory"),
])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys, command, said):
    from dask_podracer.cli import main

    (tmp_path / "a_file").write_text("")
    store = ["--store", str(tmp_path / "s.zarr")] if command[0] == "train" else []
    code = main([part.format(tmp=tmp_path) for part in command] + store)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said.format(tmp=tmp_path) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # no store, no log, no summary


def test_a_config_saved_with_a_byte_order_mark_and_windows_line_ends_is_read(tmp_path):
    # Windows' Notepad saves UTF-8 with a byte-order mark, which tomllib called "Invalid statement (at line 1,
    # column 1)"
    path = tmp_path / "notepad.toml"
    path.write_bytes(b'\xef\xbb\xbf[run]\r\nenv = "Pendulum-v1"\r\nalgorithm = "sac"\r\n[hparams]\r\ngamma = 0.97\r\n')
    config = load_config(path)
    assert config.run.env == "Pendulum-v1" and config.hparams["gamma"] == 0.97
