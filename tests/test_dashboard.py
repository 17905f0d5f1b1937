"""The Podracer pages of the Dask dashboard, on real clusters: the live Bokeh page and the plain fallback.

The live page is a Bokeh server app: its content comes over a websocket, so the tests pull
the live document with `bokeh.client.pull_session`, as a browser would get it.
"""

import contextlib
import functools
import json
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest
from bokeh.client import pull_session
from distributed import Client
from helpers import segment_held_until

from dask_podracer.config import ClusterConfig, config_from_dict
from dask_podracer.population import embedded_cluster, run_tournament
from dask_podracer.store import PodracerStore

pytestmark = pytest.mark.slow

TINY = {  # tests/test_tournament.py's tiny SAC tournament
    "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "max_segments": 2, "seed": 1},
    "tournament": {"leaderboard_size": 3, "fresh_agents": 2, "perturb": ["actor_lr", "critic_lr"]},
    "segment": {"env_steps": 200, "eval_episodes": 3},
    "hparams": {"hidden": [32, 32], "num_envs": 2, "learning_starts": 100, "batch_size": 64},
}
PAGES = {"Individual Podracer": "/individual-podracer",
         "Individual Podracer Leaderboard": "/individual-podracer-leaderboard",
         "Individual Podracer Pool": "/individual-podracer-pool",
         "Individual Podracer Curves": "/individual-podracer-curves",
         "Individual Podracer Lag": "/individual-podracer-lag"}


def tiny_config(store, segment=None, **run):
    return config_from_dict({**TINY, "run": {**TINY["run"], "store": str(store), **run},
                             "segment": {**TINY["segment"], **(segment or {})}})


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def live(url: str, **arguments: str) -> dict:
    """What the live page's document holds now, as a fresh browser session would receive it (`arguments`: the
    page's query, `?store=`)."""
    with pull_session(url=url, arguments=arguments or None) as session:
        doc = session.document
        board, pool = (doc.select_one({"name": f"podracer-{name}"}) for name in ("leaderboard", "pool"))
        figures = [doc.select_one({"name": f"podracer-reward-vs-{x}"}) for x in ("wall", "steps")]
        return {"header": doc.select_one({"name": "podracer-header"}).text,
                "board": dict(board.source.data) if board else None,
                "pool": dict(pool.source.data) if pool else None,
                "figures": [f for f in figures if f is not None],
                "points": [dict(r.data_source.data) for f in figures if f for r in f.renderers
                           if "score" in r.data_source.data and "agent" in r.data_source.data]}


@pytest.fixture(scope="module")
def embedded():
    """`podracer train`'s own embedded LocalCluster, which preloads the live page."""
    with embedded_cluster(ClusterConfig(workers=2, dashboard_address="127.0.0.1:0")) as cluster, \
            Client(cluster) as client:
        yield client, f"http://127.0.0.1:{client.scheduler_info()['services']['dashboard']}"


def test_the_embedded_cluster_lists_the_live_pages_for_dask_labextension(embedded):
    _, base = embedded
    listed = json.loads(get(f"{base}/individual-plots.json"))
    assert {name: listed.get(name) for name in PAGES} == PAGES
    # each panel is its own Bokeh app, with only its part
    assert live(f"{base}/individual-podracer-curves")["board"] is None
    assert len(live(f"{base}/individual-podracer-curves")["figures"]) == 2
    pool_only = live(f"{base}/individual-podracer-pool")
    assert pool_only["pool"] is not None and pool_only["board"] is None and not pool_only["figures"]
    with pull_session(url=f"{base}/individual-podracer-lag") as session:  # no run with [actors]: the figure hidden
        assert not session.document.select_one({"name": "podracer-policy-lag-section"}).visible


