"""TensorBoard and MLflow logging of a tournament (`[logging]`, `podracer tensorboard`), read back with each
tool's own reader: TensorBoard's event accumulator and an MlflowClient on a real local tracking store."""

import ast
import logging
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dask_podracer.cli import main
from dask_podracer.config import LoggingConfig, config_from_dict
from dask_podracer.store import PodracerStore
from dask_podracer.tracking import Trackers, TrackingError, default_run_name, open_trackers, state_origin
from dask_podracer.tracking.scalars import segment_scalars, segment_text

SMALL = {  # a tiny SAC tournament whose fresh agents draw different actor_lr, so the hyper-parameters vary
    "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "max_segments": 6, "seed": 3},
    "tournament": {"leaderboard_size": 4, "fresh_agents": 2, "perturb": ["actor_lr", "critic_lr"]},
    "segment": {"env_steps": 200, "eval_episodes": 3},
    "hparams": {"hidden": [32, 32], "num_envs": 2, "learning_starts": 100, "batch_size": 64},
    "search": {"actor_lr": {"log_uniform": [1e-4, 3e-3]}},
}
RECORD = {"key": "s000007-abc", "agent": 2, "group": "sac", "parent": "s000003-def", "adopted": True, "generation": 3,
          "status": "finished", "score": -160.5, "score_stderr": 4.25, "rank": 1, "segment_env_steps": 300,
          "lineage_env_steps": 1200, "run_env_steps": 5000, "wall_seconds": 42.0, "train_seconds": 1.5,
          "hparams": {"actor_lr": 0.001, "batch_size": 64, "hidden": [32, 32], "pipeline": False},
          "metrics": {"critic_loss": 2.5, "entropy": -0.5, "learner_busy_fraction": 0.75, "policy_lag": math.nan},
          "device": "cpu", "error": None}


def small_config(store, **sections):
    return config_from_dict({**SMALL, "run": {**SMALL["run"], "store": str(store)}, **sections})


@pytest.fixture(scope="module")
def tournament(cpu_client, tmp_path_factory):
    """A store written by a real tournament of two agents on the suite's LocalCluster."""
    from dask_podracer.population import run_tournament

    path = tmp_path_factory.mktemp("tracking") / "store.zarr"
    summary = run_tournament(small_config(path).replace(name="tiny"), cpu_client)
    assert summary.segments_completed == 6 and summary.segments_failed == 0
    return PodracerStore(path)


def events(run_dir: Path):
    """TensorBoard's own reader of one run's event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def assert_event_files_match(run_root: Path, history: list[dict], origin: float | None) -> None:
    """Every agent is one run under `run_root`, and each finished segment is there: its scalars at the lineage's
    env steps (and, with `origin`, at the run's clock)."""
    finished = [r for r in history if r["status"] == "finished"]
    agents = sorted({r["agent"] for r in finished})
    assert sorted(p.name for p in run_root.iterdir()) == [f"agent-{a:03d}" for a in agents]
    for agent in agents:
        mine = [r for r in finished if r["agent"] == agent]
        run = events(run_root / f"agent-{agent:03d}")
        tags = set(run.Tags()["scalars"])
        assert {"score", "env_steps_per_second", "metrics/critic_loss", "metrics/entropy",
                "metrics/learner_busy_fraction", "hparams/actor_lr", "hparams/critic_lr"} <= tags
        for tag in tags:
            got = [(e.step, e.value) for e in run.Scalars(tag)]
            want = [(r["lineage_env_steps"], segment_scalars(r)[tag]) for r in mine if tag in segment_scalars(r)]
            assert [s for s, _ in got] == [s for s, _ in want], tag
            assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6), tag  # float32 in the file
        scores = run.Scalars("score")
        assert [e.value for e in scores] == pytest.approx([r["score"] for r in mine], rel=1e-6)
        if origin is not None:
            assert [e.wall_time - origin for e in scores] == pytest.approx([r["wall_seconds"] for r in mine], abs=1e-3)
        steps_per_second = [e.value for e in run.Scalars("env_steps_per_second")]
        assert steps_per_second == pytest.approx([r["segment_env_steps"] / r["train_seconds"] for r in mine], rel=1e-6)
        assert len(run.Tensors("segment/text_summary")) == len(mine)  # the text note: key, parent, hparams


