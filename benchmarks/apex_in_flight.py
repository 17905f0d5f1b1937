"""Policy lag of Ape-X TD3 on Pendulum-v1 with and without a bound on the rollouts in flight (`actors.max_in_flight`).

    python benchmarks/apex_in_flight.py [--seeds 0 1] [--bounds 0 2] [--env-steps 4000]

Per seed and bound, one segment of `--env-steps` transitions from 2 actor tasks to one learner task (the hparams of
workflows/configs/apex_pendulum.toml) on an embedded LocalCluster of 3 single-slot worker processes, bound to
127.0.0.1. Prints, per run, the segment's score (10 evaluation episodes), its policy lag (median, p95, max, in
learner updates), how busy the learner was and the load average at the start; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from dask.distributed import Client, LocalCluster

from dask_podracer.config import config_from_dict, load_config
from dask_podracer.population import run_tournament
from dask_podracer.store import PodracerStore

CONFIG = Path(__file__).resolve().parents[1] / "workflows" / "configs" / "apex_pendulum.toml"
LAG = ("policy_lag_median", "policy_lag_p95", "policy_lag_max", "learner_updates", "learner_busy_fraction")


def one_run(client: Client, seed: int, bound: int, env_steps: int) -> dict:
    shipped = load_config(CONFIG)
    with tempfile.TemporaryDirectory() as folder:
        config = config_from_dict({
            "run": {"env": shipped.run.env, "algorithm": shipped.run.algorithm, "store": f"{folder}/apex.zarr",
                    "budget": "15m", "max_segments": 1, "seed": seed},
            "tournament": {"pool_size": 1}, "segment": {"env_steps": env_steps, "eval_episodes": 10},
            "hparams": dict(shipped.hparams), "actors": {"workers": 2, "max_in_flight": bound}})
        load = os.getloadavg()[0]
        started = time.perf_counter()
        summary = run_tournament(config, client)
        if summary.segments_completed != 1:
            raise SystemExit(f"seed {seed}, max_in_flight {bound}: the segment failed: {summary.last_error}")
        (record,) = PodracerStore(config.store_url).read_history()
    metrics = record["metrics"]
    return {"seed": seed, "max_in_flight": bound, "score": round(record["score"], 1),
            "train_seconds": round(record["train_seconds"], 1), "wall_seconds": round(time.perf_counter() - started, 1),
            "load_average": round(load, 1), **{k: metrics.get(k) for k in LAG}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--bounds", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--env-steps", type=int, default=4000)
    args = parser.parse_args(argv)
    rows = []
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                      resources={"CPU": 1}) as cluster, Client(cluster) as client:
        for seed in args.seeds:
            for bound in args.bounds:  # alternated, so that other load falls on both alike
                row = one_run(client, seed, bound, args.env_steps)
                rows.append(row)
                print(f"seed {seed} max_in_flight {bound}: score {row['score']}, lag median/p95/max "
                      f"{row['policy_lag_median']:.0f}/{row['policy_lag_p95']:.0f}/{row['policy_lag_max']:.0f} of "
                      f"{row['learner_updates']:.0f} updates, learner busy {row['learner_busy_fraction']:.1%}, "
                      f"load {row['load_average']}", flush=True)
    print(json.dumps({"runs": rows}))


if __name__ == "__main__":
    main()
