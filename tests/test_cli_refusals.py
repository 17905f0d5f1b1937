"""Bad input to `podracer` refused in one line, before any work: cases a bad-input hunt of 2026-11-29 found
giving tracebacks, silence, or (gc during a run) a deleted leaderboard checkpoint."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from dask_podracer.cli import EXIT_USAGE, main
from dask_podracer.store import PodracerStore


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("podracer: error: "), err
    return err


@pytest.fixture
def live_run_store(tmp_path):
    """A store whose run state says a run is going, written just now by a live process of this machine."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    store = PodracerStore(str(tmp_path / "live.zarr"), create=True)
    store.write_run_state({"written_at": time.time(), "heartbeat_seconds": 5.0,
                           "client": {"host": socket.gethostname(), "pid": other.pid}})
    yield store
    other.kill()
    other.wait()


def test_gc_refuses_a_store_whose_run_is_going_and_deletes_nothing(live_run_store, capsys):
    before = live_run_store.read_run_state()
    assert main(["gc", live_run_store.url]) == EXIT_USAGE
    err = _error(capsys)
    assert "has a run going" in err and "gc deletes checkpoints" in err and "--dry-run" in err
    assert live_run_store.read_run_state() == before
    assert main(["gc", live_run_store.url, "--dry-run"]) == 0  # listing deletes nothing: allowed


@pytest.mark.parametrize("address", ["not a url", "host:notaport", "bogus://127.0.0.1:8786"])
def test_a_malformed_scheduler_address_is_refused_in_one_line_and_no_store_is_made(tmp_path, capsys, address):
    store = tmp_path / "s.zarr"
    assert main(["train", "workflows/configs/pendulum.toml", "--store", str(store), "--scheduler", address]) \
        == EXIT_USAGE
    assert "is not a Dask scheduler address" in _error(capsys)
    assert not store.exists()


def test_a_config_that_is_not_utf8_is_refused_in_one_line(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_bytes(b"\xff\xfe[run]\n")
    assert main(["train", str(config), "--store", str(tmp_path / "s.zarr")]) == EXIT_USAGE
    assert "not UTF-8 text" in _error(capsys)


def test_tls_files_without_a_scheduler_are_refused(tmp_path, capsys):
    pem = tmp_path / "x.pem"
    pem.write_text("junk")
    args = ["--tls-ca-file", str(pem), "--tls-cert", str(pem), "--tls-key", str(pem)]
    assert main(["train", "workflows/configs/pendulum.toml", "--store", str(tmp_path / "s.zarr"), *args]) \
        == EXIT_USAGE
    assert "give --scheduler tls://" in _error(capsys)
    assert not (tmp_path / "s.zarr").exists()


def test_check_env_refuses_a_negative_step_count(capsys):
    assert main(["check-env", "Pendulum-v1", "--max-steps", "-1"]) == EXIT_USAGE
    assert "--max-steps must be >= 1" in _error(capsys)
