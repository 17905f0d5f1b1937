"""What `podracer` prints and how it ends, as a program: on a narrow or dumb terminal, under an ASCII-only
encoding, with control characters in an error, and stopped by SIGTERM. Real terminals (a pty), real stores
and real runs; nothing of dask_podracer is replaced."""

from __future__ import annotations

import dataclasses
import fcntl
import io
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from dask_podracer.cli import _output_file, main
from dask_podracer.population.orchestrator import Progress
from dask_podracer.progress import ProgressPrinter
from dask_podracer.status import format_status, store_status
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentResult

from helpers import to_toml

ESC = "\x1b"
UP_AND_CLEAR = "\x1b[1A\r\x1b[2K"


def result(key: str, score: float) -> SegmentResult:
    return SegmentResult(key=key, parent=None, algorithm="sac", env="Pendulum-v1", hparams={}, score=score,
                         segment_env_steps=1000, lineage_env_steps=1000, train_seconds=1.0, eval_seconds=0.1,
                         generation=0, device="cpu", metrics={})


EVENTS = [  # a run of 100 s: a new best, a failure, a segment that is not better
    Progress(10.0, 1, 0, 1000, -900.0, result("s000000-a", -900.0), 0, None, 2),
    Progress(25.0, 1, 1, 1000, -900.0, None, None, "SegmentError: non-finite loss", 1),
    Progress(50.0, 2, 1, 2000, -900.0, result("s000002-c", -1000.0), 1, None, 2),
]


class Terminal:
    """A pseudo-terminal `columns` wide: the printer writes to its slave end, the test reads the master end."""

    def __init__(self, columns: int) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        attributes = termios.tcgetattr(slave)
        attributes[1] &= ~termios.OPOST  # no "\n" -> "\r\n": the test reads what the printer wrote
        termios.tcsetattr(slave, termios.TCSANOW, attributes)
        self.stream = io.TextIOWrapper(io.FileIO(slave, "w"), encoding="utf-8")

    def written(self) -> str:
        self.stream.flush()
        chunks = []
        while True:
            try:
                os.set_blocking(self.master, False)
                chunks.append(os.read(self.master, 65536))
            except BlockingIOError:
                return b"".join(chunks).decode()

    def close(self) -> None:
        self.stream.close()
        os.close(self.master)


