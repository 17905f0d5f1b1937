"""The embedded cluster's worker count without GPUs follows the cores a segment uses (`segment.torch_threads`)."""

from __future__ import annotations

import os

from dask_podracer.config import ClusterConfig
from dask_podracer.population.cluster import worker_layout
from dask_podracer.population.connect import embedded_client


def test_without_gpus_a_worker_gets_as_many_cores_as_its_segment_has_torch_threads():
    default = ClusterConfig()
    assert worker_layout(default, gpus=0, cores=16).workers == 16  # one thread a segment: one worker a core
    assert worker_layout(default, gpus=0, cores=16, cores_per_segment=2).workers == 8
    assert worker_layout(default, gpus=0, cores=2, cores_per_segment=2).workers == 1
    assert worker_layout(default, gpus=0, cores=3, cores_per_segment=2).workers == 1  # the odd core is left over
    assert worker_layout(default, gpus=0, cores=1, cores_per_segment=4).workers == 1  # never none
    # `cluster.workers` says how many, whatever the threads; GPUs decide the count where there are some
    assert worker_layout(ClusterConfig(workers=3), gpus=0, cores=16, cores_per_segment=2).workers == 3
    assert worker_layout(default, gpus=2, cores=16, cores_per_segment=2).workers == 2


def test_the_embedded_cluster_starts_one_worker_per_segment_of_that_many_cores():
    cores = os.cpu_count() or 1
    config = ClusterConfig(dashboard_address="127.0.0.1:0")
    with embedded_client(config, cores_per_segment=cores) as client:
        assert len(client.scheduler_info(n_workers=-1)["workers"]) == 1
