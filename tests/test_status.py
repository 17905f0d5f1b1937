"""`podracer status STORE`: whether a run is going, its best score, segments, budget and last error, from the store."""

import dataclasses
import json
import threading
import time

import pytest

from dask_podracer.cli import main
from dask_podracer.config import config_from_dict
from dask_podracer.population.run_lease import this_client
from dask_podracer.status import format_status, store_status
from dask_podracer.store import PodracerStore

NOW = 1_800_000_000.0
STATE = {"env": "Pendulum-v1", "invocations": 2, "wall_seconds": 700.0, "finished": False, "stop_reason": None,
         "leg": {"budget_spent": 250.0, "segments": 12}, "invocation_started_at": NOW - 240.0,
         "written_at": NOW - 10.0, "heartbeat_seconds": 30.0}
BOARD = [{"key": "s000031-aa", "score": -150.25, "score_stderr": 3.5, "env_steps": 24_000, "group": "sac",
          "algorithm": "sac"}]
HISTORY = [
    {"key": "s000001-a", "agent": 0, "status": "finished", "score": -900.0, "run_env_steps": 2000, "wall_seconds": 10.0},
    {"key": "s000002-b", "agent": 1, "status": "failed", "score": None, "run_env_steps": 2000, "wall_seconds": 20.0,
     "error": "SegmentError: non-finite critic loss"},
    {"key": "s000003-c", "agent": 1, "status": "cancelled", "score": None, "run_env_steps": 2000, "wall_seconds": 30.0},
    {"key": "s000004-d", "agent": 0, "status": "failed", "score": None, "run_env_steps": 4000, "wall_seconds": 640.0,
     "error": "KilledWorker: worker died"},
    {"key": "s000005-e", "agent": 0, "status": "finished", "score": -150.25, "run_env_steps": 6000,
     "wall_seconds": 690.0},
]


@pytest.mark.parametrize("state, expected", [
    ({}, "new"),
    (STATE, "running"),  # written 10 s ago, heartbeat 30 s
    ({**STATE, "written_at": NOW - 89.0}, "running"),  # within 3 heartbeats
    ({**STATE, "written_at": NOW - 91.0}, "silent"),  # a killed client: nothing written for 3 heartbeats
    ({**STATE, "written_at": NOW - 91.0, "heartbeat_seconds": 60.0}, "running"),
    ({**STATE, "stop_reason": "interrupted"}, "stopped"),
    ({**STATE, "finished": True, "stop_reason": "budget"}, "finished"),
    ({k: v for k, v in STATE.items() if k not in ("written_at", "heartbeat_seconds")}, "silent"),  # an older store
])
def test_whether_a_run_is_going(state, expected):
    assert store_status(state, BOARD, HISTORY, "/s.zarr", now=NOW).state == expected


def test_the_screen_of_a_running_store():
    status = store_status({**STATE, "budget_seconds": 600.0, "max_segments": 40, "config": "p.toml with --set",
                           "settings": ["hparams.gamma=0.9", "run.seed=2"]}, BOARD, HISTORY, "/s.zarr", now=NOW)
    assert (status.finished, status.failed, status.cancelled, status.env_steps) == (2, 2, 1, 6000)
    assert status.budget_left == 340.0  # 600 - 250 spent at the last write - 10 s since
    assert status.last_error == {"key": "s000004-d", "agent": 0, "error": "KilledWorker: worker died",
                                 "wall_seconds": 640.0, "date": NOW - 10.0 - 700.0 + 640.0}
    assert format_status(status).splitlines() == [
        "store      /s.zarr",
        ("run        RUNNING since 2027-01-15 07:56:00 UTC (4m 00s); state written 10.0s ago; 2 invocations, "
         "11m 40s of run time"),
        "config     p.toml with --set hparams.gamma=0.9 run.seed=2",
        "best       -150.2 ± 3.5  s000031-aa  (sac, 24,000 env steps)",
        "segments   2 finished, 2 failed, 1 cancelled; 12 in this leg",
        "budget     4m 20s spent in this leg of 10m 00s: 5m 40s left; 12 of max_segments 40 segments",
        "env steps  6,000",
        "last error KilledWorker: worker died  (s000004-d, agent 0, 1m 10s ago)",
    ]


def test_the_screen_without_a_recorded_budget_and_of_other_states():
    status = store_status({**STATE, "finished": True, "stop_reason": "budget"}, [], HISTORY[:1], "/s.zarr", now=NOW)
    text = format_status(status)
    assert "finished (budget) 2027-01-15 07:59:50 UTC" in text and "best       - (the leaderboard is empty)" in text
    assert "the budget is the config's run.budget; this store does not record it" in text
    assert "last error none" in text and status.budget_left is None
    assert "\nconfig " not in text and status.config is None  # an older store records none
    silent = format_status(store_status({**STATE, "written_at": NOW - 3600.0}, BOARD, HISTORY, "/s.zarr", now=NOW))
    assert "NOT RUNNING: not finished, but its state written 1h 00m ago" in silent
    stopped = format_status(store_status({**STATE, "stop_reason": "interrupted"}, BOARD, HISTORY, now=NOW))
    assert "stopped (interrupted)" in stopped and "continues its budget" in stopped
    assert "no run has written its state yet" in format_status(store_status({}, [], [], now=NOW))


