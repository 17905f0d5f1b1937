"""Seconds to build StockTrading-v0 on a generated market of many assets: what `podracer train` spends on the
client's preflight, and each worker on its first segment, before any trading (its indicators and turbulence index).

    python benchmarks/trading_market_build.py [--sizes 200x400 400x400 1000x2500] [--quick]

Each size is ASSETSxDAYS; every build is of a fresh market (its own `market_seed`, so the per-process cache does
not answer). `--quick`: 200x400 and 400x400 only. The last line is JSON: {"ASSETSxDAYS": seconds, ...}.
"""

from __future__ import annotations

import argparse
import json
import time

from dask_podracer.envs import make_vec_env


def build_seconds(assets: int, days: int, seed: int) -> float:
    start = time.perf_counter()
    make_vec_env("StockTrading-v0", 2, assets=assets, days=days, market_seed=seed)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["200x400", "400x400", "1000x2500"])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = ["200x400", "400x400"] if args.quick else args.sizes
    figures = {}
    for seed, size in enumerate(sizes):
        assets, days = (int(n) for n in size.split("x"))
        figures[size] = round(build_seconds(assets, days, seed), 2)
        print(f"{assets:>6} assets x {days:>5} days: {figures[size]:.2f} s", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
