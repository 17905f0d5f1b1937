"""One run per store: a second `podracer train` on a store whose run is going is refused in one line, before
anything is written; a client that was killed (on this machine: its process is gone) or fell silent is taken over."""

import socket
import subprocess
import sys
import time

import pytest

from dask_podracer.cli import main
from dask_podracer.config import ConfigError
from dask_podracer.population.run_lease import check_no_run_going, this_client
from dask_podracer.store import PodracerStore

CONFIG = """
[run]
env = "Pendulum-v1"
algorithm = "sac"
budget = "30s"
max_segments = 1
[segment]
env_steps = 200
eval_episodes = 2
[hparams]
hidden = [16, 16]
num_envs = 2
learning_starts = 100
batch_size = 32
[cluster]
workers = 1
"""


def running_state(client: dict, written_ago: float = 2.0) -> dict:
    return {"env": "Pendulum-v1", "finished": False, "stop_reason": None, "wall_seconds": 40.0,
            "written_at": time.time() - written_ago, "heartbeat_seconds": 30.0, "client": client}


def test_a_run_going_from_a_live_client_is_refused_and_a_killed_or_silent_one_is_taken_over():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = {"host": socket.gethostname(), "pid": sleeper.pid}
        with pytest.raises(ConfigError, match=rf"^store 's.zarr' has a run going \(process {sleeper.pid}, state "
                                              r"written 2s ago\): stop it first, or give another store"):
            check_no_run_going("s.zarr", running_state(live))
    finally:
        sleeper.kill()
    sleeper.wait()
    check_no_run_going("s.zarr", running_state(live))  # its client was killed: taken over at once
    elsewhere = {"host": socket.gethostname() + "-other", "pid": 1}
    with pytest.raises(ConfigError, match=r"\(process 1 on .*-other, .*taken over once its state is 90s old$"):
        check_no_run_going("s.zarr", running_state(elsewhere))
    check_no_run_going("s.zarr", running_state(elsewhere, written_ago=91.0))  # silent: its client is gone
    check_no_run_going("s.zarr", running_state(this_client()))  # this process's own earlier run
    check_no_run_going("s.zarr", {**running_state(elsewhere), "finished": True})
    check_no_run_going("s.zarr", {**running_state(elsewhere), "stop_reason": "budget"})
    old = running_state(elsewhere)
    del old["client"]
    check_no_run_going("s.zarr", old)  # a state from before clients were recorded: nothing to tell them apart by


def test_train_on_a_store_with_a_run_going_is_one_line_exit_2_and_the_store_is_untouched(tmp_path, capsys):
    (tmp_path / "run.toml").write_text(CONFIG)
    store = PodracerStore(tmp_path / "run.zarr", create=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = running_state({"host": socket.gethostname(), "pid": sleeper.pid})
        store.write_run_state(state)
        code = main(["train", str(tmp_path / "run.toml"), "--store", str(tmp_path / "run.zarr"), "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert code == 2 and len(err) == 1 and "has a run going" in err[0], err
    assert store.read_run_state() == state and store.read_history() == []