def test_a_missing_store_is_one_line(tmp_path, capsys):
    assert main(["status", str(tmp_path / "none.zarr")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("podracer: error:") and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_status_of_a_running_then_a_finished_store(cpu_client, tmp_path, capsys):
    from dask_podracer.population import run_tournament

    store_path = tmp_path / "going.zarr"
    config = config_from_dict({  # segments of 3 s each, so the run is seen going
        "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "max_segments": 4, "seed": 5,
                "store": str(store_path)},
        "tournament": {"leaderboard_size": 3, "fresh_agents": 2},
        "segment": {"env_steps": 0, "seconds": 3.0, "eval_episodes": 2},
        "hparams": {"hidden": [32, 32], "num_envs": 2, "learning_starts": 100, "batch_size": 64}})
    started = time.time()
    run = threading.Thread(target=run_tournament, args=(config, cpu_client), daemon=True)
    run.start()
    deadline = time.monotonic() + 60
    while True:
        if PodracerStore.exists(store_path):
            assert main(["status", str(store_path), "--json"]) == 0
            going = json.loads(capsys.readouterr().out)
            if going["state"] == "running":
                break
        assert run.is_alive() and time.monotonic() < deadline, "the status never said running"
        time.sleep(0.2)
    assert started <= going["started_at"] <= going["written_at"] <= going["checked_at"]
    assert going["stop_reason"] is None and going["invocations"] == 1
    # the state names its client, so a second `podracer train` on this store is refused (tests/test_run_lease.py)
    assert PodracerStore(store_path).read_run_state()["client"] == this_client()
    assert main(["status", str(store_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("run        RUNNING since ")
    run.join(timeout=120)
    assert not run.is_alive()

    assert main(["status", str(store_path), "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    store = PodracerStore(store_path)
    history, board = store.read_history(), store.read_leaderboard()
    assert done["state"] == "finished" and done["stop_reason"] == "max_segments"
    assert (done["finished"], done["failed"]) == (4, 0) == (sum(r["status"] == "finished" for r in history), 0)
    assert done["best"]["key"] == board[0]["key"] and done["best"]["score"] == board[0]["score"]
    assert done["leg_segments"] == 4 and done["last_error"] is None
    assert done["env_steps"] == max(r["run_env_steps"] for r in history)
    assert 0 < done["budget_spent"] <= time.time() - started
    assert main(["status", str(store_path)]) == 0
    assert "finished (max_segments)" in capsys.readouterr().out


def failure(key: str, wall: float) -> dict:
    return {"key": key, "agent": 0, "group": "sac", "parent": None, "status": "failed", "wall_seconds": wall,
            "score": None, "segment_env_steps": 0, "error": "SegmentError: boom"}


def test_status_does_not_date_an_error_of_an_earlier_invocation_by_run_time():
    # the error came 100 s into the first invocation; a day later the second one has run 50 s (run time 250 s)
    state = {"finished": False, "written_at": NOW, "invocation_started_at": NOW - 50.0, "wall_seconds": 250.0,
             "invocations": 2, "heartbeat_seconds": 30.0, "leg": {"budget_spent": 50.0, "segments": 0}}
    earlier = [failure("s1", 100.0)]
    status = store_status(state, [], earlier, "/s.zarr", now=NOW)
    assert status.last_error["date"] is None  # run time skips the day between the invocations: no date from it
    assert format_status(status).splitlines()[-1] == ("last error SegmentError: boom  (s1, agent 0, at 1m 40s of "
                                                      "run time)")
    # one of the invocation that wrote the state is dated as before
    status = store_status(state, [], [*earlier, failure("s2", 230.0)], "/s.zarr", now=NOW + 5.0)
    assert status.last_error["date"] == NOW - 20.0
    assert format_status(status).splitlines()[-1].endswith("(s2, agent 0, 25.0s ago)")


def test_the_state_names_the_config_file_by_its_absolute_path(tmp_path, monkeypatch, cpu_client, capsys):
    # a config given as `../c.toml` was recorded as written: `podracer status`, run from another directory, named
    # a file that is not there
    from dask_podracer.config import load_config
    from dask_podracer.population import run_tournament

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "c.toml").write_text(
        '[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nmax_segments = 1\n'
        '[segment]\nenv_steps = 64\neval_episodes = 2\n[hparams]\nnum_envs = 2\nlearning_starts = 32\n'
        'batch_size = 16\nhidden = [16, 16]\n')
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = load_config("../configs/c.toml", ["segment.eval_episodes=3"])
    assert config.source == "../configs/c.toml with --set"  # messages keep the path as given
    store = tmp_path / "s.zarr"
    run_tournament(dataclasses.replace(config, run=dataclasses.replace(config.run, store=str(store))), cpu_client)
    assert PodracerStore(store).read_run_state()["config"] == f"{tmp_path / 'configs' / 'c.toml'} with --set"
    assert main(["status", str(store)]) == 0
    assert f"{tmp_path / 'configs' / 'c.toml'} with --set segment.eval_episodes=3" in capsys.readouterr().out
