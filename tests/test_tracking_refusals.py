"""What a run leaves behind and how users look at it, where it went wrong: tracking stores that cannot be reached,
trackers slower than the records they are handed, `podracer status` of a run whose client was killed."""

import logging
import socket
import subprocess
import sys
import threading
import time

import pytest

from dask_podracer.config import LoggingConfig
from dask_podracer.status import format_status, store_status
from dask_podracer.tracking import Trackers, TrackingError, open_trackers

RECORD = {"key": "s000001-a", "agent": 0, "status": "finished", "score": -900.0, "lineage_env_steps": 300,
          "run_env_steps": 300, "wall_seconds": 10.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_mlflow_server_nobody_answers_is_one_line_in_seconds(tmp_path):
    # before: MLflow's client retried the refused connection with backoff for 4 min 12 s, then said so
    pytest.importorskip("mlflow")
    uri = f"http://127.0.0.1:{free_port()}"
    outcome = []

    def open_it():
        try:
            open_trackers(LoggingConfig(mlflow=uri), "run", str(tmp_path / "s.zarr"), origin=0.0).close()
            outcome.append(None)
        except TrackingError as e:
            outcome.append(e)

    started = time.monotonic()
    opener = threading.Thread(target=open_it, daemon=True)
    opener.start()
    opener.join(60)
    assert outcome, f"still opening {uri} after {time.monotonic() - started:.0f}s"
    assert str(outcome[0]) == f"cannot reach the MLflow tracking server at '{uri}': Connection refused"
    with pytest.raises(TrackingError, match=r"^\[logging\] mlflow 'http://127.0.0.1:99999' is not a valid URL"):
        open_trackers(LoggingConfig(mlflow="http://127.0.0.1:99999"), "run", str(tmp_path / "s.zarr"), origin=0.0)


class SlowWriter:
    """A tracker that takes `seconds` per history record handed to it (a remote MLflow server takes ~50 ms)."""

    def __init__(self, seconds):
        self.seconds, self.written, self.closed = seconds, [], False

    def write(self, records):
        time.sleep(self.seconds * len(records))
        self.written += [r["key"] for r in records]

    def close(self):
        self.closed = True


def test_closing_waits_for_every_record_while_the_trackers_keep_writing(caplog):
    # before: close() waited `timeout` seconds in all and dropped the rest unsaid (`podracer tensorboard` of a
    # long run's store then printed "wrote N segments" of a partial export; MLflow got 2,245 of 6,027 records)
    writer = SlowWriter(0.001)
    trackers = Trackers([writer])
    records = [{**RECORD, "key": f"s{i:06d}-a"} for i in range(1500)]
    trackers.record(records)
    with caplog.at_level(logging.WARNING):
        trackers.close(timeout=0.5)  # 1.5 s of writing in all, never 0.5 s without progress
    assert writer.written == [r["key"] for r in records] and writer.closed
    assert "not logged" not in caplog.text


def test_a_tracker_that_stops_writing_is_given_up_on_and_what_it_left_is_said(caplog):
    release = threading.Event()

    class Stuck(SlowWriter):
        def write(self, records):
            release.wait(30)  # a tracking server that stopped answering

    trackers = Trackers([Stuck(0.0)])
    trackers.record([{**RECORD, "key": f"s{i:06d}-a"} for i in range(250)])
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        trackers.close(timeout=0.5)
    release.set()
    assert time.monotonic() - started < 5
    assert "podracer: 250 history records were not logged (Stuck wrote none in 0s): the store keeps every " \
           "record" in caplog.text


def test_status_of_a_run_whose_client_was_killed_on_this_machine_says_it_is_not_running():
    # before: RUNNING for three heartbeats (90 s) after the kill, while `podracer train` and `podracer gc`
    # already took the store over (the run lease sees the process is gone)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    now = time.time()
    state = {"invocations": 1, "wall_seconds": 20.0, "finished": False, "stop_reason": None,
             "leg": {"budget_spent": 20.0, "segments": 3}, "invocation_started_at": now - 25.0,
             "written_at": now - 5.0, "heartbeat_seconds": 30.0}
    try:
        killed = store_status({**state, "client": {"host": socket.gethostname(), "pid": dead.pid}}, [], [], now=now)
        going = store_status({**state, "client": {"host": socket.gethostname(), "pid": alive.pid}}, [], [], now=now)
        elsewhere = store_status({**state, "client": {"host": "another-machine", "pid": dead.pid}}, [], [], now=now)
    finally:
        alive.kill()
        alive.wait()
    assert killed.state == "silent" and killed.exited_client == dead.pid
    assert (f"run        NOT RUNNING: not finished, but its client (process {dead.pid} on this machine) has exited: "
            f"it was killed; the next `podracer train` on this store continues its budget") in format_status(killed)
    assert going.state == "running" and going.exited_client is None
    assert elsewhere.state == "running"  # another machine's process cannot be looked at: its heartbeats tell


def test_two_stores_of_one_run_name_do_not_log_into_one_tensorboard_run(tmp_path, monkeypatch):
    # before: one config on two stores (`--store a.zarr`, then `--store b.zarr`) with one --tensorboard DIR logged
    # both runs' agent 0 into DIR/pendulum/agent-000, one line of two runs' points
    pytest.importorskip("tensorboard")
    tb = LoggingConfig(tensorboard=str(tmp_path / "tb"))
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    monkeypatch.chdir(tmp_path / "one")
    with open_trackers(tb, "pendulum", "runs/pendulum.zarr", origin=0.0) as trackers:
        trackers.record([RECORD])
    with open_trackers(tb, "pendulum", str(tmp_path / "one" / "runs" / "pendulum.zarr"), origin=0.0):
        pass  # the same store, resumed (and named as PodracerStore names it): logs on into its run
    monkeypatch.chdir(tmp_path / "two")  # every config's default store is relative: another directory's store
    with pytest.raises(TrackingError) as refused:
        open_trackers(tb, "pendulum", "runs/pendulum.zarr", origin=0.0)
    assert str(refused.value) == (f"'{tmp_path / 'tb' / 'pendulum'}' holds the TensorBoard logs of another store's "
                                  f"run ('{tmp_path / 'one' / 'runs' / 'pendulum.zarr'}'): give another directory "
                                  f"or run.name")
    assert [p.name for p in (tmp_path / "tb" / "pendulum").iterdir()] == ["agent-000"]  # nothing else in the run


def test_two_stores_of_one_relative_name_get_two_mlflow_runs(tmp_path, monkeypatch):
    # before: the store was told apart by the name it was given, `runs/pendulum.zarr` from any directory: a second
    # project's run found the first one's tournament and agent runs and logged into them
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    ml = LoggingConfig(mlflow=str(tmp_path / "ml"))
    for project in ("one", "two"):
        (tmp_path / project).mkdir()
        monkeypatch.chdir(tmp_path / project)
        with open_trackers(ml, "pendulum", "runs/pendulum.zarr", origin=0.0) as trackers:
            trackers.record([RECORD])
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'ml' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("pendulum").experiment_id])
    named = sorted(r.data.tags.get("podracer_run") for r in runs)
    assert named == ["agent-000", "agent-000", "tournament", "tournament"]
    assert sorted(r.data.tags["podracer_store"] for r in runs if r.data.tags["podracer_run"] == "tournament") == [
        str(tmp_path / "one" / "runs" / "pendulum.zarr"), str(tmp_path / "two" / "runs" / "pendulum.zarr")]


