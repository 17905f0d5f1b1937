"""Bad input to `podracer` refused in one line, before any work: cases a bad-input hunt of 2026-11-29 found
giving tracebacks, silence, a misleading message after a cluster had started, a file written outside the directory
named, or (gc during a run) a deleted leaderboard checkpoint."""

from __future__ import annotations

import contextlib
import importlib.metadata
import socket
import subprocess
import sys
import threading
import time

import pytest

from dask_podracer.cli import EXIT_USAGE, main
from dask_podracer.population import orchestrator
from dask_podracer.population.cluster import ClusterError
from dask_podracer.population.connect import connect
from dask_podracer.store import PodracerStore, StoreError

PENDULUM = "workflows/configs/pendulum.toml"


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("podracer: error: "), err
    return err


@pytest.fixture
def no_cluster(monkeypatch):
    """Fails the test if the run gets as far as starting (or connecting to) a cluster: refusals come before."""
    def tripwire(*args, **kwargs):
        raise AssertionError("a cluster was started before the bad input was refused")

    monkeypatch.setattr(orchestrator, "_client_for", tripwire)


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


def test_gc_refuses_a_store_a_run_holds_before_its_state_says_so(tmp_path, capsys):
    # a run that has just started (its store opened, its run state not yet written): the state alone let gc on
    store = PodracerStore(str(tmp_path / "starting.zarr"), create=True)
    with store.hold_run():
        assert main(["gc", store.url]) == EXIT_USAGE
    assert "is in use: a run of this process holds it" in _error(capsys)
    assert main(["gc", store.url]) == 0


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


STORE_COMMANDS = [["status"], ["leaderboard"], ["gc"], ["lineage", "@", "s000000-00000000"], ["pin", "@", "k"],
                  ["tensorboard", "@", "--out", "OUT"], ["plot", "@", "--out", "OUT/c.png"]]


@pytest.mark.parametrize("url, why", [("bogus://x.zarr", "Protocol not known: bogus"),
                                      ("s3://bucket/x.zarr", "Install s3fs")])
@pytest.mark.parametrize("command", STORE_COMMANDS, ids=lambda c: c[0])
def test_every_command_names_a_store_url_it_cannot_open(tmp_path, capsys, command, url, why):
    if why == "Install s3fs":
        pytest.importorskip("fsspec")
        if __import__("importlib").util.find_spec("s3fs") is not None:
            pytest.skip("s3fs is installed here")
    args = [url if a == "@" else a.replace("OUT", str(tmp_path)) for a in command]
    if "@" not in command:
        args.append(url)
    assert main(args) == EXIT_USAGE
    err = _error(capsys)
    assert f"cannot open store '{url}'" in err and why in err


@pytest.mark.parametrize("under", ["a file", "/proc"])
def test_train_names_a_store_path_it_cannot_create_before_any_cluster(tmp_path, capsys, no_cluster, under):
    if under == "a file":
        blocker = tmp_path / "plain"
        blocker.write_text("not a directory")
        store, why = blocker / "s.zarr", f"'{blocker}' is a file, not a directory"
    else:
        if not __import__("os").path.isdir("/proc/self"):
            pytest.skip("no /proc here")
        store, why = "/proc/podracer-test.zarr", "cannot make a directory in '/proc'"
    assert main(["train", PENDULUM, "--store", str(store)]) == EXIT_USAGE
    err = _error(capsys)
    assert f"cannot create store '{store}'" in err and why in err and "scheduler" not in err


def test_train_refuses_a_directory_of_other_files_as_its_store_before_any_cluster(tmp_path, capsys, no_cluster):
    # it was accepted, and refused once the embedded cluster had started
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["train", PENDULUM, "--store", str(tmp_path)]) == EXIT_USAGE
    assert "is not empty and holds no Zarr group: not a podracer store" in _error(capsys)
    assert [(p.name, p.read_text()) for p in tmp_path.iterdir()] == [("notes.txt", "mine")]


