"""Time to -200 of the shipped Pendulum tournament on an embedded LocalCluster.

    python benchmarks/pendulum_tournament.py [--seeds 0 1 2] [--config workflows/configs/pendulum.toml]

Runs the config once per seed on a fresh store and prints, per run: wall-clock seconds
from the first submit to the first segment whose evaluation reached the target, the env
steps and segments it took, and the whole command's time including cluster start-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from dask_podracer.config import load_config
from dask_podracer.population import run_tournament


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(Path(__file__).parents[1] / "workflows/configs/pendulum.toml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    base = load_config(args.config)
    print(f"config {args.config}: {base.run.algorithm} on {base.run.env}, target {base.run.target_return}, "
          f"budget {base.run.budget}")
    print(f"{'seed':>4} {'reached':>8} {'best':>8} {'s to target':>11} {'env steps':>9} {'segments':>8} {'total s':>8}")
    times = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            config = dataclasses.replace(base, run=dataclasses.replace(base.run, seed=seed, store=f"{tmp}/b.zarr"))
            started = time.perf_counter()
            summary = run_tournament(config)
            total = time.perf_counter() - started
        reached = summary.stop_reason == "target"
        if reached:
            times.append(summary.wall_seconds)
        print(f"{seed:>4} {reached!s:>8} {summary.best_score:>8.1f} {summary.wall_seconds:>11.1f} "
              f"{summary.env_steps:>9,} {summary.segments_completed:>8} {total:>8.1f}", flush=True)
    if times:
        print(f"reached the target in {len(times)}/{len(args.seeds)} runs; median {statistics.median(times):.1f} s, "
              f"max {max(times):.1f} s")


if __name__ == "__main__":
    main()
