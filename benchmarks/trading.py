"""The trading tournament's champion against equal-weight buy-and-hold on the test period, seed by seed.

    python benchmarks/trading.py [--seeds 0 1 2 3 4] [--budget 10m] [--market synthetic|random_walk]
                                 [--config workflows/configs/stock_trading.toml] [--keep DIR] [--quick]

For each seed: the config's tournament with `run.seed` and the market's `market_seed` both set to the seed (so
every seed is another market drawn from the same generator), for `--budget` of wall-clock time on an embedded
LocalCluster; then workflows/backtest.py's figures for its champion (selected on the validation period) on the
test period, which no segment trained or was scored on. Prints one row per seed, then whether the champion's
test Sharpe beat buy-and-hold's, and two measures of significance: per seed, the t statistic of the daily
return difference (agent minus buy-and-hold) over the test days; over seeds, the mean Sharpe difference and its
t statistic. The last line is JSON. `--quick`: one seed, 60 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dask_podracer.config import load_config, parse_duration
from dask_podracer.population import run_tournament

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflows"))
from backtest import run as backtest_store


def excess_t(result: dict) -> float:
    """The t statistic of the mean daily return of the agent minus buy-and-hold's, over the backtest's days."""
    agent = np.asarray(result["curves"]["agent"])
    hold = np.asarray(result["curves"]["buy_and_hold"])
    diff = (agent[1:] / agent[:-1]) - (hold[1:] / hold[:-1])
    sd = diff.std(ddof=1)
    return float(diff.mean() / sd * math.sqrt(len(diff))) if sd > 0 else 0.0


def one_seed(base, seed: int, budget: float, market: str | None, store: str) -> dict:
    env_kwargs = {**base.run.env_kwargs, "market_seed": seed}
    if market:
        env_kwargs["market"] = market
    run = dataclasses.replace(base.run, seed=seed, store=store, budget=f"{budget}s",  # run.budget is a string
                              env_kwargs=env_kwargs)
    cluster = dataclasses.replace(base.cluster, dashboard_address="127.0.0.1:0")
    config = dataclasses.replace(base, run=run, cluster=cluster)
    started = time.perf_counter()
    summary = run_tournament(config)
    minutes = (time.perf_counter() - started) / 60
    result = backtest_store(store)
    return {"seed": seed, "market": env_kwargs.get("market", "synthetic"), "train_minutes": round(minutes, 2),
            "segments": summary.segments_completed, "env_steps": summary.env_steps, "champion": result["key"],
            "validation_score": result["validation_score"], "sharpe": result["sharpe"],
            "buy_and_hold_sharpe": result["buy_and_hold_sharpe"], "rebalanced_sharpe": result["rebalanced_sharpe"],
            "cumulative_return": result["cumulative_return"],
            "buy_and_hold_cumulative_return": result["buy_and_hold_cumulative_return"],
            "max_drawdown": result["max_drawdown"], "turnover": result["turnover"], "excess_t": excess_t(result),
            "beats_buy_and_hold": result["sharpe"] > result["buy_and_hold_sharpe"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "workflows/configs/stock_trading.toml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", default=None, help="wall-clock training per seed (default: the config's)")
    parser.add_argument("--market", choices=["synthetic", "random_walk"], default=None,
                        help="default: the config's market")
    parser.add_argument("--keep", help="keep each seed's store in this directory")
    parser.add_argument("--quick", action="store_true", help="one seed, 60 s")
    args = parser.parse_args()
    base = load_config(args.config)
    seeds = args.seeds[:1] if args.quick else args.seeds
    budget = 60.0 if args.quick else parse_duration(args.budget) if args.budget else base.run.budget_seconds
    print(f"config {args.config}: {base.run.algorithm} on {base.run.env} {base.run.env_kwargs}, "
          f"market {args.market or base.run.env_kwargs.get('market', 'synthetic')}, {budget:.0f} s per seed")
    print(f"{'seed':>4} {'min':>5} {'segs':>5} {'val score':>9} {'Sharpe':>7} {'B&H':>7} {'rebal':>7} {'cum':>7} "
          f"{'B&H cum':>7} {'maxDD':>6} {'turn':>6} {'t':>6} beats")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            where = Path(args.keep) if args.keep else Path(tmp)
            where.mkdir(parents=True, exist_ok=True)
            row = one_seed(base, seed, budget, args.market, str(where / f"seed{seed}.zarr"))
            rows.append(row)
            print(f"{seed:>4} {row['train_minutes']:>5.1f} {row['segments']:>5} {row['validation_score']:>9.1f} "
                  f"{row['sharpe']:>7.2f} {row['buy_and_hold_sharpe']:>7.2f} {row['rebalanced_sharpe']:>7.2f} "
                  f"{row['cumulative_return']:>+7.1%} {row['buy_and_hold_cumulative_return']:>+7.1%} "
                  f"{row['max_drawdown']:>6.1%} {row['turnover']:>6.1%} {row['excess_t']:>6.2f} "
                  f"{'yes' if row['beats_buy_and_hold'] else 'no'}", flush=True)
    differences = [r["sharpe"] - r["buy_and_hold_sharpe"] for r in rows]
    mean_difference = statistics.mean(differences)
    t_over_seeds = (mean_difference / (statistics.stdev(differences) / math.sqrt(len(differences)))
                    if len(differences) > 1 and statistics.stdev(differences) > 0 else float("nan"))
    wins = sum(r["beats_buy_and_hold"] for r in rows)
    print(f"champion's test Sharpe above buy-and-hold's in {wins} of {len(rows)} seeds; mean difference "
          f"{mean_difference:+.2f} (t over seeds {t_over_seeds:.2f})")
    print(json.dumps({"budget_seconds": budget, "wins": wins, "seeds": len(rows), "mean_sharpe_difference":
                      mean_difference, "t_over_seeds": None if math.isnan(t_over_seeds) else t_over_seeds,  # JSON: null
                      "rows": rows}))


if __name__ == "__main__":
    main()
