"""The policy lag of actor-learner segments on the Podracer pages: its data from history records, the live view's
section (shown only once a segment reports a lag) and the plain page's table."""

from dask_podracer.dashboard.live import PodracerView
from dask_podracer.dashboard.page import render_page
from dask_podracer.dashboard.policy_lag import lag_columns, lag_table_html
from dask_podracer.dashboard.snapshot import Snapshot


def rec(key, agent, wall, lag=None, status="finished", joined=2, lost=0):
    """A history record; `lag` (median, p95, max) as an actor-learner segment's learner reports it."""
    metrics = {"loss": 0.5}
    if lag is not None:
        metrics.update(policy_lag_median=lag[0], policy_lag_p95=lag[1], policy_lag_max=lag[2],
                       actors_joined=float(joined), actors_lost=float(lost))
    return {"key": key, "agent": agent, "parent": None, "adopted": False, "generation": 0, "status": status,
            "score": 100.0 + wall, "wall_seconds": wall, "lineage_env_steps": 100, "run_env_steps": 100,
            "hparams": {"learning_rate": 0.002}, "metrics": metrics}


ONE_TASK = [rec("s0", 0, 1.0), rec("s1", 1, 2.0)]  # a run without [actors]: no lag anywhere
ACTORS = [rec("s0", 0, 10.0, (1.0, 3.0, 4.0)), rec("s1", 1, 12.0, (2.0, 4.0, 9.0), lost=1),
          rec("s2", 0, 15.0, (0.0, 2.0, 2.0), status="failed"),  # a failed segment: not drawn
          rec("s3", 1, 20.0, (1.5, 3.0, 5.0), joined=3)]


def test_one_row_per_finished_segment_that_reports_its_policy_lag():
    assert lag_columns(ONE_TASK) == {c: [] for c in ("key", "agent", "wall", "median", "p95", "max", "actors_joined",
                                                      "actors_lost")}
    columns = lag_columns([*ONE_TASK, *ACTORS])
    assert columns["key"] == ["s0", "s1", "s3"] and columns["agent"] == ["agent 0", "agent 1", "agent 1"]
    assert columns["wall"] == [10.0, 12.0, 20.0]
    assert (columns["median"], columns["p95"], columns["max"]) == ([1.0, 2.0, 1.5], [3.0, 4.0, 3.0], [4.0, 9.0, 5.0])
    assert columns["actors_joined"] == [2, 2, 3] and columns["actors_lost"] == [0, 1, 0]


def test_the_live_view_shows_the_policy_lag_only_for_runs_with_actors():
    view = PodracerView()
    view.update(Snapshot("/x.zarr", history=ONE_TASK))
    assert not view.lag_section.visible and not view.no_lag.visible  # the whole page: nothing of lag at all
    view.update(Snapshot("/x.zarr", history=ACTORS))
    assert view.lag_section.visible
    assert view.lag.data["max"] == [4.0, 9.0, 5.0] and view.lag.data["key"] == ["s0", "s1", "s3"]
    figure = view.lag_section.children[1]
    assert figure.name == "podracer-policy-lag"
    # a line from median to max and a mark per statistic, all drawn from the one source
    assert {r.glyph.__class__.__name__ for r in figure.renderers} == {"Segment", "Scatter"}
    assert all(r.data_source is view.lag for r in figure.renderers)
    assert [item.label["value"] for item in figure.legend[0].items] == ["median", "p95", "max"]

    panel = PodracerView(("lag",))  # the lag panel of its own says why it is empty
    panel.update(Snapshot("/x.zarr", history=ONE_TASK))
    assert panel.no_lag.visible and not panel.lag_section.visible
    panel.update(Snapshot("/x.zarr", history=ACTORS))
    assert not panel.no_lag.visible and panel.lag_section.visible


def test_the_plain_page_lists_the_newest_actor_learner_segments():
    assert lag_table_html(ONE_TASK) == ""
    assert "Policy lag" not in render_page(Snapshot("/x.zarr", history=ONE_TASK))
    page = render_page(Snapshot("/x.zarr", history=[*ONE_TASK, *ACTORS]))
    assert "<h2>Policy lag of actor-learner segments" in page
    rows = page.split("<table class='policy-lag'>")[1].split("</table>")[0].split("<tr>")[2:]
    assert len(rows) == 3 and "s3" in rows[0] and "s0" in rows[2]  # newest first
    assert "<td>1.5</td><td>3</td><td>5</td><td>3</td><td>0</td>" in rows[0]
    assert lag_table_html(ACTORS, rows=1).count("<tr>") == 2  # header and the newest
