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


def test_cli_writes_a_standalone_html_page(tmp_path):
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    store.extend_history(HISTORY)
    out = tmp_path / "curves.html"
    run = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "plot", store.url, "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    page = out.read_text()
    assert "episodic reward vs wall-clock seconds" in page and "episodic reward vs env steps" in page
    assert "cdn.bokeh.org" not in page  # inline resources: opens without a network
    bad = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "plot", store.url, "--out", "x.svg"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "must end in .html or .png" in bad.stderr
