"""Run a tournament on a cluster made by one of Dask's deployment projects.

    python workflows/clusters.py KIND CONFIG [--workers N] [--budget 30m] [--store URL] [--json SUMMARY]

KIND is one of:
  local       a LocalCluster of worker processes on 127.0.0.1 (what `podracer train` embeds)
  cuda        dask-cuda's LocalCUDACluster: one worker per GPU, each advertising GPU=1
  slurm       dask-jobqueue's SLURMCluster: N jobs of one GPU each (edit the job options below)
  kubernetes  dask-kubernetes' KubeCluster (operator): N worker pods with one GPU each (edit the spec below)

A GPU of cuda, slurm and kubernetes runs the config's `cluster.segments_per_gpu` segments at once: that many
worker processes (`gpu_sharing = "processes"`; not cuda, which starts one worker per GPU) or threads of its worker.

Each worker advertises the resource a segment asks for (`GPU=1`, or `CPU=` its threads for `local`
without GPUs), and the store must be reachable by every worker: a shared filesystem path
for slurm, an object-store URL (s3://..., gs://...) for kubernetes. Every scheduler
preloads the live Podracer page of the Dask dashboard (`dask_podracer.population.dashboard_preload`);
on kubernetes the scheduler and worker pods run PODRACER_IMAGE, an image with dask_podracer
installed. The GPU is asked of Slurm and Kubernetes for the workers only.

What is tested (tests/test_deployments.py, with dask-jobqueue and dask-kubernetes installed):
the sbatch script SLURMCluster writes and the DaskCluster spec built with dask-kubernetes'
`make_cluster_spec` (GPU request on the workers only, a worker command the installed
distributed ships, `--resources` that give segments their slot); dask-cuda's arguments are
checked against LocalCUDACluster's signature where dask-cuda is installed. Only `local`
runs a tournament in this project's CI: no Slurm, Kubernetes cluster or GPU has run the others.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Any

from dask_podracer.cli import OneLineArgumentParser
from dask_podracer.config import ClusterConfig, ConfigError, load_config
from dask_podracer.store import StoreError
from dask_podracer.population import ClusterError, check_without_cluster, run_tournament
from dask_podracer.population.cluster import GPU, worker_layout
from dask_podracer.population.preflight import first_line

if TYPE_CHECKING:
    from dask_jobqueue import SLURMCluster
    from distributed import LocalCluster
    from distributed.deploy import Cluster

PRELOAD = "dask_podracer.population.dashboard_preload"
WORKER_PRELOAD = "dask_podracer.population.worker_preload"  # Ctrl-C stops the client, not the workers
GPU_WORKER_RESOURCES = {GPU: 1}
"""What a worker of the cuda, slurm and kubernetes kinds advertises: its one GPU, one segment at a time."""
KUBERNETES_GPU = "nvidia.com/gpu"  # the NVIDIA device plugin's resource name
WORKER_ENVIRONMENT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
"""What the embedded cluster sets for its workers (population/connect.py), given to Slurm jobs and worker pods too:
a daemonic worker process may start no processes of its own, and gymnasium's async vector envs do."""


def gpu_worker_layout(cluster: ClusterConfig) -> tuple[int, int]:
    """Worker processes per GPU and threads per process for `cluster.segments_per_gpu` and `gpu_sharing`, as the
    embedded cluster lays out one GPU (`worker_layout`): N processes, or one process of N threads (each segment then
    asks for GPU=1/N, and preflight refuses a worker with fewer threads than that makes shares of its GPU)."""
    layout = worker_layout(dataclasses.replace(cluster, workers=0), gpus=1, cores=1)  # `--workers` counts jobs
    return layout.workers, layout.threads


def resources_arg(resources: dict[str, float]) -> str:
    """`--resources` of `dask worker`, e.g. "GPU=1"."""
    return ",".join(f"{name}={amount:g}" for name, amount in resources.items())