@pytest.mark.parametrize("command", ["status", "leaderboard", "train"])
def test_a_directory_of_stores_or_a_config_given_as_the_store_names_the_stores(tmp_path, capsys, no_cluster,
                                                                             command):
    # `podracer status runs` (the folder of the runs) and `podracer status pendulum.toml` (the run's config) said
    # only "not a podracer store"
    from dask_podracer.store import PodracerStore

    for name in ("b.zarr", "a.zarr"):
        PodracerStore(tmp_path / name, create=True)
    (tmp_path / "notes").mkdir()
    argv = {"train": ["train", PENDULUM, "--store"]}.get(command, [command])
    assert main([*argv, str(tmp_path)]) == EXIT_USAGE
    assert _error(capsys).endswith(f"'{tmp_path}' is not empty and holds no Zarr group: not a podracer store; it "
                                   f"holds the stores {tmp_path / 'a.zarr'}, {tmp_path / 'b.zarr'}")
    if command != "train":
        assert main([command, PENDULUM]) == EXIT_USAGE
        assert _error(capsys).endswith("is a file, not a podracer store; a config names its run's store in "
                                       "run.store (runs/<run.name>.zarr by default)")


def test_checking_that_a_store_can_be_created_leaves_nothing_behind(tmp_path):
    PodracerStore.check_creatable(tmp_path / "deep" / "er" / "s.zarr")
    assert list(tmp_path.iterdir()) == []
    PodracerStore.check_creatable(tmp_path)  # an existing empty directory: the store is made in it
    with pytest.raises(StoreError, match="is a file"):
        (tmp_path / "f").write_text("x")
        PodracerStore.check_creatable(tmp_path / "f")


@pytest.mark.parametrize("setting, says", [
    ('cluster.dashboard_address="not an address"', "cluster.dashboard_address must be"),
    ('cluster.dashboard_address="127.0.0.1:70000"', "cluster.dashboard_address must be"),
    ("run.seed=4294967296", "run.seed must be an integer from 0 to 2**32 - 1"),
    ("run.seed=-1", "run.seed must be an integer from 0 to 2**32 - 1"),
    ("run.name=..", "run.name must be ASCII letters"),
    ("groups.0.hparams.gamma=0.9", "this config declares no [[groups]]"),
])
def test_settings_that_would_fail_later_are_refused_before_any_cluster(tmp_path, capsys, no_cluster, setting, says):
    assert main(["train", PENDULUM, "--store", str(tmp_path / "s.zarr"), "--set", setting]) == EXIT_USAGE
    assert says in _error(capsys)
    assert not (tmp_path / "s.zarr").exists()


BIG = "1180591620717411303424"  # 2**70


