"""The Podracer pages on what real runs produce: many agents, `[[groups]]` runs, checkpoints recovered without their
agent. Stores are real Zarr stores, read the way the scheduler plugin reads them."""

import random
import time

from dask_podracer.config import config_from_dict
from dask_podracer.dashboard.live import NO_TUNED, PodracerView
from dask_podracer.dashboard.page import render_page
from dask_podracer.dashboard.population import lineage_graph, tuned
from dask_podracer.dashboard.snapshot import Snapshot
from dask_podracer.population.monitor import PodracerPage
from dask_podracer.store import PodracerStore


def rec(key, agent, wall, hparams=None, group="sac", parent=None, status="finished", score=None):
    """A history record as the orchestrator writes it."""
    return {"key": key, "agent": agent, "group": group, "parent": parent, "adopted": False if parent else None,
            "generation": 0 if parent is None else 1, "hparams": hparams or {"actor_lr": 0.001}, "status": status,
            "score": (score if score is not None else -wall) if status == "finished" else None, "rank": None,
            "segment_env_steps": 100, "lineage_env_steps": 100, "run_env_steps": int(100 * wall),
            "wall_seconds": wall, "metrics": {}, "error": None if status == "finished" else "SegmentError: x"}


def snapshot_of(tmp_path, history, name="s.zarr"):
    """What the pages are handed for a real store holding `history`."""
    store = PodracerStore(tmp_path / name, create=True)
    store.extend_history(history)
    tables = PodracerPage(store.url).read_tables()
    assert tables.error is None
    return Snapshot(store.url, tables.board, tables.history, [], tables.error)


def test_the_plain_page_of_300_agents_draws_each_curve_from_one_renderer(tmp_path):
    # it was one scatter (and legend entry) per agent: 9 s to render 300 agents, on the scheduler's event loop,
    # every 5 s while the page is open
    rng = random.Random(0)
    history = [rec(f"s{i:06d}-a", i % 300, float(i), score=rng.gauss(-500.0, 100.0)) for i in range(600)]
    page = render_page(snapshot_of(tmp_path, history))
    # two curves (the agents' points and the best so far, each) and the lineage (edges and nodes)
    assert page.count('"name":"GlyphRenderer"') == 2 * 2 + 2
    assert "agent 299" in page and "agent 0" in page


def test_a_checkpoint_recovered_without_its_agent_gets_a_row_of_its_own(tmp_path):
    # the orchestrator records a checkpoint it recovers after a crash with agent None when no saved state knew it
    history = [rec("s000001-a", 1, 1.0), rec("s000002-b", None, 2.0)]
    nodes, _ = lineage_graph(snapshot_of(tmp_path, history).history)
    assert nodes["lane"][0] == 1 and nodes["lane"][1] not in (0, 1)  # it was drawn on agent 1's row
    assert nodes["agent"] == ["agent 1", "agent ?"]  # not "agent None"
    view = PodracerView(("curves",))
    view.update(snapshot_of(tmp_path, history, "t.zarr"))
    assert view.lines.data["agent"] == ["agent 1", "agent ?"]


def test_a_groups_run_tunes_only_what_differs_within_a_group(tmp_path):
    config = config_from_dict({"run": {"env": "Pendulum-v1", "budget": "1m", "store": str(tmp_path / "c.zarr")},
                               "groups": [{"algorithm": "sac"}, {"algorithm": "ppo"}]})
    sac, ppo = (dict(group.hparams) for group in config.groups)
    history = [rec("s000001-a", 0, 1.0, sac, "sac"), rec("s000002-b", 1, 2.0, ppo, "ppo"),
               rec("s000003-c", 0, 3.0, sac, "sac", parent="s000001-a")]
    # sac's and ppo's defaults differ (gamma, num_envs) but no search moved them: nothing is tuned
    view = PodracerView(("hparams",))
    view.update(snapshot_of(tmp_path, history))
    assert tuned(history) == [] and view.hparams.children[0].text == NO_TUNED
    perturbed = [*history, rec("s000004-d", 0, 4.0, {**sac, "actor_lr": 2 * sac["actor_lr"]}, "sac",
                               parent="s000003-c")]
    view.update(snapshot_of(tmp_path, perturbed, "p.zarr"))
    assert tuned(perturbed) == ["actor_lr"]
    rows = [[f.name for f in r.children] for r in view.hparams.children]
    assert rows == [["podracer-hparam-actor_lr", "podracer-score-vs-actor_lr"]]


def test_a_refresh_that_finds_the_history_unchanged_does_not_redraw_its_views(tmp_path):
    # every open page refreshes every 2 s on the scheduler's event loop: recomputing the curves, lineage and
    # hyper-parameters of a long run's unchanged history took 0.55 s of each 2 s (20,000 segments, 300 agents)
    rng = random.Random(1)
    history = [rec(f"s{i:06d}-a", i % 300, float(i), {"actor_lr": 10 ** rng.uniform(-4, -2)},
                   score=rng.gauss(-500.0, 100.0)) for i in range(6000)]
    snapshot = snapshot_of(tmp_path, history)
    view = PodracerView()
    started = time.perf_counter()
    view.update(snapshot)
    first = time.perf_counter() - started
    again = []
    for _ in range(3):  # the same tables read again: equal lists, new objects
        reread = Snapshot(snapshot.store_url, [dict(e) for e in snapshot.board], [dict(r) for r in snapshot.history])
        started = time.perf_counter()
        view.update(reread)
        again.append(time.perf_counter() - started)
    assert min(again) < first / 5, (first, again)
    grown = [*history, rec("s999999-z", 0, 7000.0, {"actor_lr": 0.5}, score=0.0)]
    view.update(Snapshot(snapshot.store_url, snapshot.board, grown))  # a new segment: redrawn
    assert view.points.data["score"].count(0.0) == 1 and len(view.nodes.data["key"]) == 6001


