"""Ape-X DQN against one-task DQN on CartPole-v1: wall-clock seconds to a return of 475 (issue 25).

    python benchmarks/apex_race.py --quick   # seed 0, apex and dqn-1, a 90 s budget each: under 4 minutes
    python benchmarks/apex_race.py           # seeds 0 1 2, apex, dqn-3 and dqn-1, a 4-minute budget per run
    python benchmarks/apex_race.py --setups apex dqn-3 --seeds 3 4 --budget 2m

Every run is a real tournament (`run_tournament`) on a fresh embedded LocalCluster (single-slot worker processes,
bound to 127.0.0.1, dashboard on a free port) with a fresh store in a temp dir, `run.target_return = 475` and a
wall-clock budget. The setups (`--setups`), all built from the shipped `workflows/configs/apex_cartpole.toml`:

- `apex`: that config as shipped (one learner task + 2 actor tasks on 3 worker processes, pool size 1, segments
  of 30,000 transitions, the actors on the epsilon ladder 0.1 and 0.01, at most 2 chunks each in flight), only
  seed, store, budget and the dashboard's address changed.
- `dqn-3`: one-task DQN on the same cluster, 3 worker processes with `pool_size = 3`: three DQN agents training
  at once, a population, each segment one task. Same `[hparams]` (num_envs 8, prioritised replay, learning_starts
  1000, utd_ratio 0.25, batch_size 64, learning_rate 2e-3, the rest defaults), same segments (30,000 env steps,
  10 evaluation episodes), same `perturb`; the Ape-X-only fields (`apex_*`, `[actors]`) are dropped and
  one-task DQN explores with its own decaying epsilon: `eps_start = 1.0`, `eps_end = 0.05` over
  `exploration_steps = 5000` env steps (the DQN tests' setting; the default is 10,000), or the schedule given
  with `--dqn-exploration START END STEPS` (`0.1 0.01 5000` spans the Ape-X ladder's range).
- `dqn-1`: the same one-task DQN on 1 worker process with `pool_size = 1`: one agent, no parallelism.

Runs alternate setups within each seed (apex seed 0, dqn-3 seed 0, [dqn-1 seed 0,] apex seed 1, ...) so that
load from other jobs on the machine falls on all setups alike; `os.getloadavg()` is recorded before and after
each run.

`s to target` is the tournament's own clock (it starts once the cluster is up and the workers were checked):
the `wall_seconds` of the first entry of the run's best-score curve (`RunSummary.history`, one entry per
finished segment) whose best evaluated score is >= 475; the tournament then stops with `stop_reason = "target"`.
A segment is evaluated only when it ends, so the time includes finishing the segment that got there. `total s`
adds the cluster's start-up and shut-down. A run that does not reach 475 within its budget shows `-` (null in the
JSON) and its best score. Each run's best-score curve is in the JSON (`curve`), and each finished segment's
score, training seconds and, where it reports them, `learner_busy_fraction` (the share of the training the
learner spent in updates), `transitions_per_s`, `policy_lag_median` and `learner_updates` (`segment_figures`).

The last line is JSON: the first seed's `apex_seconds_to_target` and `dqn_seconds_to_target` (dqn-1, or dqn-3
when dqn-1 did not run), one-task DQN's `dqn_exploration`, the loads, and every run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dask_podracer.config import Config, config_from_dict
from dask_podracer.population import run_tournament
from dask_podracer.store import PodracerStore

APEX_CONFIG = Path(__file__).parents[1] / "workflows/configs/apex_cartpole.toml"
TARGET = 475.0
DQN_EXPLORATION = {"eps_start": 1.0, "eps_end": 0.05, "exploration_steps": 5000}
"""One-task DQN's own exploration schedule: linear from 1.0 to 0.05 over 5,000 env steps (summed over envs)."""
SETUPS = ("apex", "dqn-3", "dqn-1")


def race_config(apex: Mapping[str, Any], setup: str, seed: int, store: str, budget: str,
                exploration: Mapping[str, Any] = DQN_EXPLORATION) -> dict[str, Any]:
    """The config (as a TOML-like dict) of one run of `setup`, built from the Ape-X config `apex`; one-task DQN
    explores with `exploration` (`eps_start`, `eps_end`, `exploration_steps`)."""
    data = copy.deepcopy(dict(apex))
    data["run"] = {**data["run"], "seed": seed, "store": store, "budget": budget, "target_return": TARGET}
    data["cluster"] = {**data.get("cluster", {}), "dashboard_address": "127.0.0.1:0"}
    if setup == "apex":
        return data
    if setup not in ("dqn-3", "dqn-1"):
        raise ValueError(f"unknown setup {setup!r}; one of {', '.join(SETUPS)}")
    processes = int(setup.split("-")[1])
    data.pop("actors", None)
    data["run"]["name"] = f"dqn-cartpole-{processes}"
    data["hparams"] = {k: v for k, v in data["hparams"].items() if not k.startswith("apex_")} | dict(exploration)
    data["tournament"] = {**data.get("tournament", {}), "pool_size": processes}
    data["cluster"]["workers"] = processes
    return data


def seconds_to_target(history: Sequence[Mapping[str, Any]], target: float) -> tuple[float, int] | None:
    """(wall_seconds, env_steps) of the first best-score curve entry at or above `target`; None if none is."""
    for point in history:
        best = point.get("best_score")
        if best is not None and best >= target:
            return float(point["wall_seconds"]), int(point["env_steps"])
    return None


def race_order(setups: Sequence[str], seeds: Sequence[int]) -> list[tuple[str, int]]:
    """Runs alternating setups within each seed: (apex, 0), (dqn-3, 0), (apex, 1), ..."""
    return [(setup, seed) for seed in seeds for setup in setups]


