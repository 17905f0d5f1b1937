"""Tournaments sharing one Dask cluster: with each other (one after another, or at once from two threads of one
process) and with the user's own tasks. Each keeps to its own store and its own segments."""

import functools
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from dask_podracer.config import config_from_dict
from dask_podracer.population import run_tournament
from dask_podracer.population.monitor import current_snapshot_now
from dask_podracer.population.task_keys import segment_key
from dask_podracer.store import PodracerStore, StoreError

TINY = {"segment": {"env_steps": 150, "eval_episodes": 2},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32}}


def tiny(store: Path, segments: int, **run):
    return config_from_dict({**TINY, "tournament": {"pool_size": 1},
                             "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "2m",
                                     "store": str(store), "max_segments": segments, **run}})


@pytest.fixture
def cluster():
    """Three one-thread workers in this process: two runs' segments and a task of the user's at once."""
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False, protocol="tcp://", host="127.0.0.1",
                      scheduler_port=0, dashboard_address="127.0.0.1:0") as local, Client(local) as client:
        yield local, client


def held_until_released(folder: str, spec):
    """A segment function that waits until the file `folder/<its key>` exists, then trains for real."""
    from dask_podracer.population.tasks import segment_task

    deadline = time.monotonic() + 120  # a test that failed before releasing it does not leave it forever
    while not (Path(folder) / spec.key).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return segment_task(spec)


def users_task(release: str) -> str:
    """A task of the user's that runs until the file `release` exists."""
    deadline = time.monotonic() + 120
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "done"


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def wait_for_new_segment(scheduler, known: set[str], seconds: float = 60.0) -> str:
    """The key of a segment processing on `scheduler` that is not in `known` (waiting for one to start)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, task in list(scheduler.tasks.items()):
            if segment_key(key) and task.state == "processing" and segment_key(key) not in known:
                return segment_key(key)
        time.sleep(0.05)
    raise AssertionError(f"no new segment started within {seconds:.0f}s")


def test_a_second_run_of_this_process_on_a_store_in_use_is_refused_and_the_first_loses_nothing(cluster, tmp_path):
    _, client = cluster
    store = tmp_path / "shared.zarr"
    refusals = []

    def second_run(_client):  # called by the first run once its store is open, before its first segment
        with pytest.raises(StoreError) as refused:
            run_tournament(tiny(store, 1), client)
        refusals.append(str(refused.value))

    first = run_tournament(tiny(store, 2), client, on_start=second_run)
    assert refusals == [f"store '{store}' is in use: a run of this process holds it; wait for it to end, or give "
                        "another store (--store)"]
    assert first.segments_completed == 2 and first.stop_reason == "max_segments"
    history = PodracerStore(str(store)).read_history()
    assert [r["status"] for r in history] == ["finished", "finished"]
    assert PodracerStore(str(store)).read_run_state()["invocations"] == 1
    # once the first has ended, the store is free again: a later run of this process continues it
    later = run_tournament(tiny(store, 1), client)
    assert later.segments_completed == 1
    assert PodracerStore(str(store)).read_run_state()["invocations"] == 2


def test_the_page_lists_the_segments_of_its_own_run_only(cluster, tmp_path):
    local, client = cluster
    scheduler = local.scheduler
    release = tmp_path / "release"
    release.mkdir()
    held = functools.partial(held_until_released, str(release))
    ended = {}

    def run(name: str, segments: int) -> None:
        ended[name] = run_tournament(tiny(tmp_path / f"{name}.zarr", segments), client, segment_fn=held)

    first = threading.Thread(target=run, args=("first", 2), daemon=True)
    first.start()
    first_a = wait_for_new_segment(scheduler, set())
    second = threading.Thread(target=run, args=("second", 1), daemon=True)  # takes over the page
    second.start()
    second_only = wait_for_new_segment(scheduler, {first_a})
    (release / first_a).touch()  # the first run's next segment starts while the page is the second run's
    first_b = wait_for_new_segment(scheduler, {first_a, second_only})
    users = client.submit(users_task, str(release / "user"), key="segment-of-the-user")  # named like ours, not ours
    try:
        deadline = time.monotonic() + 30
        while getattr(scheduler.tasks.get("segment-of-the-user"), "state", None) != "processing":
            assert time.monotonic() < deadline, "the user's task never started"
            time.sleep(0.05)
        snapshot = current_snapshot_now(scheduler)  # the newest run going
        assert snapshot.store_url == str(tmp_path / "second.zarr")
        assert [r.key for r in snapshot.running] == [second_only]  # neither first_b nor the user's task
        assert snapshot.runs == (str(tmp_path / "first.zarr"), str(tmp_path / "second.zarr"))
        asked = current_snapshot_now(scheduler, str(tmp_path / "first.zarr"))  # a page's ?store=
        assert asked.store_url == str(tmp_path / "first.zarr") and [r.key for r in asked.running] == [first_b]
        # the second run ends while the first goes on: the page follows the run still going (it kept the second's)
        (release / second_only).touch()
        second.join(60)
        deadline = time.monotonic() + 30  # the scheduler forgets the ended run's tasks when the release arrives
        while (snapshot := current_snapshot_now(scheduler)).store_url != str(tmp_path / "first.zarr"):
            assert time.monotonic() < deadline, f"the page kept {snapshot.store_url} after its run ended"
            time.sleep(0.05)
        assert [r.key for r in snapshot.running] == [first_b]
        # the plain page, over HTTP: the run asked for, with a link to the other
        base = f"http://127.0.0.1:{scheduler.http_server.port}/podracer.html"
        page = get(f"{base}?store={urllib.parse.quote(str(tmp_path / 'second.zarr'), safe='')}")
        assert f"store: <code>{tmp_path / 'second.zarr'}</code>" in page
        assert f"<a href='?store={urllib.parse.quote(str(tmp_path / 'first.zarr'), safe='')}'>" in page
        assert "no run of this store on this scheduler" in get(f"{base}?store=elsewhere.zarr")
    finally:
        for key in (first_b, second_only, "user"):
            (release / key).touch()
        first.join(60)
        second.join(60)
    assert ended["first"].segments_completed == 2 and ended["second"].segments_completed == 1
    assert users.result() == "done"  # neither run's end touched the user's task


SECOND_CLIENT = """
import sys, time
from pathlib import Path
from dask_podracer.config import config_from_dict
from dask_podracer.population import run_tournament

