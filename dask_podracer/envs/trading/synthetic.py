"""Seeded synthetic markets: one with a structure to learn, and a control without one.

`trending_market` (the default, `market = "synthetic"`): each day's return of asset i is

    r[t, i] = beta[i] * m[t] + drift * s[t, i] + sigma[i] * e[t, i]

- `m[t]`, the market factor, common to every asset (so the assets are correlated), switches between a
  calm regime (mean +0.04 %/day, sd 0.8 %) and a stressed one (mean -0.15 %/day, sd 2.5 %): calm to
  stressed with probability 1/200 a day, back with 1/20 (stressed spells last 20 days on average);
- `s[t, i]` in {+1, -1}, each asset's own trend regime, flips with probability `1 / trend_days` a day
  (60 by default): the learnable structure. A trend lasts long enough for a moving-average indicator
  (MACD's sign, RSI above or below 50) to reveal it, and then holds for weeks more: momentum;
- `beta[i]` ~ U(0.6, 1.4), `sigma[i]` ~ U(1.2 %, 2.0 %), `e` standard normal; `drift` 0.3 %/day.

An agent that holds the assets whose trend is up and sells those whose trend is down earns the drift
on top of the market; equal-weight buy-and-hold earns the market alone (the trends cancel on average).

`random_walk_market` (`market = "random_walk"`), the control: the same assets, betas, volatilities and a
market factor of constant mean (+0.04 %/day) and sd (1 %): correlated random walks whose past says nothing
of their future, so no policy should beat buy-and-hold there except by luck.

Both draw open, high and low around the close (an overnight gap of sd 0.2 %, intraday ranges of about
0.5 %) and a log-normal volume, from `numpy.random.default_rng(seed)`: the same seed, the same market.
"""

from __future__ import annotations

import numpy as np

from dask_podracer.envs.trading.market import Market

CALM = (0.0004, 0.008)
STRESSED = (-0.0015, 0.025)


def trending_market(assets: int = 20, days: int = 2000, seed: int = 0, trend_days: float = 60.0,
                    drift: float = 0.003) -> Market:
    """A market of `assets` assets over `days` days whose assets trend (above); seeded by `seed`."""
    rng = np.random.default_rng(seed)
    beta, sigma = _assets(rng, assets)
    stressed = _markov_chain(rng, days, 1 / 200, 1 / 20)
    factor = np.where(stressed, rng.normal(STRESSED[0], STRESSED[1], days), rng.normal(CALM[0], CALM[1], days))
    flips = rng.random((days, assets)) < 1.0 / trend_days
    start = rng.choice([-1.0, 1.0], size=assets)
    trend = start * np.cumprod(np.where(flips, -1.0, 1.0), axis=0)
    returns = beta * factor[:, None] + drift * trend + sigma * rng.standard_normal((days, assets))
    return _ohlcv(rng, returns, f"trending{seed}")


def random_walk_market(assets: int = 20, days: int = 2000, seed: int = 0) -> Market:
    """Correlated random walks: `assets` assets over `days` days with no structure to learn; seeded by `seed`."""
    rng = np.random.default_rng(seed)
    beta, sigma = _assets(rng, assets)
    factor = rng.normal(CALM[0], 0.01, days)
    returns = beta * factor[:, None] + sigma * rng.standard_normal((days, assets))
    return _ohlcv(rng, returns, f"walk{seed}")


def _assets(rng: np.random.Generator, assets: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.uniform(0.6, 1.4, assets), rng.uniform(0.012, 0.020, assets)


def _markov_chain(rng: np.random.Generator, days: int, p_on: float, p_off: float) -> np.ndarray:
    """`[days]` bool: a two-state chain that turns on with probability `p_on` a day and off with `p_off`."""
    state = np.zeros(days, dtype=bool)
    draws = rng.random(days)
    for t in range(1, days):
        state[t] = draws[t] >= p_off if state[t - 1] else draws[t] < p_on
    return state


def _ohlcv(rng: np.random.Generator, returns: np.ndarray, name: str) -> Market:
    days, assets = returns.shape
    returns = np.clip(returns, -0.5, 0.5)
    close = rng.uniform(20.0, 200.0, assets) * np.cumprod(1.0 + returns, axis=0)
    previous = np.vstack([close[:1] / (1.0 + returns[:1]), close[:-1]])
    open_ = previous * np.exp(rng.normal(0.0, 0.002, (days, assets)))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0.0, 0.005, (days, assets))))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0.0, 0.005, (days, assets))))
    volume = np.exp(rng.normal(13.0, 0.3, (days, assets)))
    dates = np.arange(days).astype(str)  # trading days, numbered
    tickers = tuple(f"A{i:02d}" for i in range(assets))
    return Market(dates, tickers, open_, high, low, close, volume, source=name)