@pytest.fixture
def terminal_40(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    terminal = Terminal(40)
    yield terminal
    terminal.close()


def test_the_status_line_fits_a_narrow_terminal_so_a_redraw_erases_all_of_it(terminal_40):
    printer = ProgressPrinter(100.0, terminal_40.stream)
    assert printer.tty
    for event in EVENTS:
        printer(event)
    text = terminal_40.written()
    assert text.count(UP_AND_CLEAR) == 2
    status_lines = [chunk.splitlines()[-1] for chunk in text.split(UP_AND_CLEAR)]
    # a line of 40 or more columns wraps (or parks the cursor past the last one): the redraw's one-row erase
    # would then leave its first row behind on the screen, once per segment
    assert all(len(line) <= 39 for line in status_lines), status_lines
    assert status_lines[-1].startswith("[############............]")


def test_columns_set_by_the_user_wins_over_the_terminal(terminal_40, monkeypatch):
    monkeypatch.setenv("COLUMNS", "30")
    printer = ProgressPrinter(100.0, terminal_40.stream)
    printer(EVENTS[0])
    assert len(terminal_40.written().splitlines()[-1]) == 29


def test_a_dumb_terminal_gets_plain_lines_without_escape_codes(terminal_40, monkeypatch):
    monkeypatch.setenv("TERM", "dumb")  # Emacs' M-x shell, some CI consoles: a tty that prints escapes as text
    printer = ProgressPrinter(100.0, terminal_40.stream)
    for event in EVENTS:
        printer(event)
    text = terminal_40.written()
    assert not printer.tty and ESC not in text
    assert len(text.splitlines()) == len(EVENTS)


COLOURED = "RuntimeError: \x1b[31mboom\x1b[0m\tbad"


def test_control_characters_of_an_error_are_escaped_in_a_log_and_on_a_terminal(terminal_40):
    failed = Progress(25.0, 0, 1, 0, None, None, None, COLOURED, 0)
    log = io.StringIO()
    ProgressPrinter(100.0, log, tty=False)(failed)
    assert ESC not in log.getvalue() and "\t" not in log.getvalue()
    assert "segment failed: RuntimeError: \\x1b[31mboom\\x1b[0m\\tbad |" in log.getvalue()
    ProgressPrinter(100.0, terminal_40.stream)(failed)
    on_screen = terminal_40.written()
    assert on_screen.count(ESC) == 0 and "25.0s segment failed: RuntimeError: \\x1b[31mboom" in on_screen


def test_status_escapes_control_characters_of_the_last_error():
    failure = {"key": "s000001-b", "agent": 0, "status": "failed", "wall_seconds": 5.0, "error": COLOURED}
    status = store_status({"finished": True, "stop_reason": "failing"}, [], [failure], "s.zarr", now=100.0)
    screen = format_status(status)
    assert ESC not in screen and "last error RuntimeError: \\x1b[31mboom\\x1b[0m\\tbad  (s000001-b" in screen


def test_a_resumed_run_s_bar_starts_at_the_budget_its_cut_off_invocation_spent():
    # the orchestrator stops a continued leg when both invocations' time reaches the budget: a bar of this
    # invocation's time alone stopped at "43% of budget"
    log = io.StringIO()
    ProgressPrinter(100.0, log, tty=False)(dataclasses.replace(EVENTS[0], budget_spent=50.0))  # 10 s of this one
    assert log.getvalue().startswith("[   10.0s  50% of budget] s000000-a")


@pytest.mark.slow
def test_a_resumed_run_reports_the_budget_its_cut_off_invocation_spent(tmp_path):
    from dask_podracer.config import config_from_dict
    from dask_podracer.population import run_tournament

    store = tmp_path / "cut.zarr"
    config = config_from_dict({"run": {"env": "CartPole-v1", "algorithm": "ppo", "store": str(store), "budget": "5m",
                                       "max_segments": 1},
                               "segment": {"env_steps": 256, "eval_episodes": 1},
                               "hparams": {"hidden": [8], "num_envs": 2, "rollout_steps": 16, "num_minibatches": 1},
                               "cluster": {"workers": 1}})
    run_tournament(config)
    state = PodracerStore(store).read_run_state()  # as an invocation cut off 40 s into its budget leaves it
    PodracerStore(store).write_run_state({**state, "finished": False, "stop_reason": "interrupted",
                                          "leg": {"budget_spent": 40.0, "segments": 0}})
    seen = []
    run_tournament(config, on_progress=seen.append)
    assert seen and all(p.budget_spent >= 40.0 + p.wall_seconds - 1e-6 for p in seen)


def podracer(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dask_podracer.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, **kwargs)


def test_an_ascii_only_stdout_gets_escapes_not_a_traceback(tmp_path):
    store = tmp_path / "rün-é.zarr"
    PodracerStore(store, create=True)
    process = podracer("status", str(store), env={"PYTHONIOENCODING": "ascii"})
    out, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (0, b"")
    assert out.decode("ascii").splitlines()[0] == f"store      {tmp_path}/r\\xfcn-\\xe9.zarr"


def tiny_run(tmp_path: Path) -> tuple[Path, Path]:
    """A config of 1-second segments on one worker, with a budget no test waits for; and its store."""
    store, config = tmp_path / "run.zarr", tmp_path / "run.toml"
    config.write_text(to_toml({
        "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "2m", "seed": 0, "store": str(store)},
        "tournament": {"leaderboard_size": 2, "fresh_agents": 2},
        "segment": {"env_steps": 0, "seconds": 1.0, "eval_episodes": 1, "device": "cpu"},
        "cluster": {"workers": 1, "dashboard_address": "127.0.0.1:0"},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32}}))
    return config, store


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_summary_file_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    config, store = tiny_run(tmp_path)
    # /proc takes no new file, even from root (a read-only directory stops only other users): known at once,
    # rather than as a traceback once the budget is spent
    assert main(["train", str(config), "--json", "/proc/summary.json", "--set", "run.max_segments=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("podracer: error: --json /proc/summary.json: cannot write it") and err.count("\n") == 1
    assert not store.exists()


def test_an_existing_summary_file_is_kept_by_the_check(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text("{}\n")
    assert _output_file(str(summary), "--json") == summary and summary.read_text() == "{}\n"
    assert _output_file(str(tmp_path / "new.json"), "--json") and not (tmp_path / "new.json").exists()


@pytest.mark.slow
def test_sigterm_stops_a_run_as_ctrl_c_does_and_exits_143(tmp_path):
    config, store = tiny_run(tmp_path)
    # own session: SIGTERM reaches the client alone, as from `timeout` or `kill PID`
    summary = tmp_path / "summary.json"
    process = podracer("train", str(config), "--json", str(summary), start_new_session=True)
    first = process.stdout.readline()  # the embedded cluster's line
    progress = process.stdout.readline()  # a finished segment's
    assert first.startswith(b"embedded LocalCluster") and b"done 1 " in progress
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=90)
    assert process.returncode == 143, err.decode()[-2000:]
    assert err.decode().splitlines()[-1] == "podracer: terminated; the store keeps everything recorded so far"
    # what was done is summarised as a finished run's is: on stdout, and in the --json file a script waits for
    assert out.decode().startswith("stopped: interrupted after ") and f"store: {store}" in out.decode()
    written = json.loads(summary.read_text())
    assert written["stop_reason"] == "interrupted" and written["segments_completed"] >= 1
    state = PodracerStore(store).read_run_state()
    # stopped, not killed: the state says so at once (no waiting for heartbeats to pass) and holds every
    # segment the client saw finish
    assert state["stop_reason"] == "interrupted" and not state["finished"]
    status = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "status", str(store), "--json"],
                            capture_output=True, check=True, timeout=60)
    assert json.loads(status.stdout)["state"] == "stopped"