def test_podracer_plot_of_300_agents_drops_the_legend_and_draws_them_together(tmp_path):
    # one renderer and legend entry per agent: `podracer plot --out curves.html` took 29 s for 300 agents, and the
    # PNG's 300-entry legend ran over the right-hand plot and off the image
    from dask_podracer.dashboard import curves
    from dask_podracer.dashboard.plots import curve_figures, draw_curves, new_figure
    from dask_podracer.dashboard.population_plots import draw_lineage

    rng = random.Random(2)
    many = curves([rec(f"s{i:06d}-a", i % 300, float(i), score=rng.gauss(-500.0, 100.0)) for i in range(600)])
    few = curves([rec(f"s{i:06d}-a", i % 3, float(i)) for i in range(6)])
    wall, _ = curve_figures(many, "t")
    assert len(wall.renderers) == 3  # every agent's lines, every agent's points, the best so far
    assert [item.label["value"] for item in wall.legend[0].items] == ["best so far"]
    wall, _ = curve_figures(few, "t")  # a few agents keep an entry each, a click hides one
    assert len(wall.legend[0].items) == 4
    for data, entries in ((many, ["best so far"]), (few, ["agent 0", "agent 1", "agent 2", "best so far"])):
        axes = new_figure((12, 4.5)).subplots(1, 2)
        draw_curves(axes, data, "t")
        assert [text.get_text() for text in axes[1].get_legend().get_texts()] == entries
    lineage = new_figure((12, 4.5)).subplots()
    draw_lineage(lineage, [rec(f"s{i:06d}-a", i, float(i)) for i in range(300)], "t")
    assert len(lineage.get_yticks()) < 30  # not a label per agent, 300 overlapping


def test_the_plain_page_is_rendered_off_the_schedulers_event_loop(tmp_path, monkeypatch):
    """Rendered on the loop, a page of 20,000 segments (1.6-2.1 s) stopped the scheduler for as long at each reload
    of each open tab: a round trip to it took 1.82 s during one load, 0.02 s with the page rendered in a thread."""
    import threading
    import urllib.request

    from distributed import Client, LocalCluster

    from dask_podracer.population import monitor

    rendered_on = []

    def render_page_noting_its_thread(snapshot):  # calls through: the page is the real one
        rendered_on.append(threading.get_ident())
        return render_page(snapshot)

    monkeypatch.setattr(monitor, "render_page", render_page_noting_its_thread)
    store = PodracerStore(str(tmp_path / "s.zarr"), create=True)
    store.extend_history([rec(f"s{i:06d}-a", i % 3, 1.0 + i, score=-100.0 - i) for i in range(6)])
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1", scheduler_port=0,
                      dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster) as client:
        client.register_plugin(PodracerPage(store.url), name=PodracerPage.name)
        base = f"http://127.0.0.1:{client.scheduler_info()['services']['dashboard']}"
        with urllib.request.urlopen(f"{base}/podracer.html", timeout=60) as response:
            page = response.read().decode()
        loop_thread = client.run_on_scheduler(threading.get_ident)
    assert "s000005-a" in page and len(rendered_on) == 1
    assert rendered_on[0] != loop_thread


def test_the_live_page_computes_a_long_historys_views_off_the_schedulers_event_loop(tmp_path, monkeypatch):
    """The live page is served from the scheduler's event loop: a long run's curves, lineage and hyper-parameter
    views (20,000 segments: 0.1-0.3 s idle, 0.3-0.9 s under load) stopped the scheduler for as long at each page
    opened and whenever records arrived, for each open page. They are computed in a thread now."""
    import threading

    from bokeh.client import pull_session
    from distributed import Client, LocalCluster

    from dask_podracer.dashboard import live

    computed_on = []
    history_views = PodracerView.history_views

    def history_views_noting_its_thread(self, history):  # calls through: the views are the real ones
        computed_on.append(threading.get_ident())
        return history_views(self, history)

    monkeypatch.setattr(PodracerView, "history_views", history_views_noting_its_thread)
    monkeypatch.setattr(live, "DRAWN_WITH_THE_PAGE", 3)  # the six records below are a long history, as 20,000 are
    store = PodracerStore(str(tmp_path / "s.zarr"), create=True)
    store.extend_history([rec(f"s{i:06d}-a", i % 3, 1.0 + i, score=-100.0 - i) for i in range(6)])
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1", scheduler_port=0,
                      dashboard_address="127.0.0.1:0",
                      scheduler_kwargs={"preload": ["dask_podracer.population.dashboard_preload"]}) as cluster, \
            Client(cluster) as client:
        client.register_plugin(PodracerPage(store.url), name=PodracerPage.name)
        url = f"http://127.0.0.1:{client.scheduler_info()['services']['dashboard']}/individual-podracer-curves"
        deadline = time.monotonic() + 60
        with pull_session(url=url) as session:
            while len(computed_on) < 2:  # the first draw, then a refresh 2 s later
                assert time.monotonic() < deadline, computed_on
                time.sleep(0.2)
            session.request_server_info()  # a round trip: the page's changes sent before it reach this copy
            figure = session.document.select_one({"name": "podracer-reward-vs-wall"})
            points = [dict(r.data_source.data) for r in figure.renderers if "agent" in r.data_source.data
                      and "score" in r.data_source.data]  # the segments' points (not the agents' lines or the best)
        loop_thread = client.run_on_scheduler(threading.get_ident)
    assert loop_thread not in computed_on
    assert [sorted(p["score"]) for p in points] == [[-105.0, -104.0, -103.0, -102.0, -101.0, -100.0]], points