def local_cluster(workers: int, cluster: ClusterConfig | None = None) -> LocalCluster:
    """N worker processes on 127.0.0.1 without a GPU, each running `cluster.threads_per_worker` segments at a time,
    as the embedded cluster's do (`worker_layout`; it started one-thread workers whatever the config said)."""
    from distributed import LocalCluster

    layout = worker_layout(dataclasses.replace(cluster or ClusterConfig(), workers=workers), gpus=0, cores=1)
    return LocalCluster(n_workers=layout.workers, threads_per_worker=layout.threads, processes=True, host="127.0.0.1",
                        dashboard_address="127.0.0.1:0", resources=layout.resources,
                        scheduler_kwargs={"preload": [PRELOAD]}, preload=[WORKER_PRELOAD])


def cuda_cluster_kwargs(cluster: ClusterConfig | None = None) -> dict[str, Any]:
    """LocalCUDACluster's arguments: one worker per visible GPU (its default), each advertising that GPU, with a
    thread per segment that shares it (`gpu_sharing = "threads"`; LocalCUDACluster has no processes per GPU).

    `host`, `dashboard_address`, `resources` and `scheduler_kwargs` are LocalCluster's: LocalCUDACluster
    passes what it does not name on to it.
    """
    processes, threads = gpu_worker_layout(cluster or ClusterConfig())
    if processes > 1:
        raise ValueError(f"cuda starts one worker per GPU: cluster.segments_per_gpu = {processes} needs "
                         f"gpu_sharing = \"threads\" there")
    return {"threads_per_worker": threads, "host": "127.0.0.1", "dashboard_address": "127.0.0.1:0",
            "resources": dict(GPU_WORKER_RESOURCES), "scheduler_kwargs": {"preload": [PRELOAD]}}


def slurm_cluster(scheduler_options: dict[str, Any] | None = None,
                  cluster: ClusterConfig | None = None) -> SLURMCluster:
    """A SLURMCluster with no job yet: its scheduler runs in this process; `scale(jobs=N)` submits the workers.

    Each job owns one GPU: `--gres` asks Slurm for it and `--resources` advertises it, in each of the job's
    `cluster.segments_per_gpu` worker processes, or in its one worker of that many threads (`gpu_sharing`).
    The scheduler listens on the default interface, where the compute nodes reach it;
    `scheduler_options` overrides that (the tests bind it to 127.0.0.1). Edit the job options for your site.
    """
    from dask_jobqueue import SLURMCluster  # pip install dask-jobqueue

    gpus = GPU_WORKER_RESOURCES[GPU]
    processes, threads = gpu_worker_layout(cluster or ClusterConfig())
    # a thread runs each of the GPU's segments; the job still books 8 CPUs for its envs
    return SLURMCluster(cores=processes * threads, processes=processes, job_cpu=8, memory="64GB", walltime="04:00:00",
                        job_extra_directives=[f"--gres=gpu:{gpus:g}"],
                        job_script_prologue=[f"export {name}={value}" for name, value in WORKER_ENVIRONMENT.items()],
                        worker_extra_args=["--resources", resources_arg(GPU_WORKER_RESOURCES)],
                        scheduler_options={"preload": [PRELOAD], **(scheduler_options or {})})


def kubernetes_cluster_spec(workers: int, image: str, name: str = "podracer",
                            cluster: ClusterConfig | None = None) -> dict[str, Any]:
    """The DaskCluster resource for dask-kubernetes' operator: N worker pods with one GPU each, shared by
    `cluster.segments_per_gpu` worker processes of the pod or threads of its one worker (`gpu_sharing`).

    Built with `make_cluster_spec`, then corrected where its defaults do not fit: it gives `resources`
    to the scheduler's container too (the GPU limit goes on the worker's only), and it starts both
    with `dask-scheduler` / `dask-worker`, scripts distributed no longer ships (`dask scheduler`,
    `dask worker` replaced them).
    """
    from dask_kubernetes.operator import make_cluster_spec  # pip install dask-kubernetes

    processes, threads = gpu_worker_layout(cluster or ClusterConfig())
    spec = make_cluster_spec(name=name, image=image, n_workers=workers,
                             worker_command=["dask", "worker", "--resources", resources_arg(GPU_WORKER_RESOURCES),
                                             "--nthreads", str(threads), "--nworkers", str(processes)])
    worker = spec["spec"]["worker"]["spec"]["containers"][0]
    worker["resources"] = {"limits": {KUBERNETES_GPU: f"{GPU_WORKER_RESOURCES[GPU]:g}"}}
    worker["env"] = [{"name": name, "value": value} for name, value in WORKER_ENVIRONMENT.items()]  # it gave null
    scheduler = spec["spec"]["scheduler"]["spec"]["containers"][0]
    # 0.0.0.0 inside its pod, where the scheduler's Service reaches it
    scheduler["args"] = ["dask", "scheduler", "--host", "0.0.0.0", "--preload", PRELOAD]
    return spec