def test_a_segment_becomes_scalars_and_a_note():
    scalars = segment_scalars(RECORD)
    assert scalars == {"score": -160.5, "score_stderr": 4.25, "env_steps_per_second": 200.0,  # 300 steps / 1.5 s
                       "metrics/critic_loss": 2.5, "metrics/entropy": -0.5, "metrics/learner_busy_fraction": 0.75,
                       "hparams/actor_lr": 0.001, "hparams/batch_size": 64.0}  # NaN, lists and booleans left out
    note = segment_text(RECORD)
    assert "`s000007-abc`" in note and "adopted `s000003-def`" in note and "| hidden | `[32, 32]` |" in note
    assert "a fresh start" in segment_text({**RECORD, "parent": None})


def test_nothing_to_log_opens_nothing_and_imports_neither_library():
    code = ("import sys\n"
            "from dask_podracer.config import LoggingConfig\n"
            "from dask_podracer.tracking import open_trackers\n"
            "t = open_trackers(LoggingConfig(), 'run', '/nonexistent/store.zarr')\n"
            f"t.record([{RECORD!r}.copy()]); t.close()\n"
            "assert t.writers == [] and t._thread is None\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'mlflow', 'tensorboardX')\n"
            "             or m.startswith('torch.utils.tensorboard')))\n").replace("nan", "float('nan')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


@pytest.mark.parametrize("field, library, extra", [("tensorboard", "tensorboard", "tensorboard"),
                                                   ("mlflow", "mlflow", "mlflow"), ("mlflow", "sqlalchemy", "mlflow")])
def test_a_missing_library_is_one_line_naming_the_extra(monkeypatch, tmp_path, field, library, extra):
    monkeypatch.setitem(sys.modules, library, None)  # what importlib finds when the package is not installed
    with pytest.raises(TrackingError) as error:
        open_trackers(LoggingConfig(**{field: str(tmp_path / "logs")}), "run", str(tmp_path / "none.zarr"))
    message = str(error.value)
    assert "\n" not in message and f"[logging] {field} needs" in message and library in message
    assert f"pip install 'dask-podracer[{extra}]'" in message


def test_the_cli_names_the_extra_too(monkeypatch, tmp_path, capsys):
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    store.extend_history([RECORD])
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert main(["tensorboard", store.url, "--out", str(tmp_path / "tb")]) == 2
    assert capsys.readouterr().err.strip() == ("podracer: error: [logging] tensorboard needs the tensorboard package: "
                                               "pip install 'dask-podracer[tensorboard]'")


class _Broken:
    def __init__(self):
        self.closed = False

    def write(self, records):
        raise ConnectionError("tracking server went away\nmore lines")

    def close(self):
        self.closed = True


class _Kept:
    def __init__(self):
        self.records, self.closed = [], False

    def write(self, records):
        self.records += records

    def close(self):
        self.closed = True


def test_a_tracker_that_fails_while_the_run_goes_is_reported_once_and_left_alone(caplog):
    broken, kept = _Broken(), _Kept()
    trackers = Trackers([broken, kept])
    with caplog.at_level(logging.WARNING, logger="dask_podracer.tracking"):
        trackers.record([RECORD])
        trackers.record([{**RECORD, "key": "s000008-x"}])
        trackers.close()
    assert [r["key"] for r in kept.records] == ["s000007-abc", "s000008-x"] and kept.closed
    assert not broken.closed  # a failed tracker is not touched again
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [("podracer: _Broken stopped logging: ConnectionError: tracking server went away "
                         "(the store keeps every record)")]


def test_tracking_imports_neither_dask_nor_the_population():
    package = Path(__file__).resolve().parents[1] / "dask_podracer" / "tracking"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):  # relative ones too: `from ..population import x` is ours
                anchor = ".".join(["dask_podracer", "tracking"][:3 - node.level]) if node.level else ""
                base = ".".join(part for part in (anchor, node.module) if part)
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for name in names:
                assert name.split(".")[0] not in ("dask", "distributed", "zarr"), (path.name, name)
                assert not name.startswith("dask_podracer.population"), (path.name, name)
        assert path.stem not in ("tensorboard", "mlflow", "tensorboardX")  # never shadow the library it imports


