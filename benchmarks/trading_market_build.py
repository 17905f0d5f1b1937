"""Seconds to build StockTrading-v0 on a generated market of many assets: what `podracer train` spends on the
client's preflight, and each worker on its first segment, before any trading (its indicators and turbulence index).

    python benchmarks/trading_market_build.py [--sizes 200x400 400x400 1000x2500] [--csv 300x2500] [--quick]

Each size is ASSETSxDAYS; every build is of a fresh market (its own `market_seed`, so the per-process cache does
not answer). `--csv ASSETSxDAYS` also writes a CSV file of that many tickers and dates (a random walk, in a
temporary directory) and times reading it (`load_ohlcv`: the checks of every row). `--quick`: 200x400 and
400x400 only. The last line is JSON: {"ASSETSxDAYS": seconds, ..., "csv ASSETSxDAYS": seconds}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.trading import load_ohlcv


def build_seconds(assets: int, days: int, seed: int) -> float:
    start = time.perf_counter()
    make_vec_env("StockTrading-v0", 2, assets=assets, days=days, market_seed=seed)
    return time.perf_counter() - start


def csv_load_seconds(assets: int, days: int) -> float:
    close = 100 * np.exp(np.cumsum(np.random.default_rng(0).normal(0, 0.01, (days, assets)), axis=0))
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "prices.csv"
        with path.open("w") as f:
            f.write("date,ticker,open,high,low,close,volume\n")
            for t in range(days):
                date = (datetime.date(2000, 1, 1) + datetime.timedelta(days=t)).isoformat()
                f.writelines(f"{date},T{j:04d},{c:.4f},{c * 1.01:.4f},{c * 0.99:.4f},{c:.4f},1000\n"
                             for j, c in enumerate(close[t]))
        start = time.perf_counter()
        load_ohlcv(path)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["200x400", "400x400", "1000x2500"])
    parser.add_argument("--csv", metavar="ASSETSxDAYS")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = ["200x400", "400x400"] if args.quick else args.sizes
    figures = {}
    for seed, size in enumerate(sizes):
        assets, days = (int(n) for n in size.split("x"))
        figures[size] = round(build_seconds(assets, days, seed), 2)
        print(f"{assets:>6} assets x {days:>5} days: {figures[size]:.2f} s", flush=True)
    if args.csv and not args.quick:
        assets, days = (int(n) for n in args.csv.split("x"))
        figures[f"csv {args.csv}"] = round(csv_load_seconds(assets, days), 2)
        print(f"reading a CSV of {assets:,} tickers x {days:,} dates: {figures[f'csv {args.csv}']:.2f} s", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