def test_mlflow_gets_each_agents_records_in_few_batches(tmp_path):
    # before: one log_batch per record, 50 ms each on a local database: the 6,027 records of a long run took
    # 295 s (and the end of a run waited only 120 s for them); now 48 s
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    records = [{**RECORD, "key": f"s{i:06d}-a", "agent": i % 2, "lineage_env_steps": 300 * (i + 1),
                "wall_seconds": 10.0 + i, "score": -900.0 + i} for i in range(300)]
    trackers = open_trackers(LoggingConfig(mlflow=str(tmp_path / "ml")), "batched", "/s.zarr", origin=0.0)
    (writer,) = trackers.writers
    calls = []
    log_batch = writer.client.log_batch
    writer.client.log_batch = lambda *args, **kwargs: calls.append(kwargs.get("metrics")) or log_batch(*args, **kwargs)
    trackers.record(records)
    trackers.close()
    assert len([c for c in calls if c]) <= 6  # 3 chunks of 100 records, 2 agents each
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'ml' / 'mlflow.db'}")
    for run in client.search_runs([client.get_experiment_by_name("batched").experiment_id]):
        if run.data.tags["podracer_run"] == "tournament":
            continue
        agent = int(run.data.tags["podracer_run"].removeprefix("agent-"))
        mine = [r for r in records if r["agent"] == agent]
        assert run.data.tags["podracer_latest_segment"] == mine[-1]["key"]
        assert sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "score")) == [
            (r["lineage_env_steps"], r["score"]) for r in mine]


