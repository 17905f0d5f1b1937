"""StockTrading-v0's numbers against plain, independent computations on small cases: a step's trades, costs and
rewards (both kinds, shuffled assets, turbulence) worked out share by share, and the backtest's baselines."""

import math

import numpy as np
import pytest
import torch

from dask_podracer.envs.trading import StockTradingVecEnv, metrics, trending_market


def plain_step(cash, holdings, action, price, next_price, max_shares, cost, turbulent, initial_cash, reward):
    """One trading day by hand, asset by asset: sells (cut to the holdings), then buys (scaled together to the cash
    and rounded down). Returns the new cash, holdings, the change of value (the reward before scaling) and costs."""
    holdings = list(holdings)
    order = [-h for h in holdings] if turbulent else [math.trunc(a * max_shares) for a in action]
    before = cash + sum(h * p for h, p in zip(holdings, price))
    costs = 0.0
    for i, o in enumerate(order):
        if o < 0:
            sold = min(-o, holdings[i])
            holdings[i] -= sold
            cash += sold * price[i] * (1 - cost)
            costs += sold * price[i] * cost
    wanted = [max(o, 0) for o in order]
    price_of_wanted = sum(w * p for w, p in zip(wanted, price)) * (1 + cost)
    if price_of_wanted > cash:
        wanted = [math.floor(w * cash / price_of_wanted) for w in wanted]
    for i, w in enumerate(wanted):
        cash -= w * price[i] * (1 + cost)
        costs += w * price[i] * cost
        holdings[i] += w
    change = cash + sum(h * p for h, p in zip(holdings, next_price)) - before
    if reward == "excess":
        change -= initial_cash * np.mean([b / a - 1 for a, b in zip(price, next_price)])
    return cash, holdings, change, costs


@pytest.mark.parametrize("reward", ["value", "excess"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_steps_match_a_plain_computation(reward, shuffle):
    market = trending_market(assets=3, days=160, seed=1)
    env = StockTradingVecEnv(4, market=market, seed=0, split=(0.6, 0.8), episode_days=15, initial_cash=20_000.0,
                             max_shares=50, cost=0.002, turbulence_quantile=0.7, reward=reward,
                             shuffle_assets=shuffle, dtype=torch.float64)
    env.reset()
    rng = np.random.default_rng(0)
    turbulent_days = 0
    for _ in range(40):  # episodes of 15 days: auto-resets (new orders where shuffled) included
        slots = rng.uniform(-1, 1, (4, 3))
        day, cash, holdings, order = env.day.clone(), env.cash.clone(), env.holdings.clone(), env.order.clone()
        _, rewards, _, truncated, info = env.step(torch.tensor(slots))
        for b in range(4):
            action = np.empty(3)
            action[order[b].numpy()] = slots[b]  # slot j is asset order[b, j]
            t = int(day[b])
            turbulent = bool(market.turbulence[t] > env.turbulence_threshold)
            turbulent_days += turbulent
            new_cash, new_holdings, change, costs = plain_step(
                cash[b].item(), holdings[b].tolist(), action, market.close[t], market.close[t + 1], 50, 0.002,
                turbulent, 20_000.0, reward)
            assert bool(info["turbulent"][b]) == turbulent
            assert rewards[b].item() == pytest.approx(change * 100 / 20_000, rel=1e-6, abs=1e-9)
            assert info["costs"][b].item() == pytest.approx(costs, rel=1e-9, abs=1e-9)
            assert min(new_holdings) >= 0 and new_cash >= 0
            if not truncated[b]:
                assert env.holdings[b].tolist() == new_holdings
                assert env.cash[b].item() == pytest.approx(new_cash, rel=1e-12)
    assert turbulent_days > 0


def rebalanced_by_bisection(close, initial_cash, cost):
    """Equal weight rebalanced at every close: each day the value kept V solves V = value - cost * sum|V / n - w|,
    found by bisection (the right side minus V falls as V grows)."""
    n = close.shape[1]
    values, weights = [initial_cash], np.zeros(n)
    for t in range(len(close) - 1):
        low, high = 0.0, values[-1]
        for _ in range(200):
            middle = (low + high) / 2
            low, high = (middle, high) if middle < values[-1] - cost * np.abs(middle / n - weights).sum() \
                else (low, middle)
        weights = np.full(n, low / n) * close[t + 1] / close[t]
        values.append(weights.sum())
    return np.array(values)


@pytest.mark.parametrize("cost", [0.0, 0.001, 0.1, 0.4, 0.9])
def test_the_rebalanced_baseline_pays_exactly_its_costs(cost):
    """Eight fixed-point passes left the rebalanced curve 0.05 % off at cost 0.4 (1.4 of 3,000 after one day)."""
    rng = np.random.default_rng(3)
    close = 50 * np.exp(np.cumsum(rng.normal(0.0, 0.2, (12, 3)), axis=0))
    values, traded = metrics.rebalanced(close, 3_000.0, cost)
    np.testing.assert_allclose(values, rebalanced_by_bisection(close, 3_000.0, cost), rtol=1e-12)
    # what each day kept, its value less the cost of what it traded, is held in equal parts until the next close
    kept = values[:-1] - cost * traded
    np.testing.assert_allclose(values[1:], kept / 3 * (close[1:] / close[:-1]).sum(axis=1), rtol=1e-12)
    assert traded[0] == pytest.approx(3_000.0 / (1 + cost), rel=1e-12)  # day one buys everything


def test_the_backtest_figures_on_a_known_series():
    values = np.array([100.0, 110.0, 99.0, 120.0, 90.0, 95.0])
    figures = metrics.summary(values, traded=np.array([10.0, 0.0, 20.0, 0.0, 5.0]))
    returns = values[1:] / values[:-1] - 1
    assert figures["sharpe"] == pytest.approx(returns.mean() / returns.std(ddof=1) * math.sqrt(252))
    assert figures["max_drawdown"] == pytest.approx(30 / 120)  # from the peak 120 to 90
    assert figures["turnover"] == pytest.approx(np.mean([10 / 100, 0, 20 / 99, 0, 5 / 90]))
    assert figures["annualised_return"] == pytest.approx(0.95 ** (252 / 5) - 1)
    close = np.array([[10.0, 20.0, 40.0], [11.0, 18.0, 40.0], [12.0, 19.0, 44.0]])
    hold, _ = metrics.buy_and_hold(close, 3_000.0, 0.01)
    shares = 1_000.0 / 1.01 / close[0]
    np.testing.assert_allclose(hold, [3_000.0, close[1] @ shares, close[2] @ shares])