def test_default_run_name():
    assert default_run_name("/runs/pendulum.zarr") == "pendulum"
    assert default_run_name("s3://bucket/runs/pendulum.zarr/") == "pendulum"
    assert default_run_name("memory://x") == "x"


@pytest.mark.slow
def test_podracer_tensorboard_writes_a_stores_history_as_event_files(tournament, tmp_path, capsys):
    history = tournament.read_history()
    out = tmp_path / "tb"
    assert main(["tensorboard", tournament.url, "--out", str(out)]) == 0
    agents = len({r["agent"] for r in history})
    assert capsys.readouterr().out.strip() == (f"wrote 6 segments of {agents} agents to {out / 'tiny'} "
                                               f"(tensorboard --logdir {out})")
    state = tournament.read_run_state()
    assert state["name"] == "tiny"  # the run's name, which [logging] logged under live, not the store's
    assert_event_files_match(out / "tiny", history, origin=state["origin"])
    # a second export into the same place would double every point: refused
    assert main(["tensorboard", tournament.url, "--out", str(out)]) == 2
    assert "already holds TensorBoard event files" in capsys.readouterr().err


@pytest.mark.slow
def test_records_handed_over_as_the_run_goes_give_the_same_files(tournament, tmp_path):
    history = tournament.read_history()
    with open_trackers(LoggingConfig(tensorboard=str(tmp_path)), "live", tournament.url, origin=1000.0) as trackers:
        for i in range(0, len(history), 2):  # as the orchestrator's batched history writes hand them over
            trackers.record(history[i:i + 2])
    assert_event_files_match(tmp_path / "live", history, origin=1000.0)


def mlflow_runs(uri: str, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r} in {uri}"
    return client, client.search_runs([found.experiment_id])


def assert_mlflow_matches(client, runs, history: list[dict], origin: float) -> None:
    finished = [r for r in history if r["status"] == "finished"]
    agents = sorted({r["agent"] for r in finished})
    (parent,) = [r for r in runs if r.data.tags.get("podracer_run") == "tournament"]
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == [f"agent-{a:03d}" for a in agents] and len(runs) == len(agents) + 1
    for agent in agents:
        mine = [r for r in finished if r["agent"] == agent]
        run = children[f"agent-{agent:03d}"]
        assert run.info.status == "FINISHED"
        assert run.data.params["actor_lr"] == repr(mine[0]["hparams"]["actor_lr"])  # its first segment's
        assert run.data.tags["podracer_latest_segment"] == mine[-1]["key"]
        for tag in ("score", "metrics/critic_loss", "hparams/actor_lr", "env_steps_per_second"):
            got = sorted((m.timestamp, m.step, m.value) for m in client.get_metric_history(run.info.run_id, tag))
            want = sorted(((origin + r["wall_seconds"]) * 1000, r["lineage_env_steps"], segment_scalars(r)[tag])
                          for r in mine)
            assert [(s, v) for _, s, v in got] == [(s, v) for _, s, v in want], (agent, tag)  # doubles: exact
            assert [t for t, _, _ in got] == pytest.approx([t for t, _, _ in want], abs=1.0)  # whole milliseconds


