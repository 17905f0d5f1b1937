"""The population views (lineage tree, tuned hyper-parameters) and the pool's devices: their data, `podracer plot
--view`, and the live Podracer page of a real embedded cluster."""

import functools
import threading
import time
from types import SimpleNamespace

import pytest
from helpers import segment_held_until

from dask_podracer.cli import main
from dask_podracer.dashboard.population import hparam_series, kind, lineage_graph, log_scale, staircase, tuned
from dask_podracer.store import PodracerStore


def rec(key, agent, parent, adopted, wall, score, actor_lr, status="finished"):
    return {"key": key, "agent": agent, "parent": parent, "adopted": adopted, "generation": 0 if parent is None else 1,
            "status": status, "score": score, "wall_seconds": wall, "lineage_env_steps": 100, "run_env_steps": 100,
            "hparams": {"actor_lr": actor_lr, "critic_lr": 0.001, "hidden": [32, 32], "pipeline": False}}


HISTORY = [
    rec("s0", 0, None, False, 1.0, -1500.0, 0.001),  # fresh starts
    rec("s1", 1, None, False, 2.0, -900.0, 0.002),
    rec("s2", 0, "s0", False, 3.0, -1400.0, 0.001),  # agent 0 trains on
    rec("s3", 1, "s1", False, 4.0, -700.0, 0.002, status="failed"),  # not drawn
    rec("s4", 0, "s1", True, 5.0, -800.0, 0.0025),  # agent 0 exploits agent 1's checkpoint, perturbed
]


def test_the_lineage_marks_fresh_starts_and_exploits():
    nodes, edges = lineage_graph(HISTORY)
    assert nodes["key"] == ["s0", "s1", "s2", "s4"]
    assert nodes["kind"] == ["fresh", "fresh", "continue", "exploit"]
    assert nodes["lane"] == [0, 1, 0, 0] and nodes["wall"] == [1.0, 2.0, 3.0, 5.0]
    # parent -> child, at (wall-clock, agent): the exploit crosses from agent 1's row to agent 0's
    assert edges == {"xs": [[1.0, 3.0], [2.0, 5.0]], "ys": [[0, 0], [1, 0]], "kind": ["continue", "exploit"]}
    assert [kind(r) for r in HISTORY] == ["fresh", "fresh", "continue", "continue", "exploit"]


def test_each_tuned_hyper_parameter_over_wall_clock_and_against_the_score():
    assert tuned(HISTORY) == ["actor_lr"]  # critic_lr never changed; lists and booleans are not plotted
    lines, points = hparam_series(HISTORY, "actor_lr")
    assert lines["agent"] == ["agent 0", "agent 1"]
    # agent 0: 0.001 for its segments ending at 1 s and 3 s, then 0.0025 for the one from 3 s to 5 s
    assert lines["xs"][0] == [1.0, 1.0, 3.0, 3.0, 5.0] and lines["ys"][0] == [0.001, 0.001, 0.001, 0.0025, 0.0025]
    assert points["score"] == [-1500.0, -900.0, -1400.0, -800.0] and points["value"] == [0.001, 0.002, 0.001, 0.0025]
    assert points["kind"] == ["fresh", "fresh", "continue", "exploit"]
    assert staircase([]) == ([], [])
    assert log_scale([1e-4, 3e-3]) and not log_scale([0.001, 0.0025]) and not log_scale([-1.0, 100.0])


