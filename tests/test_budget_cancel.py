"""A budget that ends before any segment does: the run says how many segments it cancelled, and why nothing is on
its leaderboard (it said only "0 segments (0 failed)")."""

from __future__ import annotations

import time
from pathlib import Path

from distributed import Client, LocalCluster

from dask_podracer.cli import _print_summary
from dask_podracer.config import config_from_dict
from dask_podracer.population import orchestrator, run_tournament


def never_ends(spec):
    """A segment that outlasts any budget here (its first iteration, as with a huge model or a slow env)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not Path(spec.store_url, "release").exists():
        time.sleep(0.05)
    raise RuntimeError("released")


def test_segments_cancelled_at_the_budget_are_counted_and_said(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(orchestrator, "BUDGET_GRACE_SECONDS", 0.5)
    store = tmp_path / "s.zarr"
    config = config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3s", "store": str(store)},
                               "tournament": {"pool_size": 1}, "hparams": {"hidden": [8]}})
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://", host="127.0.0.1",
                      scheduler_port=0,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        try:
            summary = run_tournament(config, client, segment_fn=never_ends)
        finally:
            (store / "release").touch()
    assert summary.stop_reason == "budget" and summary.segments_completed == summary.segments_failed == 0
    assert summary.segments_cancelled == 1 and summary.to_dict()["segments_cancelled"] == 1
    _print_summary(summary)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("stopped: budget after ") and out[0].endswith(
        "s, 0 segments (0 failed, 1 cancelled at the budget), 0 env steps"), out[0]
    assert out[1].startswith("no segment ended within the budget: one segment takes longer than it")
