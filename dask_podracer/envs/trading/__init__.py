"""Stock trading: a vectorised portfolio env (env.py) over a synthetic or a user's market (synthetic.py,
ohlcv.py), with indicators that never read a later date (indicators.py) and metrics for a backtest
(metrics.py). `make_stock_trading` is what the registry builds as "StockTrading-v0"; docs/trading.md."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import torch

from dask_podracer.envs.devices import check_buffer_fits
from dask_podracer.envs.trading import indicators
from dask_podracer.envs.trading.env import StockTradingVecEnv, checked_number, execute
from dask_podracer.envs.trading.market import DEFAULT_SPLIT, PERIODS, Market
from dask_podracer.envs.trading.ohlcv import MarketDataError, load_ohlcv
from dask_podracer.envs.trading.synthetic import random_walk_market, trending_market

GENERATORS = {"synthetic": trending_market, "random_walk": random_walk_market}


def make_market(market: str = "synthetic", assets: int = 20, days: int = 2000, market_seed: int = 0) -> Market:
    """The market a config names: "synthetic" (trending, the default), "random_walk" (the control), or the path
    of a CSV or Parquet OHLCV file (then `assets`, `days` and `market_seed` are not used). Cached per process."""
    if not isinstance(market, (str, os.PathLike)):  # was Path()'s TypeError, naming no field
        raise ValueError(f"market must be one of {sorted(GENERATORS)} or the path of a .csv or .parquet file, "
                         f"got {market!r}")
    if market in GENERATORS:
        # assets = 0 was a ZeroDivisionError (a traceback), 2.5 silently 2, -1 numpy's "negative dimensions"
        checked_number("assets", assets, integer=True, low=1)
        checked_number("days", days, integer=True, low=1)
        checked_number("market_seed", market_seed, integer=True, low=0)
        _check_market_fits(int(assets), int(days))
        return _generated(market, int(assets), int(days), int(market_seed))
    path = Path(market)
    if path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise ValueError(f"market must be one of {sorted(GENERATORS)} or the path of a .csv or .parquet file, "
                         f"got {market!r}")
    try:
        stat = os.stat(path)
    except OSError as e:
        raise MarketDataError(f"{path}: cannot read it ({e.strerror})") from None
    return _loaded(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


OHLCV_BYTES = 5 * 8
"""A generated market's floor per date and asset: its open, high, low, close and volume in float64."""


def _check_market_fits(assets: int, days: int) -> None:
    """A MemoryError naming `assets` and `days` when their market alone is more than this machine's memory:
    `assets = 1000000` asked numpy for 149 GiB, and `days = 2e10` ran a Python loop over every day first."""
    check_buffer_fits(assets * days * OHLCV_BYTES, torch.device("cpu"), f"a generated market of assets = {assets:,} "
                      f"and days = {days:,} (OHLCV in float64)")


@functools.lru_cache(maxsize=8)
def _generated(kind: str, assets: int, days: int, seed: int) -> Market:
    return GENERATORS[kind](assets=assets, days=days, seed=seed)


@functools.lru_cache(maxsize=4)
def _loaded(path: str, mtime_ns: int, size: int) -> Market:
    return load_ohlcv(path)


def market_file_sha256(market: str) -> str | None:
    """The SHA-256 of a market file's bytes (hex); None for a generated market or a file that cannot be read (building
    the env names why). Cached per version of the file (its modification time and size)."""
    if not isinstance(market, (str, os.PathLike)) or market in GENERATORS:
        return None
    path = Path(market)
    try:
        stat = os.stat(path)
        return _sha256(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def pin_market(kwargs: dict) -> dict:
    """`kwargs` of StockTrading-v0 with `market_sha256` added where `market` is a file: a run pins its market's
    content so that a file changed while it runs, or before it resumes, is refused rather than mixed in."""
    if "market_sha256" in kwargs:
        return kwargs
    sha256 = market_file_sha256(kwargs.get("market", "synthetic"))
    return kwargs if sha256 is None else {**kwargs, "market_sha256": sha256}


def make_stock_trading(num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, *,
                       market: str = "synthetic", assets: int = 20, days: int = 2000, market_seed: int = 0,
                       split: list[float] | list[str] = DEFAULT_SPLIT, market_sha256: str | None = None,
                       **options) -> StockTradingVecEnv:
    """`num_envs` portfolios on the market `make_market(market, assets, days, market_seed)`; `split` says where
    validation and test start; `market_sha256`, where given, is the content the market file must have (a run sets
    it: `pin_market`); `options` are StockTradingVecEnv's (period, episode_days, initial_cash, score, max_shares,
    cost, reward_scale, turbulence, turbulence_threshold, turbulence_quantile, dtype)."""
    if not isinstance(split, (list, tuple)):  # "0.7,0.85" was cut into characters, 0.7 a TypeError, a dict its keys
        raise ValueError(f"split must be a list of two fractions or two dates (where validation and test start), "
                         f"got {split!r}")
    if market_sha256 is not None:
        _check_market_content(market, market_sha256)
    return StockTradingVecEnv(num_envs, device, seed, market=make_market(market, assets, days, market_seed),
                              split=tuple(split), **options)


def _check_market_content(market: str, expected: str) -> None:
    """A MarketDataError unless the market file's bytes have the SHA-256 `expected` (a pinned run's market)."""
    if not isinstance(expected, str):
        raise ValueError(f"market_sha256 must be a file's SHA-256 in hex, got {expected!r}")
    actual = market_file_sha256(market)
    if actual is None:
        make_market(market)  # names a file that cannot be read, or a market that is not a file
        raise ValueError(f"market_sha256 pins the content of a market file, and market {market!r} is generated")
    if actual != expected:
        raise MarketDataError(f"{market}: the file has changed since this run began on it (SHA-256 now "
                              f"{actual[:12]}..., the run's {expected[:12]}...): restore it, or train a new store "
                              f"on it")


__all__ = ["DEFAULT_SPLIT", "GENERATORS", "PERIODS", "Market", "MarketDataError", "StockTradingVecEnv", "execute",
           "indicators", "load_ohlcv", "make_market", "make_stock_trading", "market_file_sha256", "pin_market",
           "random_walk_market", "trending_market"]