def test_the_pool_shows_each_workers_device():
    from dask_podracer.dashboard.live import pool_columns
    from dask_podracer.dashboard.page import render_page
    from dask_podracer.dashboard.snapshot import Running, Snapshot
    from dask_podracer.population.monitor import worker_device

    cpu = SimpleNamespace(resources={"CPU": 1}, metrics={"cpu": 3.0}, extra={})
    gpu_no_nvml = SimpleNamespace(resources={"GPU": 1}, metrics={}, extra={})
    h100 = SimpleNamespace(resources={"GPU": 1}, metrics={"gpu_memory_used": 3 * 2**30, "gpu-memory-total": 80 * 2**30,
                                                          "gpu_utilization": 87},
                           extra={"gpu": {"name": "NVIDIA H100 80GB HBM3", "memory-total": 80 * 2**30}})
    assert worker_device(cpu) == {"device": "cpu"} and worker_device(gpu_no_nvml) == {"device": "cuda"}
    assert worker_device(h100) == {"device": "cuda: NVIDIA H100 80GB HBM3", "gpu_memory_used": 3 * 2**30,
                                   "gpu_memory_total": 80 * 2**30, "gpu_utilization": 87.0}
    running = [Running("s1", "tcp://a", 100.0, 0, {}, **worker_device(cpu)),
               Running("s2", "tcp://b", 101.0, 1, {}, **worker_device(h100))]
    columns = pool_columns(running, now=110.0)
    assert columns["device"] == ["cpu", "cuda: NVIDIA H100 80GB HBM3"]
    assert columns["gpu_memory"] == ["-", "3.0 / 80.0 GiB"] and columns["gpu_utilization"] == ["-", "87%"]
    page = render_page(Snapshot("/x.zarr", running=running, taken=110.0))
    assert "<td>cuda: NVIDIA H100 80GB HBM3</td><td>3.0 / 80.0 GiB</td><td>87%</td>" in page
    assert "<td>cpu</td><td>-</td><td>-</td>" in page


def test_podracer_plot_writes_the_population_views(tmp_path, capsys):
    from matplotlib.image import imread

    store = PodracerStore(tmp_path / "s.zarr", create=True)
    store.extend_history(HISTORY)
    html = tmp_path / "population.html"
    assert main(["plot", store.url, "--out", str(html), "--view", "population"]) == 0
    page = html.read_text()
    assert "podracer-lineage" in page and "podracer-hparam-actor_lr" in page and "podracer-score-vs-actor_lr" in page
    assert "podracer-hparam-critic_lr" not in page and "cdn.bokeh.org" not in page
    png = tmp_path / "all.png"
    assert main(["plot", store.url, "--out", str(png), "--view", "all"]) == 0
    assert imread(png).shape[:2] == (1350, 1200)  # curves, lineage, one tuned hyper-parameter: 3 rows of 4.5 in
    assert main(["plot", store.url, "--out", str(tmp_path / "lineage.png"), "--view", "lineage"]) == 0
    assert imread(tmp_path / "lineage.png").shape[:2] == (450, 1200)
    empty = PodracerStore(tmp_path / "e.zarr", create=True)
    assert main(["plot", empty.url, "--out", str(html), "--view", "lineage"]) == 2
    assert "no finished segment" in capsys.readouterr().err


def test_the_live_view_rebuilds_its_hyper_parameter_rows_only_when_the_tuned_ones_change():
    from dask_podracer.dashboard.live import PodracerView
    from dask_podracer.dashboard.snapshot import Snapshot

    view = PodracerView(("lineage", "hparams"))
    view.update(Snapshot("/x.zarr", history=HISTORY[:2]))
    rows = view.hparams.children
    assert [[f.name for f in r.children] for r in rows] == [["podracer-hparam-actor_lr", "podracer-score-vs-actor_lr"]]
    view.update(Snapshot("/x.zarr", history=HISTORY))
    assert view.hparams.children == rows  # same rows, new data
    assert view.hparam_sources["actor_lr"][1].data["value"] == [0.001, 0.002, 0.001, 0.0025]
    assert view.nodes.data["kind"] == ["fresh", "fresh", "continue", "exploit"]
    wide = [*HISTORY, rec("s9", 1, "s1", False, 6.0, -600.0, 0.05)]  # now spread over 50x: a log axis, new rows
    view.update(Snapshot("/x.zarr", history=wide))
    assert view.hparams.children != rows
    assert view.hparams.children[0].children[0].y_scale.__class__.__name__ == "LogScale"


