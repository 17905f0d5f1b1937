"""Learning curves from a store's history."""

import subprocess
import sys

from dask_podracer.dashboard import curves
from dask_podracer.store import PodracerStore

HISTORY = [
    {"status": "finished", "agent": 0, "score": -1200.0, "wall_seconds": 5.0, "run_env_steps": 1000},
    {"status": "finished", "agent": 1, "score": -900.0, "wall_seconds": 6.0, "run_env_steps": 2000},
    {"status": "failed", "agent": 0, "score": None, "wall_seconds": 7.0, "run_env_steps": 2000},
    {"status": "finished", "agent": 0, "score": -1000.0, "wall_seconds": 9.0, "run_env_steps": 3000},
]


def test_curves_per_agent_and_best_so_far():
    series = curves(HISTORY)
    assert series["agent 0"] == {"wall_seconds": [5.0, 9.0], "env_steps": [1000.0, 3000.0], "score": [-1200.0, -1000.0]}
    assert series["best"]["score"] == [-1200.0, -900.0, -900.0]


def _plot(store_url: str, out) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dask_podracer.cli", "plot", store_url, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)


def _store_with_history(tmp_path) -> PodracerStore:
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    store.extend_history(HISTORY)
    return store


def test_cli_writes_a_standalone_html_page(tmp_path):
    store = _store_with_history(tmp_path)
    out = tmp_path / "curves.html"
    run = _plot(store.url, out)
    assert run.returncode == 0, run.stderr
    page = out.read_text()
    assert "episodic reward vs wall-clock seconds" in page and "episodic reward vs env steps" in page
    assert "cdn.bokeh.org" not in page  # inline resources: opens without a network
    bad = _plot(store.url, "x.svg")
    assert bad.returncode == 2 and "must end in .html or .png" in bad.stderr


def test_cli_writes_both_curves_as_a_png(tmp_path):
    from matplotlib.image import imread

    out = tmp_path / "curves.png"
    run = _plot(_store_with_history(tmp_path).url, out)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"wrote {out}"
    image = imread(out)
    assert image.shape[:2] == (450, 1200)  # two panels side by side, 12 x 4.5 inches at 100 dpi
    rgb = image[..., :3]
    assert ((rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.3).sum() > 200  # the agents' coloured points and lines


def test_the_live_page_draws_one_colour_per_agent_and_the_best_so_far():
    from dask_podracer.dashboard.live import curve_columns

    points, lines, best = curve_columns(HISTORY)
    assert points["agent"] == ["agent 0", "agent 0", "agent 1"] and points["score"] == [-1200.0, -1000.0, -900.0]
    assert points["steps"] == [1000.0, 3000.0, 2000.0] and len(set(points["color"])) == 2
    assert lines["agent"] == ["agent 0", "agent 1"] and lines["wall_xs"] == [[5.0, 9.0], [6.0]]
    assert best == {"wall": [5.0, 6.0, 9.0], "steps": [1000.0, 2000.0, 3000.0], "score": [-1200.0, -900.0, -900.0]}


def test_the_pool_shows_what_differs_between_the_agents_first():
    from dask_podracer.dashboard.live import pool_columns
    from dask_podracer.dashboard.page import render_page
    from dask_podracer.dashboard.snapshot import Running, Snapshot

    running = [Running("s000005-b", "tcp://127.0.0.1:2", 110.0, 1, {"batch_size": 64, "critic_lr": 0.002}),
               Running("s000004-a", "tcp://127.0.0.1:1", 100.0, 0, {"batch_size": 64, "critic_lr": 0.001})]
    columns = pool_columns(running, now=130.0)
    assert columns["key"] == ["s000004-a", "s000005-b"] and columns["agent"] == ["0", "1"]  # longest-running first
    assert columns["seconds"] == [30.0, 20.0] and columns["worker"] == ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]
    assert columns["hparams"] == ["critic_lr=0.001, batch_size=64", "critic_lr=0.002, batch_size=64"]
    page = render_page(Snapshot("/runs/x.zarr", running=running, taken=130.0))
    assert "<td>30 s</td>" in page and "critic_lr=0.002, batch_size=64" in page
    assert "no tournament has run" in render_page(Snapshot(None))