def read_terminal(master: int, until: bytes | None, seconds: float) -> bytes:
    """What a terminal shows, until `until` appears (None: until the program closes it), within `seconds`."""
    shown, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline and (until is None or until not in shown):
        if select.select([master], [], [], 0.2)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the program and everything it started have closed the terminal
                break
            if not data:
                break
            shown += data
    return shown


@pytest.mark.slow
def test_ctrl_c_at_a_terminal_stops_the_run_without_tracebacks_of_its_workers(tmp_path):
    # Ctrl-C reaches the terminal's whole foreground process group, the embedded cluster's worker processes too:
    # each printed a KeyboardInterrupt traceback of distributed's event loop around the run's summary
    config, store = tiny_run(tmp_path)
    pid, master = pty.fork()
    if pid == 0:  # as a shell runs it: the foreground process group of its own terminal, SIGINT not ignored
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execv(sys.executable, [sys.executable, "-m", "dask_podracer.cli", "train", str(config)])
        finally:
            os._exit(127)
    try:
        shown = read_terminal(master, b"done 2 ", 120)
        assert b"done 2 " in shown, shown.decode(errors="replace")[-2000:]
        os.write(master, b"\x03")  # Ctrl-C, as typed
        shown += read_terminal(master, None, 90)
    finally:
        os.close(master)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 130
    text = shown.decode(errors="replace")
    assert "podracer: interrupted; the store keeps everything recorded so far" in text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert PodracerStore(store).read_run_state()["stop_reason"] == "interrupted"


@pytest.mark.slow
def test_a_run_whose_output_reader_exits_says_so_not_that_the_scheduler_was_lost(tmp_path):
    config, store = tiny_run(tmp_path)
    summary = tmp_path / "summary.json"
    process = podracer("train", str(config), "--json", str(summary), start_new_session=True)
    assert process.stdout.readline().startswith(b"embedded LocalCluster")
    process.stdout.close()  # `podracer train ... | head -1`: the next progress line meets a closed pipe
    err = process.stderr.read().decode()
    assert process.wait(timeout=90) == 1, err[-2000:]
    assert err.splitlines()[-1] == ("podracer: stopped: the reader of its output exited (a closed pipe); the store "
                                    "keeps everything recorded so far")
    assert PodracerStore(store).read_run_state()["stop_reason"] == "interrupted"
    assert json.loads(summary.read_text())["stop_reason"] == "interrupted"


def test_a_run_interrupted_before_it_started_does_not_say_the_store_keeps_anything(tmp_path, monkeypatch, capsys):
    config, store = tiny_run(tmp_path)
    # Ctrl-C while the config's env is built on the client to check it, before any cluster or store exists
    (tmp_path / "interrupting_env.py").write_text(
        "def make(num_envs, **kwargs):\n    raise KeyboardInterrupt\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["train", str(config), "--set", 'run.env="interrupting_env:make"', "--json", str(tmp_path / "s.json")])
    assert code == 130
    assert capsys.readouterr().err.splitlines()[-1] == "podracer: interrupted before the run started: nothing recorded"
    assert not store.exists() and not (tmp_path / "s.json").exists()