@pytest.mark.parametrize("config, setting, says", [  # a config-key hunt's findings: each failed after the cluster
    ("pendulum.toml", f"segment.torch_threads={BIG}", "segment.torch_threads must be an integer of at most 64 bits"),
    ("pendulum.toml", f"tournament.retries={BIG}", "tournament.retries must be an integer of at most 64 bits"),
    ("pendulum.toml", f"cluster.workers={BIG}", "cluster.workers must be an integer of at most 64 bits"),
    ("pendulum.toml", f"hparams.buffer_size={BIG}", "hparams.buffer_size must be an integer of at most 64 bits"),
    ("pendulum.toml", "hparams.buffer_size=10000000000", "cannot build the env and agents this config asks for"),
    ("pendulum.toml", "hparams.hidden=[1000000,1000000,1000000]", "hparams.hidden = [1000000, 1000000, 1000000] "
     "makes one network of 2,000,004,000,000 weights: with its optimiser's moments at least 22,352 GiB, more than"),
    ("pendulum_mixed.toml", "groups.0.hparams.hidden=[1000000,1000000]",
     "groups[0].hparams.hidden = [1000000, 1000000]"),
    ("pendulum.toml", "hparams.utd_ratio=inf",
     "hparams.utd_ratio must be in (0, 1000] (gradient updates per transition), got inf"),
    # absurd values that fit 64 bits: the client built a billion agents for hours; LocalCluster forked a million
    ("pendulum.toml", "tournament.pool_size=1000000000", "tournament.pool_size = 1000000000 makes a pool of "
     "1,000,000,000 agents: the client's state of them alone needs at least 1,863 GiB, more than this machine's"),
    ("pendulum.toml", "cluster.workers=1000000", "cluster.workers = 1,000,000 worker processes need at least "
     "195,312 GiB (each imports torch: 200 MiB or more), more than this machine's"),
    ("pendulum.toml", "hparams.actor_lr=inf", "hparams.actor_lr must be a finite number"),
    ("pendulum_ppo.toml", "hparams.log_std_init=nan", "hparams.log_std_init must be a number, got nan"),
    ("impala_cartpole.toml", "hparams.learning_rate=inf", "hparams.learning_rate must be a finite number"),
    ("pendulum.toml", "search.actor_lr={uniform=[0,inf]}", "search.actor_lr: uniform needs finite bounds"),
    ("pendulum.toml", "search.gamma={uniform=[0.98,1.0001]}",
     "search.gamma: its prior can draw 1.0001, and gamma must be in [0, 1]"),
    ("pendulum.toml", "search.num_envs={int_uniform=[1,2.5]}", "int_uniform needs integer bounds"),
    ("pendulum.toml", "search.num_envs={uniform=[0.2,4]}", "its prior can draw 0, and num_envs must be >= 1, got 0"),
    ("pendulum_mixed.toml", "groups.sac.name=../x", "groups[0].name must be ASCII letters"),
    ("pendulum.toml", "groups=5", "groups must be a non-empty list of tables ([[groups]]), got int 5"),
    ("pendulum.toml", "logging.mlflow=OUT/afile/ml", "cannot create the MLflow tracking store"),
    ("stock_trading.toml", 'run.eval_env_kwargs={period="bogus"}',
     "run.eval_env_kwargs {'period': 'bogus'} do not fit 'StockTrading-v0': period must be one of"),
])
def test_config_values_that_fail_every_segment_are_refused_before_any_cluster(tmp_path, capsys, no_cluster, config,
                                                                               setting, says):
    (tmp_path / "afile").write_text("a file, not a directory")
    setting = setting.replace("OUT", str(tmp_path))
    assert main(["train", f"workflows/configs/{config}", "--store", str(tmp_path / "s.zarr"), "--set", setting]) \
        == EXIT_USAGE
    assert says in _error(capsys)
    assert not (tmp_path / "s.zarr").exists()


def test_a_device_this_machine_lacks_is_refused_before_the_embedded_cluster_starts(tmp_path, capsys, no_cluster):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["train", PENDULUM, "--store", str(tmp_path / "s.zarr"), "--set", "segment.device=cuda"]) \
        == EXIT_USAGE
    assert "cannot use segment.device 'cuda' on this machine (the embedded cluster's)" in _error(capsys)


@pytest.mark.parametrize("option", ["--store", "--tensorboard", "--json"])
def test_an_empty_path_option_is_refused_rather_than_ignored(tmp_path, capsys, no_cluster, option):
    args = ["train", PENDULUM, option, ""]
    if option != "--store":
        args += ["--store", str(tmp_path / "s.zarr")]
    assert main(args) == EXIT_USAGE
    assert f"{option} is empty" in _error(capsys)


@pytest.mark.parametrize("name", ["../escaped", "..", ""])
def test_tensorboard_writes_only_under_its_out_directory(tmp_path, capsys, name):
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    out = tmp_path / "deep" / "out"
    assert main(["tensorboard", store.url, "--out", str(out), "--name", name]) == EXIT_USAGE
    assert "--name must be ASCII letters" in _error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


@pytest.mark.parametrize("argv, says", [
    (["train", PENDULUM, "--budget"], "podracer train: error: argument --budget: expected one argument"),
    (["leaderboard", "s.zarr", "--top", "x"], "podracer leaderboard: error: argument --top: invalid int value: 'x'"),
    (["bogus"], "podracer: error: argument COMMAND: invalid choice: 'bogus'"),
    ([], "podracer: error: the following arguments are required: COMMAND"),
])
def test_argument_errors_are_one_line_pointing_at_help(capsys, argv, says):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(says) and err.endswith("--help)"), err


