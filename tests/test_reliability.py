"""Bad data and bad places: damaged checkpoints, stores workers cannot reach, TLS-secured clusters."""

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
from distributed import LocalCluster

from dask_podracer.config import ClusterConfig, ConfigError, config_from_dict
from dask_podracer.population import ClusterError, embedded_client, orchestrator, run_tournament
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentSpec, load_agent, run_segment
from helpers import segment_that_kills_its_worker_first, segment_that_outlasts_the_budget

pytestmark = pytest.mark.slow

TINY = {"segment": {"env_steps": 150, "eval_episodes": 2},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32}}


def tiny(store, sections=None, **run):
    return config_from_dict({**TINY, **(sections or {}), "run": {"env": "Pendulum-v1", "algorithm": "sac",
                                                                 "budget": "3m", "store": str(store), **run}})


@pytest.fixture
def client(cpu_client):
    """The suite's shared LocalCluster of two daemonic worker processes (tests/conftest.py)."""
    return cpu_client


def test_a_store_only_the_client_can_see_fails_before_any_segment(client):
    with pytest.raises(ClusterError, match=r"worker tcp://127\.0\.0\.1:\d+ cannot use the store 'memory://only-here'"):
        run_tournament(tiny("memory://only-here", max_segments=2), client)
    assert not PodracerStore.exists("memory://only-here")  # nothing was submitted, and the bare store removed


def test_segments_on_a_device_the_workers_lack_are_refused_before_any_segment(client, tmp_path):
    # a 100th GPU no machine here has: refused whether the workers have no GPU or a few
    with pytest.raises(ClusterError, match=r"worker tcp://127\.0\.0\.1:\d+ cannot use segment.device 'cuda:99'"):
        run_tournament(tiny(tmp_path / "d.zarr", {"segment": {**TINY["segment"], "device": "cuda:99"}}), client)
    assert not PodracerStore.exists(tmp_path / "d.zarr")  # nothing was submitted, and the bare store removed


def test_a_store_is_resumed_only_by_a_config_that_can_continue_it(client, tmp_path):
    store_path = tmp_path / "fit.zarr"
    run_tournament(tiny(store_path, max_segments=2), client)
    store = PodracerStore(store_path)
    before = (store.read_leaderboard(), store.read_history(), store.read_run_state())
    assert before[2]["env"] == "Pendulum-v1"
    other_env = tiny(store_path, max_segments=2, env="PointChase-v0")
    with pytest.raises(ConfigError, match=r"holds a tournament on 'Pendulum-v1', and run.env is 'PointChase-v0'"):
        run_tournament(other_env, client)
    other_group = tiny(store_path, max_segments=2, algorithm="td3")
    with pytest.raises(ConfigError, match=r"holds agents of group 'sac', which this config does not declare "
                                          r"\(its groups: td3\)"):
        run_tournament(other_group, client)
    renamed = config_from_dict({"segment": TINY["segment"], "run": {"env": "Pendulum-v1", "budget": "3m", "store": str(store_path)},
                                "groups": [{"name": "sac", "algorithm": "td3", "hparams": TINY["hparams"]}]})
    with pytest.raises(ConfigError, match=r"holds sac agents in group 'sac', and this config makes 'sac' td3"):
        run_tournament(renamed, client)
    assert (store.read_leaderboard(), store.read_history(), store.read_run_state()) == before  # nothing ran
    # a store written before the run state recorded its env: the leaderboard's entries tell it
    store.write_run_state({k: v for k, v in before[2].items() if k != "env"})
    with pytest.raises(ConfigError, match=r"holds a tournament on 'Pendulum-v1'"):
        run_tournament(other_env, client)
    assert run_tournament(tiny(store_path, max_segments=1), client).segments_completed == 1  # its own config resumes


def test_gymnasiums_async_envs_run_in_the_embedded_clusters_workers_and_are_refused_clearly_on_daemonic_ones(
        client, tmp_path):
    # an async vector env starts a process per env; Dask's worker processes are daemonic by default (the
    # fixture's), and a daemonic process may start none
    config = tiny(tmp_path / "async.zarr", {"cluster": {"workers": 2, "dashboard_address": "127.0.0.1:0"}},
                  max_segments=2, env="gym:Pendulum-v1", env_kwargs={"vectorization_mode": "async"})
    with pytest.raises(ClusterError, match=r"worker tcp://127\.0\.0\.1:\d+ cannot build env 'gym:Pendulum-v1' "
                                           r"and its agents: ValueError: vectorization_mode 'async' starts a process "
                                           r"per env, and this process is daemonic .* "
                                           r"DASK_DISTRIBUTED__WORKER__DAEMON=False"):
        run_tournament(config, client)
    assert not PodracerStore.exists(tmp_path / "async.zarr")
    summary = run_tournament(config)  # on the embedded cluster, whose workers are not daemonic
    assert summary.segments_completed == 2 and summary.segments_failed == 0


