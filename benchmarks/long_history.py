"""What a long run's history costs the commands that read it: `podracer status`, `leaderboard`, `lineage`,
`tensorboard`, and logging the whole history to a local MLflow store.

    python benchmarks/long_history.py [--records 6000] [--agents 100] [--quick]

Writes a synthetic history of `--records` finished segments (one in 50 failed) of `--agents` agents taking turns,
each with SAC's hyper-parameters and a learner's metrics, into a fresh store (no training: the records are what a
run of that length leaves), then times each command on it in this process. MLflow is timed only where it is
installed. `--quick`: 600 records of 20 agents. The last line is JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import tempfile
import time
from pathlib import Path

from dask_podracer.cli import main
from dask_podracer.config import LoggingConfig
from dask_podracer.store import PodracerStore
from dask_podracer.tracking import open_trackers

HPARAMS = {"actor_lr": 3e-4, "critic_lr": 3e-4, "gamma": 0.99, "tau": 0.005, "batch_size": 256, "hidden": [256, 256],
           "num_envs": 8, "utd_ratio": 1.0}
METRICS = {"actor_loss": -12.5, "critic_loss": 0.8, "alpha": 0.05, "entropy": 1.2, "learner_busy": 0.9}


def history(records: int, agents: int, seed: int = 0) -> list[dict]:
    """`records` history records of `agents` agents in turn, each a child of its agent's previous segment."""
    rng, last, out = random.Random(seed), {}, []
    for i in range(records):
        agent = i % agents
        record = {"key": f"s{i:06d}-{rng.getrandbits(32):08x}", "agent": agent, "group": "default",
                  "parent": last.get(agent), "generation": i // agents, "status": "finished",
                  "score": -1500 + 1.3 * i / agents + rng.random(), "lineage_env_steps": 3000 * (i // agents + 1),
                  "run_env_steps": 3000 * (i + 1), "segment_env_steps": 3000, "train_seconds": 2.5,
                  "wall_seconds": 10.0 + 0.5 * i, "algorithm": "sac", "env": "Pendulum-v1",
                  "hparams": {**HPARAMS, "actor_lr": HPARAMS["actor_lr"] * (0.5 + rng.random())},
                  "metrics": dict(METRICS)}
        if i % 50 == 7:
            record.update(status="failed", score=None, error="SegmentError: a failed segment")
        else:
            last[agent] = record["key"]
        out.append(record)
    return out


def timed(argv: list[str]) -> float:
    """Seconds `podracer ARGV` takes in this process, its output swallowed."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"podracer {' '.join(argv)} exited {code}")
    return time.perf_counter() - start


def mlflow_seconds(store: PodracerStore, records: list[dict], directory: Path) -> float | None:
    try:
        trackers = open_trackers(LoggingConfig(mlflow=str(directory / "mlflow")), "long", store.url, origin=0.0)
    except Exception as e:  # not installed: say so, time the rest
        print(f"mlflow: not timed ({e})")
        return None
    start = time.perf_counter()
    with trackers:
        trackers.record(records)
    return time.perf_counter() - start


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=6000)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="600 records of 20 agents")
    args = parser.parse_args()
    if args.quick:
        args.records, args.agents = 600, 20
    if args.records < 1 or args.agents < 1:
        parser.error("--records and --agents must be >= 1")
    return args


def run(records: int, agents: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        store = PodracerStore(str(directory / "long.zarr"), create=True)
        written = history(records, agents)
        start = time.perf_counter()
        store.extend_history(written)
        figures = {"records": records, "agents": agents, "write_history_s": time.perf_counter() - start}
        start = time.perf_counter()
        assert len(store.read_history()) == records
        figures["read_history_s"] = time.perf_counter() - start
        newest = next(r["key"] for r in reversed(written) if r["status"] == "finished")
        figures["status_s"] = timed(["status", store.url])
        figures["leaderboard_s"] = timed(["leaderboard", store.url])
        figures["lineage_s"] = timed(["lineage", store.url, newest])
        figures["tensorboard_s"] = timed(["tensorboard", store.url, "--out", str(directory / "tb")])
        figures["tensorboard_event_files"] = len(list((directory / "tb").rglob("events.out.tfevents.*")))
        figures["mlflow_s"] = mlflow_seconds(store, written, directory)
    return figures


def main_() -> None:
    args = parse()
    figures = run(args.records, args.agents)
    for name, value in figures.items():
        print(f"{name:>24}: {value:.2f}" if isinstance(value, float) else f"{name:>24}: {value}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main_()