@pytest.mark.parametrize("argv, says", [
    (["train", PENDULUM, "--budget", "-5s"], "--budget must be a positive duration, got '-5s'"),
    (["leaderboard", "s.zarr", "--top", "-3"], "--top must be >= 0"),
    (["check-env", "Pendulum-v1", "--num-envs", "-2"], "--num-envs must be >= 1, got -2"),
])
def test_a_negative_value_is_its_options_and_refused_by_its_check(capsys, argv, says):
    # argparse alone takes "-5s" for an unknown option and says --budget is missing its value
    assert main(argv) == EXIT_USAGE
    assert says in _error(capsys)


def test_version_is_the_installed_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"podracer {importlib.metadata.version('dask-podracer')}"


@pytest.fixture(params=["silent", "other bytes"])
def not_a_scheduler(request):
    """A TCP port that accepts connections and is not a Dask scheduler: one that never says anything (a web
    server, the dashboard's port), or one that answers with another protocol's greeting."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                accepted.append(conn)
                if request.param == "other bytes":
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n" * 4)

    threading.Thread(target=serve, daemon=True).start()
    yield request.param, f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for conn in accepted:
        conn.close()


def test_a_port_that_is_not_a_dask_scheduler_is_named_not_waited_on(not_a_scheduler):
    # distributed's Client waits for the scheduler's handshake without a limit: a silent port hung it
    kind, address = not_a_scheduler
    said = "answered as a Dask scheduler within 2 s" if kind == "silent" else "is not a Dask scheduler"
    with pytest.raises(ClusterError, match=said):
        connect(address, timeout="1s")


FLOOD_STDOUT = """
import sys
from dask_podracer import cli

def flood(args):
    while True:  # more than any pipe holds: the write after the reader left raises BrokenPipeError
        print("x" * 1000)

cli._leaderboard = flood
sys.exit(cli.main(["leaderboard", "s.zarr"]))
"""


def test_a_reader_that_stops_early_gets_no_traceback():
    # `podracer leaderboard STORE | head -1` printed a BrokenPipeError traceback
    run = subprocess.Popen([sys.executable, "-c", FLOOD_STDOUT], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run.stdout.readline()
    run.stdout.close()
    assert run.wait(timeout=60) == 1
    assert run.stderr.read() == b""


@pytest.mark.parametrize("algorithm, hparams, message", [
    # three zeros too many: the client's check of the config built the agent, and torch zero-filled a buffer the
    # allocator granted beyond the RAM: `podracer train` was OOM-killed (exit 137, no message)
    # (sizes beyond any machine, so that no machine running the suite allocates them)
    ("sac", "buffer_size = 2000000000000", "a replay buffer of hparams.buffer_size = 2,000,000,000,000 transitions "
                                           "of 9 float32 values needs at least 67,055.2 GiB, more than the"),
    ("ppo", "num_envs = 2000000000000", "a rollout of hparams.rollout_steps x num_envs = 64 x 2,000,000,000,000 "
                                        "steps of 13 values needs at least"),
])
def test_a_buffer_beyond_the_machine_is_refused_in_one_line_before_any_cluster(tmp_path, capsys, algorithm, hparams,
                                                                               message):
    config = tmp_path / "big.toml"
    config.write_text(f'[run]\nenv = "Pendulum-v1"\nalgorithm = "{algorithm}"\n[hparams]\n{hparams}\n')
    assert main(["train", str(config), "--store", str(tmp_path / "s.zarr")]) == EXIT_USAGE
    err = _error(capsys)
    assert err.startswith(f"podracer: error: {config}: cannot build the env and agents this config asks for on this "
                          f"machine: MemoryError: {message}")
    assert not (tmp_path / "s.zarr").exists()