@pytest.mark.slow
def test_mlflow_logs_one_nested_run_per_agent_to_a_local_tracking_store(tournament, tmp_path, capfd):
    history = tournament.read_history()
    directory = tmp_path / "mlruns"
    with open_trackers(LoggingConfig(mlflow=str(directory)), "tiny", tournament.url, origin=2000.0) as trackers:
        trackers.record(history[:3])
        trackers.record(history[3:])
    # a new database's tables: MLflow says at INFO that it makes them, on a `podracer train --quiet` terminal too
    assert "MLflow database tables" not in capfd.readouterr().err
    client, runs = mlflow_runs(f"sqlite:///{directory / 'mlflow.db'}", "tiny")
    assert_mlflow_matches(client, runs, history, origin=2000.0)

    # a resumed tournament (same store, same experiment) logs on into the runs it had
    later = {**history[-1], "key": "s000099-later", "lineage_env_steps": 99_999, "wall_seconds": 500.0,
             "score": -123.0}
    with open_trackers(LoggingConfig(mlflow=str(directory)), "tiny", tournament.url, origin=2000.0) as trackers:
        trackers.record([later])
    client, runs = mlflow_runs(f"sqlite:///{directory / 'mlflow.db'}", "tiny")
    assert_mlflow_matches(client, runs, [*history, later], origin=2000.0)


@pytest.mark.slow
def test_the_logging_section_logs_a_tournament_as_it_goes(cpu_client, tmp_path):
    """`[logging]` in a config: the tournament itself writes TensorBoard and MLflow (through the orchestrator's
    `open_trackers` call), and what they hold matches the store's history."""
    from dask_podracer.population import run_tournament

    store_path = tmp_path / "logged.zarr"
    config = small_config(store_path, logging={"tensorboard": str(tmp_path / "tb"), "mlflow": str(tmp_path / "ml")})
    run_tournament(config, cpu_client)
    store = PodracerStore(store_path)
    history = store.read_history()
    logged = [p.parent for p in (tmp_path / "tb").rglob("agent-000")]
    assert len(logged) == 1, f"expected one run directory holding agent-000 under {tmp_path / 'tb'}: {logged}"
    assert_event_files_match(logged[0], history, origin=None)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'ml' / 'mlflow.db'}")
    experiments = [e.name for e in client.search_experiments() if e.name != "Default"]
    assert len(experiments) == 1
    client, runs = mlflow_runs(f"sqlite:///{tmp_path / 'ml' / 'mlflow.db'}", experiments[0])
    (first,) = [r for r in history if r["status"] == "finished"][:1]
    score = client.get_metric_history(next(r.info.run_id for r in runs if r.info.run_name ==
                                           f"agent-{first['agent']:03d}"), "score")
    origin = score[0].timestamp / 1000 - first["wall_seconds"]  # the run's clock, whatever date it started
    assert_mlflow_matches(client, runs, history, origin=origin)
    assert store.read_run_state()["origin"] == pytest.approx(origin, abs=1e-3)  # the date the store records

    # resumed after a gap, which wall_seconds leaves out: the live logs go on at the run's clock, and an export
    # written from the store afterwards puts every point where the live logs did (before, it dated the whole
    # run later by the gap)
    time.sleep(2.0)
    run_tournament(config.replace(max_segments=2), cpu_client)
    history = store.read_history()
    assert sum(r["status"] == "finished" for r in history) == 8
    assert store.read_run_state()["origin"] == pytest.approx(origin, abs=1e-3)
    assert_event_files_match(logged[0], history, origin=origin)
    assert main(["tensorboard", str(store_path), "--out", str(tmp_path / "exported"), "--name", "run"]) == 0
    assert_event_files_match(tmp_path / "exported" / "run", history, origin=origin)


def test_a_run_state_dates_second_0_by_its_origin_and_an_older_one_by_its_last_write():
    assert state_origin({"origin": 100.0, "written_at": 900.0, "wall_seconds": 50.0}) == 100.0
    assert state_origin({"written_at": 900.0, "wall_seconds": 50.0}) == 850.0  # a state from before 2026-11-28
    assert state_origin({"wall_seconds": 50.0}) is None and state_origin({}) is None