@pytest.mark.slow
def test_the_live_page_shows_the_lineage_and_the_hyper_parameters(tmp_path):
    from distributed import Client
    from test_dashboard import TINY, live

    from dask_podracer.config import ClusterConfig, config_from_dict
    from dask_podracer.population import embedded_cluster, run_tournament

    store_path = tmp_path / "population.zarr"
    config = config_from_dict({  # fresh agents draw different actor_lr; segments of 2 s
        **TINY, "run": {**TINY["run"], "store": str(store_path), "max_segments": 4, "seed": 4},
        "segment": {**TINY["segment"], "env_steps": 0, "seconds": 2.0},
        "search": {"actor_lr": {"log_uniform": [1e-4, 3e-3]}}})
    with embedded_cluster(ClusterConfig(workers=2, dashboard_address="127.0.0.1:0")) as cluster, \
            Client(cluster) as client:
        base = f"http://127.0.0.1:{client.scheduler_info()['services']['dashboard']}"
        # the first two segments wait on their workers until the page has been seen to show both
        release = tmp_path / "release"
        held = functools.partial(segment_held_until, str(release))
        run = threading.Thread(target=run_tournament, args=(config, client), kwargs={"segment_fn": held},
                               daemon=True)
        run.start()
        deadline = time.monotonic() + 120
        try:
            while len((pool := live(f"{base}/individual-podracer-pool")["pool"])["key"]) < 2:
                assert run.is_alive() and time.monotonic() < deadline, f"the pool never showed two segments: {pool}"
                time.sleep(0.3)
        finally:
            release.touch()
        assert pool["device"] == ["cpu", "cpu"]  # this machine's workers have no GPU: the CPU, no GPU figures
        assert pool["gpu_memory"] == ["-", "-"] and pool["gpu_utilization"] == ["-", "-"]
        run.join(timeout=120)
        assert not run.is_alive()

        history = PodracerStore(store_path).read_history()
        finished = [r for r in history if r["status"] == "finished"]
        names = tuned(history)
        assert "actor_lr" in names
        deadline = time.monotonic() + 120  # the page reads the store at most once a second; a loaded machine is slower
        while True:
            docs = {part: pull(f"{base}/individual-podracer{part}") for part in ("", "-lineage", "-hparams")}
            if docs[""]["nodes"] and len(docs[""]["nodes"]["key"]) == len(finished):
                break
            assert time.monotonic() < deadline, docs[""]["nodes"]
            time.sleep(0.5)
    for part in ("", "-lineage"):
        nodes = docs[part]["nodes"]
        assert nodes["key"] == [r["key"] for r in finished]
        assert nodes["kind"] == ["fresh" if r["parent"] is None else "exploit" if r["adopted"] else "continue"
                                 for r in finished]
        assert nodes["score"] == [r["score"] for r in finished]
    assert docs["-lineage"]["hparams"] == {} and docs["-hparams"]["nodes"] is None
    for part in ("", "-hparams"):
        assert sorted(docs[part]["hparams"]) == names
        for name in names:
            points = docs[part]["hparams"][name]
            have = [r for r in finished if name in r["hparams"]]
            assert points["value"] == [r["hparams"][name] for r in have]
            assert points["score"] == [r["score"] for r in have]
            assert points["agent"] == [f"agent {r['agent']}" for r in have]


def pull(url: str) -> dict:
    """The population views of a live page's document, as a fresh browser session receives it."""
    from bokeh.client import pull_session
    from bokeh.models import Plot

    with pull_session(url=url) as session:
        doc = session.document
        lineage = doc.select_one({"name": "podracer-lineage"})
        nodes = next((dict(r.data_source.data) for r in lineage.renderers if "lane" in r.data_source.data), None) \
            if lineage else None
        hparams = {}
        for fig in doc.select({"type": Plot}):
            if fig.name and fig.name.startswith("podracer-score-vs-"):
                hparams[fig.name.removeprefix("podracer-score-vs-")] = dict(fig.renderers[0].data_source.data)
                assert doc.select_one({"name": fig.name.replace("score-vs", "hparam")}) is not None
        return {"nodes": nodes, "hparams": hparams}