def make_cluster(kind: str, workers: int, cluster: ClusterConfig | None = None) -> Cluster:
    """A started cluster of `kind`, its GPU workers laid out as `cluster` shares a GPU; Slurm jobs are submitted
    and Kubernetes pods created here."""
    if kind == "local":
        return local_cluster(workers, cluster)
    if kind == "cuda":
        from dask_cuda import LocalCUDACluster  # pip install dask-cuda

        return LocalCUDACluster(**cuda_cluster_kwargs(cluster))
    if kind == "slurm":
        slurm = slurm_cluster(cluster=cluster)
        slurm.scale(jobs=workers)
        return slurm
    if kind == "kubernetes":
        from dask_kubernetes.operator import KubeCluster  # pip install dask-kubernetes

        spec = kubernetes_cluster_spec(workers, image=os.environ.get("PODRACER_IMAGE", "podracer:latest"),
                                       cluster=cluster)
        return KubeCluster(custom_cluster_spec=spec)
    raise ValueError(f"unknown cluster kind {kind!r}: local, cuda, slurm or kubernetes")


def _forget_failed_kube_cluster() -> None:
    """dask-kubernetes registers every KubeCluster it starts making with an atexit reaper, which closes it at
    exit; one that failed for want of credentials fails again there, with a traceback after our one-line error.
    Nothing was made, so nothing needs reaping."""
    import atexit

    try:
        from dask_kubernetes.operator.kubecluster import kubecluster
    except ImportError:
        return
    atexit.unregister(kubecluster.reap_clusters)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["local", "cuda", "slurm", "kubernetes"])
    parser.add_argument("config")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes (local), Slurm jobs or Kubernetes pods, default 2 (cuda: one a GPU); "
                             "not the config's cluster.workers, which sizes the embedded cluster")
    parser.add_argument("--budget")
    parser.add_argument("--store")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.workers < 1:
        print(f"clusters: error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
        overrides = {k: v for k, v in {"budget": args.budget, "store": args.store}.items() if v}
        config = config.replace(**overrides) if overrides else config
        check_without_cluster(config)  # before a cluster is asked of Slurm or Kubernetes
    except (ConfigError, StoreError) as e:
        print(f"clusters: error: {e}", file=sys.stderr)
        return 2
    try:
        cluster = make_cluster(args.kind, args.workers, config.cluster)
    except ImportError as e:
        package = (e.name or "its package").split(".")[0]  # dask_kubernetes, not dask_kubernetes.operator
        print(f"clusters: error: {args.kind} needs {package}: pip install it first", file=sys.stderr)
        return 2
    except (ValueError, OSError, RuntimeError) as e:  # no Kubernetes credentials, no sbatch, ...
        _forget_failed_kube_cluster()
        print(f"clusters: error: cannot make the {args.kind} cluster: {type(e).__name__}: {first_line(e)}",
              file=sys.stderr)
        return 2
    from distributed import Client

    try:
        with cluster, Client(cluster) as client:
            print(f"{args.kind} cluster: dashboard {client.dashboard_link}", flush=True)
            summary = run_tournament(config, client)
    except (ConfigError, StoreError, ClusterError) as e:
        print(f"clusters: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        import json
        from pathlib import Path

        Path(args.json).write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    print(f"stopped: {summary.stop_reason}; best {summary.best_score}; store {summary.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