def at_start(client):  # this run's preflight found the store free; it goes on once the test says so
    Path(sys.argv[2], "at-start").touch()
    while not Path(sys.argv[2], "go").exists():
        time.sleep(0.05)

config = config_from_dict({config!r})
try:
    run_tournament(config, scheduler=sys.argv[1], on_start=at_start)
    print("ran")
except ConfigError as e:
    print("refused:", e)
"""


def wait_for(path: Path, what: str, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.05)


def test_a_run_of_another_process_holding_the_store_refuses_one_of_this_process_at_once(cluster, tmp_path):
    """Both runs found the store free before either had written its run state (the lease alone let both run, each
    rewriting the tables from what it had read). The first to have created the store holds its lock from then on:
    this process's run stops in one line before it reads or submits anything, and the holder goes on."""
    local, client = cluster
    store = tmp_path / "shared.zarr"
    config = {**TINY, "tournament": {"pool_size": 1},
              "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "2m", "store": str(store),
                      "max_segments": 1}}
    script = tmp_path / "second.py"
    script.write_text(SECOND_CLIENT.format(config=config))
    second = subprocess.Popen([sys.executable, str(script), local.scheduler_address, str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        wait_for(tmp_path / "at-start", "the other client's start")  # its store created, its preflight passed
        assert PodracerStore(str(store)).read_run_state() == {}  # nothing in the store says a run is going
        with pytest.raises(StoreError, match=rf"^store '{store}' is in use: a run of process {second.pid} on .* "
                                             r"holds its run.lock; wait for it to end, or give another store"):
            run_tournament(config_from_dict(config), client)
        assert not client.processing() or not any(client.processing().values())  # nothing of this run submitted
        (tmp_path / "go").touch()
        out, _ = second.communicate(timeout=90)
    finally:
        second.kill()
    assert out.strip() == "ran"
    assert len(PodracerStore(str(store)).read_history()) == 1
    run_tournament(config_from_dict(config), client)  # the holder gone, the store is free again (resumed)
