"""Backtest figures of an equity curve, and the two baselines a trading agent must beat. Pure numpy.

Conventions: 252 trading days a year; no risk-free rate (Sharpe = mean daily return / its standard
deviation x sqrt(252)); turnover = the value traded (bought plus sold) each day as a fraction of the
portfolio's value, averaged over the days.
"""

from __future__ import annotations

import numpy as np

DAYS_PER_YEAR = 252


def summary(values: np.ndarray, traded: np.ndarray | None = None) -> dict[str, float]:
    """Figures of the equity curve `values` `[T + 1]` (the value before the first day, then after each day),
    `traded` `[T]` the value traded each day (None: turnover 0)."""
    values = np.asarray(values, dtype=np.float64)
    returns = values[1:] / values[:-1] - 1.0
    days = len(returns)
    cumulative = values[-1] / values[0] - 1.0
    sd = float(returns.std(ddof=1)) if days > 1 else 0.0
    drawdown = 1.0 - values / np.maximum.accumulate(values)
    turnover = 0.0 if traded is None else float(np.mean(np.asarray(traded) / values[:-1]))
    return {
        "days": days,
        "cumulative_return": float(cumulative),
        "annualised_return": float((1.0 + cumulative) ** (DAYS_PER_YEAR / days) - 1.0) if days else 0.0,
        "annualised_volatility": sd * np.sqrt(DAYS_PER_YEAR),
        "sharpe": float(returns.mean() / sd * np.sqrt(DAYS_PER_YEAR)) if sd > 0 else 0.0,
        "max_drawdown": float(drawdown.max()),
        "turnover": turnover,
    }


def buy_and_hold(close: np.ndarray, initial_cash: float, cost: float) -> tuple[np.ndarray, np.ndarray]:
    """Equal-weight buy-and-hold over the prices `close` `[T + 1, N]`: the cash, less `cost`, split equally
    (fractional shares) at the first close and held. Returns the equity curve `[T + 1]` and the value traded
    each day `[T]` (all of it on the first)."""
    shares = initial_cash / (1.0 + cost) / close.shape[1] / close[0]
    values = close @ shares
    values[0] = initial_cash  # before buying: the cost is the first day's loss
    traded = np.zeros(len(close) - 1)
    traded[0] = initial_cash / (1.0 + cost)
    return values, traded


def rebalanced(close: np.ndarray, initial_cash: float, cost: float) -> tuple[np.ndarray, np.ndarray]:
    """Equal weight rebalanced at every close over `close` `[T + 1, N]`, paying `cost` on what is traded
    (fractional shares). Returns the equity curve `[T + 1]` and the value traded each day `[T]`."""
    n = close.shape[1]
    values = np.empty(len(close))
    traded = np.zeros(len(close) - 1)
    values[0] = initial_cash
    weights = np.zeros(n)  # the value in each asset after the previous day's move, before trading
    for t in range(len(close) - 1):
        # trade to equal weights: cost * |traded| comes out of the value, so solve for the value kept
        target = np.full(n, _kept(values[t], weights, cost) / n)
        traded[t] = np.abs(target - weights).sum()
        weights = target * close[t + 1] / close[t]
        values[t + 1] = weights.sum()
    return values, traded


def _kept(value: float, weights: np.ndarray, cost: float) -> float:
    """The value V left after trading the positions `weights` `[N]` (worth `value` in all) to equal weights V / N,
    paying `cost` of the value traded: V + cost * sum_i |V / N - weights[i]| = value, solved exactly. The left side
    is piecewise linear in V with kinks at V = N * weights[i] and slope at least 1 - cost > 0. (Eight passes of the
    fixed point V <- value - cost * sum|...|, as before, were off by 0.05 % of the value at cost 0.4: each pass
    shrinks the error only by a factor of up to `cost`.)"""
    n = len(weights)
    w = np.sort(weights)
    below = np.cumsum(w)  # sum of the weights up to each one: sum_i |w_j - w_i| by sums, not an [N, N] array
    above = below[-1] - below
    j = np.arange(n)
    kinks = n * w
    at_kinks = kinks + cost * (w * (j + 1) - below + above - w * (n - j - 1))  # the left side at each kink
    k = int(np.searchsorted(at_kinks, value))  # V lies above k kinks, below the others
    start, at_start = (kinks[k - 1], at_kinks[k - 1]) if k else (0.0, cost * np.abs(weights).sum())
    slope = 1.0 + cost * (2 * k - n) / n  # k terms grow with V, n - k shrink
    return float(start + (value - at_start) / slope)
