import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # for tests/helpers.py


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests are seeded and run with one thread, so their numbers repeat exactly."""
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def cpu_cluster():
    """A LocalCluster of two worker processes (daemonic, one thread and CPU=1 each), shared by the test modules
    whose tournaments need no cluster of their own: a fresh one takes seconds to start, and each of its workers
    seconds more to import torch for its first segment. Tests that kill, scale or configure workers start their own."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", resources={"CPU": 1}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def three_slots():
    """A client of a LocalCluster for one actor-learner segment: a learner and two actors, three worker processes
    of one slot each. One per test module, not per session: test_actor_learner kills one of its workers."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", resources={"CPU": 1}) as cluster, Client(cluster) as client:
        yield client


@pytest.fixture(scope="session")
def cpu_client(cpu_cluster):
    """A client of `cpu_cluster`."""
    from distributed import Client

    with Client(cpu_cluster) as client:
        yield client
