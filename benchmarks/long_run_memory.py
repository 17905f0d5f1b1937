"""Does anything grow with the length of a run? RSS, open file descriptors and threads of the client and of each
worker, sampled every `--every` segments of a real tournament of tiny segments.

    python benchmarks/long_run_memory.py [--segments 600] [--every 50] [--kind ppo|impala] [--tensorboard]
                                         [--dashboard] [--quick]

An embedded LocalCluster of 2 worker processes on 127.0.0.1 (as `podracer train` makes it) runs PPO on CartPole-v1
(`--kind impala`: IMPALA with actor tasks, 3 workers) with a few hundred env steps per segment and one evaluation
episode, to `run.max_segments`. `--tensorboard` adds `[logging] tensorboard`; `--dashboard` fetches the scheduler's
`/podracer.html` every 2 s from a thread while the run goes. The client's figures include the scheduler and the
nannies (they run in its process). Printed: one line per sample, then the slope of each figure per 100 segments
over the second half of the run (after warm-up), then one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import urllib.request
from typing import Any

import psutil

from dask_podracer.config import Config, config_from_dict
from dask_podracer.population import embedded_client, run_tournament
from dask_podracer.population.orchestrator import Progress


def process_figures(pid: int | None = None) -> dict[str, float]:
    """RSS (MiB), open fds and threads of a process (this one when `pid` is None)."""
    process = psutil.Process(pid or os.getpid())
    return {"rss_mib": process.memory_info().rss / 2**20, "fds": process.num_fds(), "threads": process.num_threads()}


def worker_figures() -> dict[str, float]:
    """Run on a worker by `client.run`: its process's figures."""
    return process_figures()


def tiny_config(store: str, kind: str, segments: int, tensorboard: str) -> Config:
    if kind == "impala":
        algorithm, workers = "impala", 3
        hparams = {"num_envs": 4, "rollout_steps": 16, "batch_rollouts": 1, "hidden": [16]}
        extra: dict[str, Any] = {"actors": {"workers": 2, "connect_timeout": 60.0}}
        env_steps = 512
    else:
        algorithm, workers = "ppo", 2
        hparams = {"num_envs": 4, "rollout_steps": 32, "epochs": 1, "num_minibatches": 1, "hidden": [16]}
        extra, env_steps = {}, 256
    return config_from_dict({
        "run": {"env": "CartPole-v1", "algorithm": algorithm, "store": store, "max_segments": segments,
                "budget": "10h", "seed": 0},
        "tournament": {"pool_size": 0 if kind != "impala" else 1, "perturb": ["learning_rate"],
                       "leaderboard_size": 8},
        "segment": {"env_steps": env_steps, "eval_episodes": 1, "torch_threads": 1, "device": "cpu"},
        "cluster": {"workers": workers, "dashboard_address": "127.0.0.1:0"},
        "hparams": hparams,
        "logging": {"tensorboard": tensorboard},
        **extra,
    })


class Sampler:
    """`on_progress`: every `every` segments (finished or failed), the figures of the client and each worker."""

    def __init__(self, client: Any, every: int) -> None:
        self.client, self.every = client, every
        self.samples: list[dict[str, Any]] = []
        self.next_at = 0

    def __call__(self, progress: Progress) -> None:
        done = progress.segments_completed + progress.segments_failed
        if done >= self.next_at:
            self.take(done)
            self.next_at = done + self.every

    def take(self, segments: int) -> None:
        workers = self.client.run(worker_figures)
        sample = {"segments": segments, "client": process_figures(),
                  "workers": [workers[address] for address in sorted(workers)]}
        self.samples.append(sample)
        print(format_sample(sample), flush=True)


def format_sample(sample: dict[str, Any]) -> str:
    def one(figures: dict[str, float]) -> str:
        return f"{figures['rss_mib']:7.1f} MiB {figures['fds']:4d} fd {figures['threads']:3d} thr"
    return f"seg {sample['segments']:5d} | client {one(sample['client'])} | " + " | ".join(
        f"w{i} {one(w)}" for i, w in enumerate(sample["workers"]))


def slope_per_100(samples: list[dict[str, Any]], pick) -> float:
    """Least-squares slope of `pick(sample)` per 100 segments, over the second half of the samples."""
    half = samples[len(samples) // 2:]
    if len(half) < 2:
        return 0.0
    xs = [s["segments"] for s in half]
    ys = [pick(s) for s in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 100.0 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def poll_dashboard(address: str, stop: threading.Event, fetched: list[int]) -> None:
    """Fetch the Podracer page every 2 s, as a browser left open on it would."""
    while not stop.wait(2.0):
        try:
            with urllib.request.urlopen(f"{address}/podracer.html", timeout=10) as page:
                page.read()
            fetched[0] += 1
        except OSError:
            fetched[1] += 1


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("rss_mib", "fds", "threads"):
        out[f"client_{name}_per_100"] = round(slope_per_100(samples, lambda s, n=name: s["client"][n]), 3)
        workers = len(samples[-1]["workers"])
        out[f"worker_{name}_per_100"] = [
            round(slope_per_100([s for s in samples if len(s["workers"]) == workers],
                                lambda s, n=name, i=i: s["workers"][i][n]), 3) for i in range(workers)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=600)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--kind", choices=["ppo", "impala"], default="ppo")
    parser.add_argument("--tensorboard", action="store_true")
    parser.add_argument("--dashboard", action="store_true")
    parser.add_argument("--quick", action="store_true", help="60 segments, sampled every 20")
    args = parser.parse_args()
    if args.quick:
        args.segments, args.every = 60, 20
    with tempfile.TemporaryDirectory() as tmp:
        config = tiny_config(f"{tmp}/run.zarr", args.kind, args.segments,
                             f"{tmp}/tb" if args.tensorboard else "")
        with embedded_client(config.cluster, config.segment.torch_threads) as client:
            sampler = Sampler(client, args.every)
            stop, fetched = threading.Event(), [0, 0]
            poller = threading.Thread(target=poll_dashboard, args=(client.dashboard_link.rsplit("/", 1)[0],
                                                                   stop, fetched), daemon=True)
            if args.dashboard:
                poller.start()
            started = time.perf_counter()
            try:
                summary = run_tournament(config, client, on_progress=sampler)
            finally:
                stop.set()
            seconds = time.perf_counter() - started
            sampler.take(summary.segments_completed + summary.segments_failed)
    figures = {"kind": args.kind, "segments": summary.segments_completed, "failed": summary.segments_failed,
               "seconds": round(seconds, 1), "tensorboard": args.tensorboard, "dashboard": args.dashboard,
               "dashboard_fetches": fetched[0], "dashboard_errors": fetched[1], **summarise(sampler.samples),
               "first": sampler.samples[0], "last": sampler.samples[-1]}
    for name, value in figures.items():
        if name not in ("first", "last"):
            print(f"{name}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