def test_a_segment_whose_worker_keeps_dying_is_retried_then_failed_and_the_run_goes_on(tmp_path):
    store_path = tmp_path / "deaths.zarr"
    config = tiny(store_path, {"cluster": {"allowed_failures": 1}}, max_segments=4)
    with embedded_client(ClusterConfig(workers=2, dashboard_address="127.0.0.1:0", allowed_failures=1)) as c:
        summary = run_tournament(config, c, segment_fn=segment_that_kills_its_worker_first)
    history = PodracerStore(store_path).read_history()
    first = [r for r in history if r["key"].startswith("s000000-")]
    # run on two workers (allowed_failures = 1), both died: recorded once, as failed, and nothing else was
    assert len(first) == 1 and first[0]["status"] == "failed" and first[0]["error"].startswith("KilledWorker")
    assert summary.segments_failed == 1 and summary.segments_completed == 3 and summary.stop_reason == "max_segments"
    assert [r["status"] for r in history if r is not first[0]] == ["finished"] * 3
    assert not [r for r in history if r["status"] == "cancelled"]  # restarted workers came back: no shrink


def test_checkpoints_the_history_never_recorded_are_recovered_on_resume(client, tmp_path):
    store_path = tmp_path / "recover.zarr"
    run_tournament(tiny(store_path, max_segments=2), client)
    store = PodracerStore(store_path)
    # What a client killed between a segment's end and its next table write leaves: a published checkpoint
    # that no history record names, its agent marked as running it, and an unfinished invocation.
    state = store.read_run_state()
    agent = state["machine"]["agents"][0]
    key = "s000099-0000beef"
    run_segment(SegmentSpec(key=key, store_url=str(store_path), env="Pendulum-v1", algorithm="sac",
                            hparams=agent["hparams"], parent=agent["checkpoint"], seed=99, env_step_budget=150,
                            eval_episodes=2, generation=agent["generation"] + 1))
    agent["running"] = key
    store.write_run_state({**state, "finished": False, "leg": {"budget_spent": 5.0, "segments": 1}})

    summary = run_tournament(tiny(store_path, max_segments=3), client)
    history = store.read_history()
    recovered = [r for r in history if r["key"] == key]
    assert summary.recovered == 1 and len(recovered) == 1
    assert recovered[0]["status"] == "finished" and recovered[0]["recovered"] and recovered[0]["agent"] == agent["id"]
    assert recovered[0]["score"] == store.checkpoint_attrs(key)["score"]
    # the continued invocation counted 1 + the recovered one towards max_segments 3: one more segment ran
    assert summary.segments_completed == 2 and summary.stop_reason == "max_segments" and len(history) == 4
    assert key in [e["key"] for e in store.read_leaderboard()]  # a board of 8 takes it
    again = run_tournament(tiny(store_path, max_segments=1), client)  # nothing left to recover
    assert again.recovered == 0 and len(store.read_history()) == 5


def test_an_interrupted_invocation_continues_its_budget_and_a_finished_one_starts_afresh(client, tmp_path):
    store_path = tmp_path / "budget.zarr"
    run_tournament(tiny(store_path, max_segments=1), client)
    store = PodracerStore(store_path)
    assert store.read_run_state()["finished"] is True
    state = store.read_run_state()
    store.write_run_state({**state, "finished": False, "leg": {"budget_spent": 178.0, "segments": 0}})
    summary = run_tournament(tiny(store_path, budget="3m"), client)  # 2 s of the 3 minutes were left
    assert summary.stop_reason == "budget" and summary.wall_seconds < 60
    assert store.read_run_state()["finished"] is True
    summary = run_tournament(tiny(store_path, budget="3m", max_segments=1), client)  # a fresh budget
    assert summary.stop_reason == "max_segments" and summary.segments_completed == 1


def test_a_run_whose_training_diverges_stops_with_exit_1_and_the_last_error(tmp_path):
    config = tmp_path / "diverge.toml"
    config.write_text('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nbudget = "3m"\n'
                      '[segment]\nenv_steps = 150\neval_episodes = 2\n[cluster]\nworkers = 1\n'
                      'dashboard_address = "127.0.0.1:0"\n[hparams]\nhidden = [16, 16]\nnum_envs = 2\n'
                      'learning_starts = 20\nbatch_size = 32\nactor_lr = 1e30\ncritic_lr = 1e30\n')
    run = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store",
                          str(tmp_path / "nan.zarr"), "--quiet"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(
        "podracer: error: segments keep failing; the last one: SegmentError: segment s0")
    assert "non-finite" in run.stderr and "stopped: failing" in run.stdout
    store = PodracerStore(tmp_path / "nan.zarr")
    assert store.read_leaderboard() == [] and store.checkpoint_keys() == []  # nothing diverged was saved


