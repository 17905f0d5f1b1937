"""The population's total env steps/s on one device, with N members training on it at once.

    python benchmarks/gpu_members.py [--members 1 2 4 8] [--sharing processes threads] [--device cuda|cpu]
                                     [--segments 4] [--mps] [--quick] [--config workflows/configs/pendulum.toml]

(`--quick`: one segment per member, 2 evaluation episodes, 1 2 4 members unless `--members` says; about 2 to 5
minutes on a loaded 2-core machine with `--device cpu`: a rehearsal of the script, not a figure.)

For each N and each way of sharing (`cluster.segments_per_gpu = N`, `cluster.gpu_sharing`), runs the shipped
Pendulum SAC tournament (its config, `tournament.pool_size = N`, no target) on a LocalCluster laid out as the
embedded one lays out one GPU (`worker_layout`): "processes", N worker processes advertising GPU=1 each;
"threads", one worker process of N threads whose segments each ask for GPU=1/N. Every segment trains on the
one `--device` (`cuda:0`, or `cpu`: a rehearsal of the same code without a GPU, where "GPU" is only the
resource the workers advertise). Each member trains `--segments` segments (`run.max_segments` = N x that).

Printed per run: the population's env steps per wall-clock second from the tournament loop's start (after
the workers started and passed preflight: evaluation, checkpoints and the orchestrator's bookkeeping
included), the same per member, and the training-only rate of one segment (its env steps over its
`train_seconds`, the median over the run's segments). The last line is JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from distributed import Client, LocalCluster

from dask_podracer.config import GPU_SHARING, Config, load_config
from dask_podracer.population import run_tournament
from dask_podracer.population.cluster import worker_layout
from dask_podracer.population.gpu_mps import mps_daemon
from dask_podracer.store import PodracerStore


def members_config(base: Config, members: int, sharing: str, device: str, segments: int, store: str,
                   eval_episodes: int | None) -> Config:
    """`base` with `members` segments on one device at once, each member training `segments` segments."""
    run = dataclasses.replace(base.run, store=store, target_return=None, max_segments=members * segments,
                              budget="1h")  # the segments bound the run, not the clock
    segment = dataclasses.replace(base.segment, device=device,
                                  eval_episodes=eval_episodes or base.segment.eval_episodes)
    tournament = dataclasses.replace(base.tournament, pool_size=members, pending=0)
    cluster = dataclasses.replace(base.cluster, workers=0, segments_per_gpu=members, gpu_sharing=sharing,
                                  dashboard_address="127.0.0.1:0")
    return dataclasses.replace(base, run=run, segment=segment, tournament=tournament, cluster=cluster)


def measure(config: Config) -> dict[str, Any]:
    """One run on a fresh LocalCluster laid out for one GPU shared as `config.cluster` says."""
    layout = worker_layout(config.cluster, gpus=1, cores=os.cpu_count() or 1)
    started = time.perf_counter()
    with (LocalCluster(n_workers=layout.workers, threads_per_worker=layout.threads, processes=True,
                       host="127.0.0.1", dashboard_address="127.0.0.1:0", resources=layout.resources,
                       silence_logs=logging.CRITICAL) as cluster,
          Client(cluster) as client):
        summary = run_tournament(config, client)
    history = [r for r in PodracerStore(config.store_url).read_history() if r["status"] == "finished"]
    train_rates = [r["segment_env_steps"] / r["train_seconds"] for r in history if r.get("train_seconds")]
    members = config.tournament.pool_size
    rate = summary.env_steps / summary.wall_seconds
    return {
        "members": members, "sharing": config.cluster.gpu_sharing,
        "workers": layout.workers, "threads_per_worker": layout.threads, "resources": layout.resources,
        "env_steps": summary.env_steps, "segments": summary.segments_completed, "failed": summary.segments_failed,
        "wall_seconds": round(summary.wall_seconds, 2), "total_seconds": round(time.perf_counter() - started, 2),
        "env_steps_per_s": round(rate, 1), "env_steps_per_s_per_member": round(rate / members, 1),
        "segment_train_steps_per_s": round(statistics.median(train_rates), 1) if train_rates else None,
        "last_error": summary.last_error,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(Path(__file__).parents[1] / "workflows/configs/pendulum.toml"))
    parser.add_argument("--members", type=int, nargs="+", help="members on the device at once (default 1 2 4 8; "
                        "1 2 4 with --quick)")
    parser.add_argument("--sharing", nargs="+", choices=GPU_SHARING, default=list(GPU_SHARING))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--segments", type=int, default=4, help="segments each member trains (default 4)")
    parser.add_argument("--mps", action="store_true",
                        help="run NVIDIA's MPS daemon while the members train, as `cluster.mps = true` does for the "
                        "embedded cluster (population/gpu_mps.py)")
    parser.add_argument("--quick", action="store_true",
                        help="one segment per member, 2 evaluation episodes, and 1 2 4 members unless --members "
                        "says: a rehearsal, not a figure")
    args = parser.parse_args()
    args.members = args.members or ([1, 2, 4] if args.quick else [1, 2, 4, 8])
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here (use --device cpu to rehearse)")
    if any(n < 1 for n in args.members) or args.segments < 1:
        parser.error("--members and --segments must be >= 1")
    segments, eval_episodes = (1, 2) if args.quick else (args.segments, None)
    device = "cuda:0" if args.device == "cuda" else "cpu"
    base = load_config(args.config)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"config {args.config}: {base.run.algorithm} on {base.run.env}, {base.segment.env_steps} env steps per "
          f"segment, {segments} segment(s) per member, on {device} ({name}); {os.cpu_count()} CPU cores",
          flush=True)
    print(f"{'members':>7} {'sharing':>9} {'workers x threads':>17} {'env steps':>9} {'wall s':>7} {'steps/s':>8} "
          f"{'per member':>10} {'segment train steps/s':>21}", flush=True)
    results = []
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    for members in args.members:
        for sharing in args.sharing:
            # the daemon starts before each run's worker processes, as the embedded cluster's would
            with tempfile.TemporaryDirectory() as tmp, mps_daemon(args.mps, gpus) as mps:
                config = members_config(base, members, sharing, device, segments, f"{tmp}/m.zarr", eval_episodes)
                row = measure(config) | {"mps": mps}
            results.append(row)
            print(f"{members:>7} {sharing:>9} {row['workers']:>8} x {row['threads_per_worker']:<6} "
                  f"{row['env_steps']:>9,} {row['wall_seconds']:>7.1f} {row['env_steps_per_s']:>8.0f} "
                  f"{row['env_steps_per_s_per_member']:>10.0f} {row['segment_train_steps_per_s'] or 0:>21.0f}"
                  + (f"  ({row['failed']} failed: {row['last_error']})" if row["failed"] else ""), flush=True)
    fastest = {str(n): max((r for r in results if r["members"] == n), key=lambda r: r["env_steps_per_s"])["sharing"]
               for n in args.members}
    print(json.dumps({"benchmark": "gpu_members", "device": device, "device_name": name, "quick": args.quick,
                      "segments_per_member": segments, "env_steps_per_segment": base.segment.env_steps,
                      "cpu_cores": os.cpu_count(), "results": results, "fastest_sharing": fastest}))


if __name__ == "__main__":
    main()
