"""Play a policy through one period of a trading env and score it beside the baselines.

`backtest(env, policy)` steps one env (`num_envs = 1`, period "validation" or "test": the whole period
from its first date) until the period ends, recording the portfolio's value before the first trade and
after every day, and the value traded each day; then it scores the same period's equal-weight
buy-and-hold and daily-rebalanced portfolios (metrics.py), with the same cash and costs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.trading import metrics
from dask_podracer.envs.trading.env import StockTradingVecEnv


@torch.no_grad()
def play(env: StockTradingVecEnv, policy: Callable[[Tensor], Tensor], seed: int = 0) -> dict[str, np.ndarray]:
    """Step env 0 of `env` through one whole episode with `policy` (obs `[B, D]` -> actions `[B, N]`).

    Returns `values` `[T + 1]`, `traded` `[T]`, `costs` `[T]`, `clamped` `[T]` (shares not traded) and
    `turbulent` `[T]` (days the portfolio was liquidated), and `days` `[T + 1]` (the dates' rows)."""
    obs, _ = env.reset(seed=seed)
    values, traded, costs, clamped, turbulent = [float(env.portfolio_value()[0])], [], [], [], []
    days = [int(env.day[0])]
    for _ in range(env.max_episode_steps):
        obs, _, terminated, truncated, info = env.step(policy(obs))
        values.append(float(info["portfolio_value"][0]))
        traded.append(float(info["traded_value"][0]))
        costs.append(float(info["costs"][0]))
        clamped.append(float(info["clamped_shares"][0].sum()))
        turbulent.append(bool(info["turbulent"][0]))
        days.append(days[-1] + 1)
        if bool(terminated[0] | truncated[0]):
            break
    return {"values": np.array(values), "traded": np.array(traded), "costs": np.array(costs),
            "clamped": np.array(clamped), "turbulent": np.array(turbulent), "days": np.array(days)}


def backtest(env: StockTradingVecEnv, policy: Callable[[Tensor], Tensor]) -> dict:
    """The policy's figures on `env`'s period beside the two baselines'; also every equity curve (lists)."""
    run = play(env, policy)
    close = env.market.close[run["days"][0]: run["days"][-1] + 1]
    hold_values, hold_traded = metrics.buy_and_hold(close, env.initial_cash, env.cost)
    daily_values, daily_traded = metrics.rebalanced(close, env.initial_cash, env.cost)
    agent = metrics.summary(run["values"], run["traded"])
    hold = metrics.summary(hold_values, hold_traded)
    daily = metrics.summary(daily_values, daily_traded)
    dates = env.market.dates[run["days"]]
    return {
        "period": env.period, "first_date": str(dates[0]), "last_date": str(dates[-1]),
        **agent,
        "costs": float(run["costs"].sum()), "clamped_shares": float(run["clamped"].sum()),
        "turbulent_days": int(run["turbulent"].sum()),
        **{f"buy_and_hold_{k}": v for k, v in hold.items() if k != "days"},
        **{f"rebalanced_{k}": v for k, v in daily.items() if k != "days"},
        "curves": {"dates": [str(d) for d in dates], "agent": run["values"].tolist(),
                   "buy_and_hold": hold_values.tolist(), "rebalanced": daily_values.tolist()},
    }
