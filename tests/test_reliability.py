"""Bad data and bad places: damaged checkpoints, stores workers cannot reach, TLS-secured clusters."""

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from dask_podracer.config import config_from_dict
from dask_podracer.population import ClusterError, run_tournament
from dask_podracer.store import PodracerStore
from dask_podracer.train import load_agent

pytestmark = pytest.mark.slow

TINY = {"segment": {"env_steps": 150, "eval_episodes": 2},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32}}


def tiny(store, **run):
    return config_from_dict({**TINY, "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m",
                                             "store": str(store), **run}})


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", resources={"CPU": 1}) as cluster, Client(cluster) as c:
        yield c


def test_a_store_only_the_client_can_see_fails_before_any_segment(client):
    with pytest.raises(ClusterError, match=r"worker tcp://127\.0\.0\.1:\d+ cannot use the store 'memory://only-here'"):
        run_tournament(tiny("memory://only-here", max_segments=2), client)
    assert not PodracerStore("memory://only-here").read_history()  # nothing was submitted


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
    assert failed and all(r["error"].startswith("ChecksumError") for r in failed)
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
