"""Store bytes and checkpoint count of a long tournament, with and without retention (`[store]`).

    python benchmarks/retention.py [--marks 50 200 1000] [--workers 2] [--quick]

Runs the same tournament twice on an embedded LocalCluster (127.0.0.1): SAC on Pendulum with short segments
(so that a thousand finish in minutes) and `tournament.replay = "copy"`, once with the default retention
(`keep_per_agent = 2`) and once with `retention = false`. Each run stops at each mark (segments recorded so
far) and resumes to the next, as a scheduled workflow resumes a store, and the bytes under `checkpoints/` and
the published checkpoints are counted at each mark. With retention the count stays at about
leaderboard_size + agents x (keep_per_agent + 1) once the board fills, whatever the number of segments.
`--quick`: marks 20 50 100. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from dask_podracer.config import config_from_dict
from dask_podracer.population import embedded_client, run_tournament
from dask_podracer.store import PodracerStore

CONFIG = {
    "segment": {"env_steps": 100, "eval_episodes": 2},
    "hparams": {"hidden": [32, 32], "num_envs": 2, "learning_starts": 50, "batch_size": 32, "buffer_size": 5_000},
    "tournament": {"leaderboard_size": 8, "perturb": ["actor_lr", "critic_lr"]},
    "cluster": {"dashboard_address": "127.0.0.1:0"},
}


def checkpoint_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "checkpoints").rglob("*") if p.is_file())


def run(store: Path, marks: list[int], retention: bool, workers: int) -> list[dict]:
    rows, done = [], 0
    config = {**CONFIG, "cluster": {**CONFIG["cluster"], "workers": workers}, "store": {"retention": retention}}
    with embedded_client(config_from_dict({**config, "run": {"env": "Pendulum-v1", "algorithm": "sac"}}).cluster) \
            as client:
        started = time.perf_counter()
        for mark in marks:
            run_config = config_from_dict({**config, "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "1h",
                                                             "max_segments": mark - done, "store": str(store)}})
            summary = run_tournament(run_config, client)
            done += summary.segments_completed + summary.segments_failed
            rows.append({"segments": done, "checkpoints": len(PodracerStore(store).checkpoint_keys()),
                         "bytes": checkpoint_bytes(store), "seconds": round(time.perf_counter() - started, 1)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--marks", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="marks 20 50 100")
    args = parser.parse_args()
    marks = [20, 50, 100] if args.quick else sorted(args.marks)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, retention in (("retention", True), ("keep all", False)):
            results[name] = run(Path(tmp) / f"{name.replace(' ', '_')}.zarr", marks, retention, args.workers)
    print(f"SAC on Pendulum, {CONFIG['segment']['env_steps']} env steps per segment, replay copy (buffer "
          f"{CONFIG['hparams']['buffer_size']:,}), leaderboard {CONFIG['tournament']['leaderboard_size']}, "
          f"{args.workers} workers")
    print("| segments | checkpoints, retention | MB, retention | checkpoints, keep all | MB, keep all |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for kept, everything in zip(results["retention"], results["keep all"], strict=True):
        print(f"| {kept['segments']:,} | {kept['checkpoints']} | {kept['bytes'] / 1e6:.1f} | "
              f"{everything['checkpoints']} | {everything['bytes'] / 1e6:.1f} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