def test_an_export_of_a_pool_larger_than_the_open_writers_writes_one_event_file_an_agent(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from dask_podracer.cli import main
    from dask_podracer.store import PodracerStore

    agents = 64 + 6  # torch's writers were kept open for 64 agents
    store = PodracerStore(str(tmp_path / "many.zarr"), create=True)
    store.extend_history([{**RECORD, "key": f"s{i:06d}-a", "agent": i % agents, "lineage_env_steps": 300 * (i + 1),
                           "wall_seconds": 10.0 + i} for i in range(3 * agents)])  # the agents take turns
    assert main(["tensorboard", store.url, "--out", str(tmp_path / "tb"), "--name", "many"]) == 0
    files = list((tmp_path / "tb" / "many").rglob("events.out.tfevents.*"))
    assert len(files) == agents  # before: a new file at nearly every turn (210 files here)


def test_the_trackers_get_a_long_history_agent_by_agent():
    # before: in the history's order a chunk of 100 records held one record of each of 100 agents, and MLflow made
    # one call per record (6,000 records of 100 agents: 93 s, now 21 s; benchmarks/long_history.py)
    class Chunks(SlowWriter):
        def write(self, records):
            super().write(records)
            self.chunks = [*getattr(self, "chunks", []), [r["agent"] for r in records]]

    writer = Chunks(0.0)
    trackers = Trackers([writer])
    records = [{**RECORD, "key": f"s{i:06d}-a", "agent": i % 150} for i in range(600)]
    trackers.record(records)
    trackers.close()
    assert sum(len(set(chunk)) for chunk in writer.chunks) <= 150 + len(writer.chunks)  # was 600
    for agent in range(150):  # each agent's records in their order
        mine = [r["key"] for r in records if r["agent"] == agent]
        assert [key for key in writer.written if key in set(mine)] == mine


def test_live_logging_of_a_pool_larger_than_64_agents_keeps_one_event_file_an_agent_that_tensorboard_reads(tmp_path):
    """A live run writes each second's records: with agents taking turns, past 64 agents each segment of an agent
    whose writer had been closed opened a new file (and every open writer held a thread)."""
    pytest.importorskip("tensorboard")
    import threading

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from dask_podracer.tracking.tensorboard_log import TensorBoardLog

    agents, turns = 70, 3
    threads = threading.active_count()
    log = TensorBoardLog(tmp_path / "tb", origin=1_000_000.0)
    records = [{**RECORD, "key": f"s{i:06d}-a", "agent": i % agents, "score": float(i),
                "lineage_env_steps": 300 * (i + 1), "wall_seconds": 10.0 + i} for i in range(turns * agents)]
    for i in range(0, len(records), 7):  # a few records a write, as a live run's seconds bring them
        log.write(records[i:i + 7])
    assert threading.active_count() == threads
    log.close()
    assert len(list((tmp_path / "tb").rglob("events.out.tfevents.*"))) == agents  # was 70 + 2 x 70 - 64 here
    for agent in (0, agents - 1):
        run = EventAccumulator(str(tmp_path / "tb" / f"agent-{agent:03d}"), size_guidance={"scalars": 0})
        run.Reload()
        mine = [r for r in records if r["agent"] == agent]
        assert [(e.step, e.value, e.wall_time) for e in run.Scalars("score")] == [
            (r["lineage_env_steps"], r["score"], 1_000_000.0 + r["wall_seconds"]) for r in mine]
