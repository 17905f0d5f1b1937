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
        value = values[t]
        for _ in range(8):  # the cost depends on the target, which depends on the cost: each pass shrinks the error x cost
            target = np.full(n, value / n)
            value = values[t] - cost * np.abs(target - weights).sum()
        traded[t] = np.abs(target - weights).sum()
        weights = target * close[t + 1] / close[t]
        values[t + 1] = weights.sum()
    return values, traded