def test_a_damaged_checkpoint_is_quarantined_and_the_run_goes_on(client, tmp_path):
    store_path = tmp_path / "q.zarr"
    run_tournament(tiny(store_path, max_segments=2), client)
    store = PodracerStore(store_path)
    board = store.read_leaderboard()
    damaged = board[0]["key"]
    chunk = next(p for p in (store_path / "checkpoints" / damaged).rglob("c/*") if p.is_file() and p.stat().st_size > 64)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))

    summary = run_tournament(tiny(store_path, max_segments=3), client)  # agents resume from their checkpoints
    assert summary.segments_completed >= 1, store.read_history()
    assert store.is_quarantined(damaged)
    assert damaged not in [e["key"] for e in store.read_leaderboard()]
    failed = [r for r in store.read_history() if r["status"] == "failed"]
    # the first segment to read it fails on its checksum; one reading it at the same time may find it quarantined
    assert any(r["error"].startswith("ChecksumError") for r in failed)
    assert all(r["error"].startswith("ChecksumError") or "quarantined" in r["error"] for r in failed), failed
    with pytest.raises(Exception, match="quarantined"):
        load_agent(store, damaged)
    for entry in store.read_leaderboard():
        load_agent(store, entry["key"])


def _certificates(tmp_path: Path) -> dict[str, str]:
    """A throwaway CA and one certificate it signed for 127.0.0.1, used by scheduler, workers and client."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "podracer test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    files = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "cert.pem", "key": tmp_path / "key.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return {k: str(v) for k, v in files.items()}


def test_a_tls_secured_cluster_through_the_cli(tmp_path):
    from distributed import Security

    pem = _certificates(tmp_path)
    security = Security(tls_ca_file=pem["ca"], tls_scheduler_cert=pem["cert"], tls_scheduler_key=pem["key"],
                        tls_worker_cert=pem["cert"], tls_worker_key=pem["key"], tls_client_cert=pem["cert"],
                        tls_client_key=pem["key"], require_encryption=True)
    config = tmp_path / "tiny.toml"
    config.write_text('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nmax_segments = 2\n'
                      '[segment]\nenv_steps = 150\neval_episodes = 2\n'
                      '[hparams]\nhidden = [16, 16]\nnum_envs = 2\nlearning_starts = 50\nbatch_size = 32\n')
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", protocol="tls://",
                      dashboard_address="127.0.0.1:0", resources={"CPU": 1}, security=security) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        plain = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store",
                                str(tmp_path / "no.zarr"), "--scheduler", address], capture_output=True, text=True,
                               timeout=120)
        assert plain.returncode == 2 and "cannot reach the Dask scheduler" in plain.stderr
        run = subprocess.run([sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store",
                              str(tmp_path / "tls.zarr"), "--scheduler", address, "--tls-ca-file", pem["ca"],
                              "--tls-cert", pem["cert"], "--tls-key", pem["key"]],
                             capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "stopped: max_segments" in run.stdout and len(PodracerStore(tmp_path / "tls.zarr").read_history()) == 2


def test_an_unguarded_script_gets_the_main_guard_named_not_a_multiprocessing_trace(tmp_path):
    # Worker processes re-import the script that starts the embedded cluster, so a script
    # without `if __name__ == "__main__":` starts it again in each of them.
    config = {"run": {"env": "Pendulum-v1", "algorithm": "sac", "store": str(tmp_path / "u.zarr")},
              "cluster": {"workers": 1, "dashboard_address": "127.0.0.1:0"}}
    script = tmp_path / "unguarded.py"
    script.write_text("from dask_podracer.config import config_from_dict\n"
                      "from dask_podracer.population import run_tournament\n"
                      f"run_tournament(config_from_dict({config!r}))\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1
    assert last.startswith("dask_podracer.population.cluster.ClusterError: the embedded LocalCluster's worker")
    assert 'a script must make the call under `if __name__ == "__main__":`' in last
    # the worker process said so too, before multiprocessing could fail in its own words
    assert "ClusterError: an embedded LocalCluster cannot start while a worker imports the script" in run.stderr
    assert not (tmp_path / "u.zarr").exists()  # nothing was stored


def test_segments_still_running_after_the_budget_and_its_grace_are_cancelled_and_the_run_ends(client, tmp_path,
                                                                                              monkeypatch):
    # distributed's wait() raises at its timeout: the run used to end in a TimeoutError, which the CLI took for a
    # lost scheduler, whenever a segment ran past the budget's grace (a long evaluation, an endless iteration)
    monkeypatch.setattr(orchestrator, "BUDGET_GRACE_SECONDS", 1.0)
    summary = run_tournament(tiny(tmp_path / "late.zarr", budget="2s"), client,
                             segment_fn=segment_that_outlasts_the_budget)
    assert summary.stop_reason == "budget"
    assert summary.segments_completed == 0 and summary.segments_failed == 0  # cancelled, not recorded as failed
    assert summary.wall_seconds < 6.0  # it did not wait for them
