"""Run a tournament on a cluster made by one of Dask's deployment projects.

    python workflows/clusters.py KIND CONFIG [--workers N] [--budget 30m] [--store URL] [--json SUMMARY]

KIND is one of:
  local       a LocalCluster of worker processes on 127.0.0.1 (what `podracer train` embeds)
  cuda        dask-cuda's LocalCUDACluster: one worker per GPU, each advertising GPU=1
  slurm       dask-jobqueue's SLURMCluster: N jobs of one worker, each with one GPU (edit the job options below)
  kubernetes  dask-kubernetes' KubeCluster (operator): N worker pods with one GPU each (edit the spec below)

Each worker advertises the resource a segment asks for (`GPU=1`, or `CPU=1` for `local`
without GPUs), and the store must be reachable by every worker: a shared filesystem path
for slurm, an object-store URL (s3://..., gs://...) for kubernetes. Every scheduler
preloads the live Podracer page of the Dask dashboard (`dask_podracer.population.dashboard_preload`);
on kubernetes the scheduler and worker pods run PODRACER_IMAGE, an image with dask_podracer
installed. Only `local` runs in this project's CI; the others follow those projects'
documented APIs (dask-cuda 26.x, dask-jobqueue 0.9, dask-kubernetes 2026.x) and have not
been run here (no GPU, Slurm or Kubernetes in CI).
"""

from __future__ import annotations

import argparse
import sys

from dask_podracer.config import ConfigError, load_config
from dask_podracer.population import run_tournament

PRELOAD = "dask_podracer.population.dashboard_preload"


def make_cluster(kind: str, workers: int):
    if kind == "local":
        from distributed import LocalCluster

        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                            dashboard_address="127.0.0.1:0", resources={"CPU": 1},
                            scheduler_kwargs={"preload": [PRELOAD]})
    if kind == "cuda":
        from dask_cuda import LocalCUDACluster  # pip install dask-cuda

        return LocalCUDACluster(threads_per_worker=1, resources={"GPU": 1}, dashboard_address="127.0.0.1:0",
                                scheduler_kwargs={"preload": [PRELOAD]})
    if kind == "slurm":
        from dask_jobqueue import SLURMCluster  # pip install dask-jobqueue

        # the scheduler runs here, in this process; each job is one worker owning one GPU
        cluster = SLURMCluster(cores=8, processes=1, memory="64GB", walltime="04:00:00",
                               job_extra_directives=["--gres=gpu:1"],
                               worker_extra_args=["--resources", "GPU=1", "--nthreads", "1"],
                               scheduler_options={"preload": [PRELOAD]})
        cluster.scale(jobs=workers)
        return cluster
    if kind == "kubernetes":
        import os

        from dask_kubernetes.operator import KubeCluster  # pip install dask-kubernetes

        # `env` reaches the scheduler pod too: Dask reads its config from DASK_* variables
        return KubeCluster(name="podracer", image=os.environ.get("PODRACER_IMAGE", "podracer:latest"),
                           n_workers=workers, resources={"limits": {"nvidia.com/gpu": "1"}},
                           worker_command=["dask-worker", "--resources", "GPU=1", "--nthreads", "1"],
                           env={"DASK_DISTRIBUTED__SCHEDULER__PRELOAD": f'["{PRELOAD}"]'})
    raise ValueError(f"unknown cluster kind {kind!r}: local, cuda, slurm or kubernetes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["local", "cuda", "slurm", "kubernetes"])
    parser.add_argument("config")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget")
    parser.add_argument("--store")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        overrides = {k: v for k, v in {"budget": args.budget, "store": args.store}.items() if v}
        config = config.replace(**overrides) if overrides else config
    except ConfigError as e:
        print(f"clusters: error: {e}", file=sys.stderr)
        return 2
    try:
        cluster = make_cluster(args.kind, args.workers)
    except ImportError as e:
        print(f"clusters: error: {args.kind} needs {e.name}: pip install it first", file=sys.stderr)
        return 2
    from distributed import Client

    with cluster, Client(cluster) as client:
        print(f"{args.kind} cluster: dashboard {client.dashboard_link}", flush=True)
        summary = run_tournament(config, client)
    if args.json:
        import json
        from pathlib import Path

        Path(args.json).write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    print(f"stopped: {summary.stop_reason}; best {summary.best_score}; store {summary.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