SEGMENT_METRICS = ("learner_busy_fraction", "transitions_per_s", "policy_lag_median", "learner_updates")
"""Per segment, where the segment reports them (the last three: Ape-X learners only)."""


def segment_figures(record: Mapping[str, Any]) -> dict[str, Any]:
    """A finished segment's score, training seconds and the metrics of SEGMENT_METRICS it has, rounded."""
    metrics = record.get("metrics") or {}
    figures = {"score": round(record["score"], 1), "train_seconds": round(record.get("train_seconds") or 0.0, 1)}
    return figures | {k: round(float(metrics[k]), 3) for k in SEGMENT_METRICS if k in metrics}


def run_one(apex: Mapping[str, Any], setup: str, seed: int, budget: str,
            exploration: Mapping[str, Any] = DQN_EXPLORATION) -> dict[str, Any]:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        config: Config = config_from_dict(race_config(apex, setup, seed, f"{tmp}/race.zarr", budget, exploration),
                                          source=f"apex_race:{setup}")
        started = time.perf_counter()
        summary = run_tournament(config)
        total = time.perf_counter() - started
        segments = [segment_figures(r) for r in PodracerStore(config.store_url).read_history()
                    if r.get("status") == "finished"]
    load_after = os.getloadavg()
    hit = seconds_to_target(summary.history, TARGET)
    return {
        "setup": setup, "seed": seed, "reached": hit is not None,
        "seconds_to_target": round(hit[0], 1) if hit else None, "env_steps_to_target": hit[1] if hit else None,
        "best_score": None if summary.best_score is None else round(summary.best_score, 1),
        "stop_reason": summary.stop_reason, "wall_seconds": round(summary.wall_seconds, 1),
        "env_steps": summary.env_steps, "segments": summary.segments_completed,
        "segments_failed": summary.segments_failed, "last_error": summary.last_error,
        "total_seconds": round(total, 1),
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
        "segment_figures": segments,
        # the best-score curve: [wall_seconds, env_steps, best score] after each finished segment
        "curve": [[round(p["wall_seconds"], 1), p["env_steps"],
                   None if p["best_score"] is None else round(p["best_score"], 1)] for p in summary.history],
    }


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="seed 0, apex and dqn-1, 90 s budget each")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 (quick: 0)")
    parser.add_argument("--setups", nargs="+", choices=SETUPS, default=None,
                        help="default apex dqn-3 dqn-1 (quick: apex dqn-1)")
    parser.add_argument("--budget", default=None, help='per run, default "4m" (quick: "90s")')
    parser.add_argument("--config", default=str(APEX_CONFIG), help="the Ape-X config the setups are built from")
    parser.add_argument("--dqn-exploration", nargs=3, type=float, metavar=("START", "END", "STEPS"),
                        default=None, help="one-task DQN's epsilon schedule (default 1.0 0.05 5000)")
    args = parser.parse_args()
    exploration = DQN_EXPLORATION if args.dqn_exploration is None else {
        "eps_start": args.dqn_exploration[0], "eps_end": args.dqn_exploration[1],
        "exploration_steps": int(args.dqn_exploration[2])}
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    setups = args.setups or (["apex", "dqn-1"] if args.quick else list(SETUPS))
    budget = args.budget or ("90s" if args.quick else "4m")
    apex = tomllib.loads(Path(args.config).read_text())
    print(f"CartPole-v1 to {TARGET:g}: setups {setups}, seeds {seeds}, budget {budget} per run; "
          f"{os.cpu_count()} cores; one-task DQN exploration {exploration}; hparams {apex['hparams']}",
          flush=True)
    print(f"{'setup':>6} {'seed':>4} {'reached':>7} {'s to target':>11} {'steps to target':>15} {'best':>6} "
          f"{'segments':>8} {'total s':>7}  load before -> after (1, 5, 15 min)", flush=True)
    runs = []
    for setup, seed in race_order(setups, seeds):
        r = run_one(apex, setup, seed, budget, exploration)
        runs.append(r)
        to = f"{r['seconds_to_target']:.1f}" if r["reached"] else "-"
        steps = f"{r['env_steps_to_target']:,}" if r["reached"] else "-"
        best = f"{r['best_score']:.1f}" if r["best_score"] is not None else "-"
        failed = f" ({r['segments_failed']} failed: {r['last_error']})" if r["segments_failed"] else ""
        print(f"{setup:>6} {seed:>4} {r['reached']!s:>7} {to:>11} {steps:>15} {best:>6} {r['segments']:>8} "
              f"{r['total_seconds']:>7.1f}  {r['load_before']} -> {r['load_after']}{failed}", flush=True)
    medians = {}
    for setup in setups:
        mine = [r for r in runs if r["setup"] == setup]
        times = [r["seconds_to_target"] for r in mine if r["reached"]]
        medians[setup] = _median(times)
        print(f"{setup}: reached {TARGET:g} in {len(times)}/{len(mine)} runs"
              + (f"; median {medians[setup]} s, max {max(times):.1f} s" if times else ""), flush=True)

    def first(setup: str) -> float | None:
        return next((r["seconds_to_target"] for r in runs if r["setup"] == setup), None)

    print(json.dumps({
        "target": TARGET, "budget": budget, "seeds": seeds, "dqn_exploration": exploration,
        "apex_seconds_to_target": first("apex"),
        "dqn_seconds_to_target": first("dqn-1") if "dqn-1" in setups else first("dqn-3"),
        "median_seconds_to_target": medians,
        "loads": [{"setup": r["setup"], "seed": r["seed"], "before": r["load_before"], "after": r["load_after"]}
                  for r in runs],
        "runs": runs,
    }))


if __name__ == "__main__":
    main()