def test_the_live_page_shows_the_training_pool_then_the_leaderboard(embedded, tmp_path):
    client, base = embedded
    store_path = tmp_path / "live.zarr"
    config = tiny_config(store_path, segment={"env_steps": 0, "seconds": 2.0})
    # both segments wait on their workers until the page has been seen to show them where they run
    release = tmp_path / "release"
    held = functools.partial(segment_held_until, str(release))
    run = threading.Thread(target=run_tournament, args=(config, client), kwargs={"segment_fn": held}, daemon=True)
    run.start()
    deadline = time.monotonic() + 120
    try:
        while True:
            processing = {key.removeprefix("segment-"): worker for worker, keys in client.processing().items()
                          for key in keys}
            page = live(f"{base}/individual-podracer")
            pool = page["pool"]
            shown = dict(zip(pool["key"], pool["worker"], strict=True))  # which segment runs where
            if len(pool["key"]) == 2 and "-" not in pool["agent"] and "2 training" in page["header"] \
                    and shown == processing:
                break
            assert run.is_alive() and time.monotonic() < deadline, \
                f"the pool never showed both segments where they run: {pool} against {processing}"
            time.sleep(0.3)
    finally:
        release.touch()
    assert sorted(pool["agent"]) == ["0", "1"]
    assert all("actor_lr=" in h and "critic_lr=" in h for h in pool["hparams"])  # with which hyper-parameters
    assert all(s.count(":") == 2 for s in pool["since"]) and all(0 <= s < 60 for s in pool["seconds"])
    assert str(store_path) in page["header"]
    run.join(timeout=120)
    assert not run.is_alive()

    store = PodracerStore(store_path)
    board_keys = [entry["key"] for entry in store.read_leaderboard()]
    deadline = time.monotonic() + 120  # the page reads the store at most once a second; a loaded machine is slower
    while (page := live(f"{base}/individual-podracer"))["board"]["key"] != board_keys:
        assert time.monotonic() < deadline, f"{page['board']['key']} != {board_keys}"
        time.sleep(0.5)
    assert len(board_keys) == 2 and page["pool"]["key"] == []
    assert page["board"]["score"] == [entry["score"] for entry in store.read_leaderboard()]
    finished = [r for r in store.read_history() if r["status"] == "finished"]
    assert len(page["points"]) == 2
    for points in page["points"]:  # both figures: one point per finished segment, coloured by agent
        assert sorted(points["score"]) == sorted(r["score"] for r in finished)
        assert sorted(set(points["agent"])) == ["agent 0", "agent 1"]


def test_the_live_page_shows_the_run_its_query_names_and_links_to_the_others(embedded, tmp_path):
    # runs sharing a scheduler each keep their page: the newest is the default, `?store=` picks another
    client, base = embedded
    first, second = tmp_path / "first.zarr", tmp_path / "second.zarr"
    for store_path in (first, second):
        run_tournament(tiny_config(store_path, max_segments=1), client)
    second_board = [e["key"] for e in PodracerStore(second).read_leaderboard()]
    deadline = time.monotonic() + 60  # the page reads a store at most once a second: an open page's read may be older
    while (page := live(f"{base}/individual-podracer"))["board"]["key"] != second_board:
        assert time.monotonic() < deadline, f"{page['board']['key']} != {second_board}"
        time.sleep(0.5)
    assert f"store <code>{second}</code>" in page["header"]
    assert f"<a href='?store={urllib.parse.quote(str(first), safe='')}'>{first}</a>" in page["header"]
    assert f"<b>{second}</b>" in page["header"]
    asked = live(f"{base}/individual-podracer", store=str(first))
    assert f"store <code>{first}</code>" in asked["header"]
    assert asked["board"]["key"] == [e["key"] for e in PodracerStore(first).read_leaderboard()] != []
    assert "no run of this store on this scheduler" in live(f"{base}/individual-podracer", store="x.zarr")["header"]


@contextlib.contextmanager
def dask_cluster(tmp_path, *, preload: bool, workers: int):
    """A real `dask scheduler` process on 127.0.0.1 (with or without the preload) and `dask worker`s."""
    scheduler_file = tmp_path / f"scheduler-{preload}.json"
    command = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
               "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(scheduler_file)]
    if preload:
        command += ["--preload", "dask_podracer.population.dashboard_preload"]
    processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 90
        while not scheduler_file.exists():
            assert processes[0].poll() is None and time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.2)
        for _ in range(workers):
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file),
                 "--nthreads", "1", "--resources", "CPU=1", "--no-dashboard", "--host", "127.0.0.1"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(scheduler_file=str(scheduler_file), timeout="60s") as client:
            if workers:
                client.wait_for_workers(workers, timeout=90)
            yield client, f"http://127.0.0.1:{client.scheduler_info()['services']['dashboard']}"
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=60)


def test_a_dask_scheduler_started_with_the_preload_serves_the_live_page(tmp_path):
    with dask_cluster(tmp_path, preload=True, workers=0) as (_, base):
        listed = json.loads(get(f"{base}/individual-plots.json"))
        assert {name: listed.get(name) for name in PAGES} == PAGES
        page = live(f"{base}/individual-podracer")
        assert "no tournament has run on this scheduler yet" in page["header"] and page["board"]["key"] == []


def test_without_the_preload_the_plain_page_takes_its_place(tmp_path):
    with dask_cluster(tmp_path, preload=False, workers=1) as (client, base):
        store_path = tmp_path / "plain.zarr"
        run_tournament(tiny_config(store_path), client)
        board = PodracerStore(store_path).read_leaderboard()
        assert "Individual Podracer" not in json.loads(get(f"{base}/individual-plots.json"))
        for route in ("/individual-podracer", "/podracer.html"):
            page = get(f"{base}{route}")
            assert "Leaderboard" in page and "Training pool" in page
            assert len(board) == 2 and all(entry["key"] in page for entry in board)
            assert "episodic reward vs wall-clock time" in page.lower()
