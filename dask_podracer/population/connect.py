"""Clients for the CLI and the workflows: the embedded LocalCluster, or an existing scheduler (TLS included).

Kept here so that the front ends (`cli.py`, `workflows/`) never import Dask themselves.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import dask
import torch
from dask.utils import parse_timedelta
from distributed import Client, Security
from distributed.comm import connect as comm_connect

from dask_podracer.config import ClusterConfig
from dask_podracer.population.cluster import ClusterError, close_whole, embedded_cluster
from dask_podracer.population.gpu_mps import mps_daemon


@dataclasses.dataclass(frozen=True)
class TLSFiles:
    """PEM files of a client of a TLS-secured scheduler (see docs/scaling.md)."""

    ca_file: str
    cert: str
    key: str

    def security(self) -> Security:
        missing = [f for f in (self.ca_file, self.cert, self.key) if not Path(f).is_file()]
        if missing:
            raise ClusterError(f"no such file: {missing[0]}")
        return Security(tls_ca_file=self.ca_file, tls_client_cert=self.cert, tls_client_key=self.key,
                        require_encryption=True)


def connect(address: str, tls: TLSFiles | None = None, timeout: str = "10s") -> Client:
    """A client of the scheduler at `address`; a `ClusterError` naming it when it cannot be reached, or when
    what answers there is not a Dask scheduler."""
    if address.startswith("tls://") and tls is None:
        raise ClusterError(f"cannot reach the Dask scheduler at {address} without TLS: give its TLS files "
                           "(--tls-ca-file, --tls-cert and --tls-key; from Python, tls=TLSFiles(...))")
    security = tls.security() if tls else None
    try:
        _handshake(address, security, parse_timedelta(timeout))
        return Client(address, timeout=timeout, security=security)
    except (OSError, TimeoutError) as e:
        raise ClusterError(f"cannot reach the Dask scheduler at {address}: {e}") from None
    except ValueError as e:  # Dask's parse of the address: no port, an unknown scheme, ...
        raise ClusterError(f"{address!r} is not a Dask scheduler address such as tcp://host:8786 ({e})") from None


def _handshake(address: str, security: Security | None, seconds: float) -> None:
    """Connect to `address` and exchange Dask's handshake, within `seconds`: a `ClusterError` if what listens
    there never answers or answers something else.

    `Client` waits for the handshake without a limit, so a port that accepts and stays silent (a web server, the
    dashboard's port given for the scheduler's) would hang it, and one that answers other bytes makes it decode
    them as frame lengths. Run on a thread of its own, so that it works under a running event loop (Jupyter)."""
    args = (security or Security()).get_connection_args("client")
    # distributed's connect retries a refused or unreachable address for `seconds`, then raises its own OSError:
    # the limit on the handshake is twice that, so a port where nothing listens is never called a silent one
    limit = 2 * seconds

    async def exchange() -> None:
        comm = await asyncio.wait_for(comm_connect(address, timeout=seconds, **args), limit)
        await comm.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            pool.submit(asyncio.run, exchange()).result()
        except TimeoutError:  # our wait_for's: connected, and no handshake came (distributed's own is an OSError)
            raise ClusterError(f"nothing at {address} answered as a Dask scheduler within {limit:g} s (is it "
                               "the scheduler's address, not its dashboard's?)") from None
        except (OSError, ValueError):  # unreachable, or not an address: for connect to say so
            raise
        except Exception as e:  # bytes that are not Dask's: a decoding error of any kind, or a huge allocation
            raise ClusterError(f"what answers at {address} is not a Dask scheduler ({type(e).__name__})") from None


@contextlib.contextmanager
def embedded_client(config: ClusterConfig, cores_per_segment: int = 1) -> Iterator[Client]:
    """A client of a fresh embedded LocalCluster (worker processes on 127.0.0.1), closed on exit; without GPUs
    it has one worker per `cores_per_segment` cores unless `config.workers` says how many.

    Its scheduler lets a segment go through `config.allowed_failures` worker deaths before it fails.
    Its worker processes are not daemonic, so a segment may start processes of its own (gymnasium's
    async vector envs: a daemonic process may have no children). With `config.mps` on a machine with GPUs,
    NVIDIA's MPS daemon runs while the cluster does (`gpu_mps.py`).
    """
    # The scheduler and the nannies run in this process. The scheduler reads its setting once, when it
    # is created; a nanny reads `daemon` whenever it starts a worker process, restarts included, so that
    # one holds for the cluster's whole life.
    # MPS serves a process that makes its CUDA context after the daemon started: so it starts before the workers.
    with dask.config.set({"distributed.scheduler.allowed-failures": config.allowed_failures,
                          "distributed.worker.daemon": False}), \
            mps_daemon(config.mps, torch.cuda.device_count() if config.mps else 0):
        cluster = embedded_cluster(config, cores_per_segment)
        # closed to its end, whatever interrupts it: a notebook's kernel lives on after its run
        try:
            with Client(cluster) as client:
                yield client
        except BaseException:
            close_whole(cluster, raise_interrupt=False)  # what stopped the run is raised, not a second Ctrl-C
            raise
        close_whole(cluster)
