"""A portfolio of N assets traded once a day: many independent episodes stepped as one batch.

FinRL's stock-trading env (`env_stocktrading_np.py`) as batched torch code. Each env holds cash and a
whole number of shares of every asset. A step is one trading day t:

1. the action `[B, N]` in [-1, 1] asks to trade `trunc(action x max_shares)` shares of each asset at
   date t's close (positive buys, negative sells);
2. if date t's turbulence index is above the threshold, the order is replaced by "sell everything";
3. sells first: never more than the shares held (no shorting); proceeds less `cost` go to cash;
4. then buys: if they would cost more than the cash (`cost` included) every buy is scaled down by the
   same factor and rounded down to whole shares (no borrowing);
5. the date moves to t + 1; reward = (value at t + 1's close - value at t's close before trading)
   x `reward_scale`, where value = cash + holdings . close.

So cash + holdings . price changes over a step by exactly holdings' price change less the costs paid
(tests/test_trading_env.py). `info` reports, for the step: `clamped_shares` `[B, N]` (shares asked
for but not traded: sells beyond holdings, buys beyond cash), `clamped` `[B]`, `turbulent` `[B]`,
`costs` `[B]`, `traded_value` `[B]` (cash value bought plus sold) and `portfolio_value` `[B]` (after
the step, before any auto-reset), all float64 except the bool flags, and `episode_score` `[B]`: with
`score = "sharpe"` (the default) the annualised Sharpe ratio of the episode's daily returns so far,
which evaluation ranks an episode by instead of its return (envs/base.py), so a tournament selects on
risk-adjusted performance; with `score = "return"` it is left out and the return ranks.

Observation `[B, 2 + 6N]` float32: cash / value, each holding's value / value (N), then for each of
the five features of date t (the day's return, MACD, RSI, CCI, ADX; market.Market.features) one
value per asset (5N), then turbulence / threshold.

Episodes: in the train period, windows of `episode_days` days starting on a random date (from the
env's generator); in the validation and test periods, the whole period from its first date, so every
evaluation of a checkpoint sees the same dates. Episodes are truncated at their last date, never
terminated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import ResetRows, StepResult, TorchVecEnv
from dask_podracer.envs.trading.market import DEFAULT_SPLIT, PERIODS, Market
from dask_podracer.envs.trading.metrics import DAYS_PER_YEAR

SCORES = ("sharpe", "return")
REWARDS = ("value", "excess")


def checked_number(name: str, value: Any, *, integer: bool = False, low: float = -math.inf, high: float = math.inf,
                   low_open: bool = False, high_open: bool = False, finite: bool = True) -> Any:
    """`value` if it is a number (an integer where `integer`) in the range given, else a ValueError naming `name`:
    env_kwargs come from a config as they were written, and a string, NaN or inf failed far from the field (a
    TypeError of `<=`, int()'s OverflowError), or passed and gave NaN rewards or observations."""
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValueError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < low or (low_open and value == low) or value > high or (high_open and value == high):
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must be in {left}{low:g}, {high:g}{right}, got {value!r}")
    return value


def checked_flag(name: str, value: Any) -> bool:
    """`value` if it is a bool: "false" (a string) was true."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return bool(value)


class StockTradingVecEnv(TorchVecEnv):
    """`num_envs` portfolios trading `market`'s assets over one of its periods (module docstring)."""

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, *,
                 market: Market, period: str = "train", split: Sequence[float | str] = DEFAULT_SPLIT,
                 episode_days: int = 250, initial_cash: float = 1e6, max_shares: int | None = None,
                 cost: float = 0.001, reward_scale: float | None = None, turbulence: bool = True,
                 turbulence_threshold: float | None = None, turbulence_quantile: float = 0.99,
                 score: str = "sharpe", reward: str = "value", shuffle_assets: bool = False,
                 dtype: torch.dtype = torch.float32) -> None:
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"dtype must be a torch.dtype (torch.float32 or torch.float64), got {dtype!r}")
        super().__init__(num_envs, device, seed, dtype)
        if period not in PERIODS:
            raise ValueError(f"period must be one of {PERIODS}, got {period!r}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        self.score = score
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
        self.reward = reward
        # each train episode shows the assets in an order of its own: a policy can learn what an asset's
        # indicators say, but not which asset did well in the train period (validation and test keep the order)
        self.shuffle_assets = checked_flag("shuffle_assets", shuffle_assets) and period == "train"
        turbulence = checked_flag("turbulence", turbulence)
        checked_number("cost", cost, low=0.0, high=1.0, high_open=True)
        checked_number("initial_cash", initial_cash, low=0.0, low_open=True)
        if max_shares is not None:  # 0 was taken for "not given" and silently became the default
            checked_number("max_shares", max_shares, integer=True, low=1)
        if reward_scale is not None:  # NaN or inf gave NaN rewards; 0 or less nothing, or the opposite, to learn
            checked_number("reward_scale", reward_scale, low=0.0, low_open=True)
        if turbulence_threshold is not None:  # NaN made every observation NaN (below 0 liquidates every day: allowed)
            checked_number("turbulence_threshold", turbulence_threshold, finite=False)
        checked_number("turbulence_quantile", turbulence_quantile, low=0.0, high=1.0)
        checked_number("episode_days", episode_days, integer=True, low=1)
        self.market = market
        self.period = period
        self.periods = market.split(split)
        start, end = self.periods[period]
        self.num_assets = n = market.num_assets
        self.initial_cash = float(initial_cash)
        self.cost = float(cost)
        first_prices = market.close[self.periods["train"][0]]
        # by default a full buy of one asset reaches an equal-weight position in it
        self.max_shares = int(max_shares if max_shares is not None
                              else math.ceil(initial_cash / n / float(first_prices.mean())))
        self.reward_scale = float(reward_scale if reward_scale is not None else 100.0 / initial_cash)
        train_start, train_end = self.periods["train"]
        if turbulence_threshold is None:
            turbulence_threshold = float(np.quantile(market.turbulence[train_start:train_end], turbulence_quantile))
        self.turbulence_threshold = float(turbulence_threshold) if turbulence else math.inf
        self.random_start = period == "train"
        days = end - 1 - start  # steps from the period's first date to its last
        self.max_episode_steps = min(int(episode_days), days) if self.random_start else days
        if self.max_episode_steps < 1:
            raise ValueError(f"episode_days must be >= 1, got {episode_days!r}")
        self.first_day, self.last_start = start, end - 1 - self.max_episode_steps

        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (2 + 6 * n,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (n,), np.float32)
        on = {"device": self.device}
        self._close = torch.as_tensor(market.close, dtype=torch.float64, **on)
        self._features = torch.as_tensor(market.features.reshape(market.num_dates, 5 * n), **on)
        self._turbulence = torch.as_tensor(market.turbulence, dtype=torch.float64, **on)
        # observed as turbulence / threshold whether or not it liquidates: `turbulence = false` changes the trades,
        # not what the agent sees (divided by 1 instead, the index saturated the clip at 10 on most days)
        scale = max(float(turbulence_threshold), 1e-12)
        self._turbulence_obs = (self._turbulence / scale).clamp(max=10.0).to(torch.float32)
        self.day = torch.full((num_envs,), start, dtype=torch.int64, **on)
        self.cash = torch.full((num_envs,), self.initial_cash, dtype=torch.float64, **on)
        self.holdings = torch.zeros(num_envs, n, dtype=torch.float64, **on)
        # sums of the episode's daily returns and of their squares: its Sharpe ratio at any step
        self._return_sum = torch.zeros(num_envs, dtype=torch.float64, **on)
        self._return_square_sum = torch.zeros(num_envs, dtype=torch.float64, **on)
        # slot j of an env's observation and action is asset order[b, j]
        self.order = torch.arange(n, **on).expand(num_envs, n).clone()
        self._step_info: dict[str, Tensor] = {}

    # -- TorchVecEnv hooks ----------------------------------------------------------------
    def _reset_where(self, rows: ResetRows) -> None:
        if self.random_start:
            start = torch.randint(self.first_day, self.last_start + 1, rows.shape(), generator=self.generator,
                                  device=self.device)
        else:
            start = torch.full(rows.shape(), self.first_day, dtype=torch.int64, device=self.device)
        self.day = rows.put(self.day, start)
        self.cash = rows.fill(self.cash, self.initial_cash)
        self.holdings = rows.fill(self.holdings, 0.0)
        self._return_sum = rows.fill(self._return_sum, 0.0)
        self._return_square_sum = rows.fill(self._return_square_sum, 0.0)
        if self.shuffle_assets:
            keys = torch.rand(rows.shape(self.num_assets), generator=self.generator, device=self.device)
            self.order = rows.put(self.order, keys.argsort(dim=1))

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        action = actions.reshape(self.num_envs, self.num_assets).to(torch.float64).clamp(-1.0, 1.0)
        if self.shuffle_assets:  # back from the episode's order of slots to the assets'
            action = torch.empty_like(action).scatter_(1, self.order, action)
        price = self._close[self.day]
        value_before = self.cash + (self.holdings * price).sum(1)
        order = torch.trunc(action * self.max_shares)
        turbulent = self._turbulence[self.day] > self.turbulence_threshold
        order = torch.where(turbulent.unsqueeze(1), -self.holdings, order)
        cash, holdings, sold, bought, costs = execute(order, price, self.cash, self.holdings, self.cost)
        self.cash, self.holdings = cash, holdings
        self.day = self.day + 1
        value_after = self.cash + (self.holdings * self._close[self.day]).sum(1)
        clamped_shares = order.abs() - sold - bought
        self._step_info = {
            "clamped_shares": clamped_shares, "clamped": (clamped_shares > 0).any(1), "turbulent": turbulent,
            "costs": costs, "traded_value": ((sold + bought) * price).sum(1), "portfolio_value": value_after,
        }
        if self.score == "sharpe":
            daily = value_after / value_before - 1.0
            self._return_sum = self._return_sum + daily
            self._return_square_sum = self._return_square_sum + daily * daily
            self._step_info["episode_score"] = sharpe_ratio(self._return_sum, self._return_square_sum,
                                                            self.elapsed + 1)
        change = value_after - value_before
        if self.reward == "excess":
            # less what the initial cash made in the equal-weight market that day: prices are the same whatever the
            # agent does, so this changes no policy's ranking, and it takes the market's noise out of the rewards
            change = change - self.initial_cash * (self._close[self.day] / price - 1.0).mean(1)
        reward = change * self.reward_scale
        return reward.to(self.dtype), torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def _observe(self) -> Tensor:
        price = self._close[self.day]
        held = self.holdings * price
        value = self.cash + held.sum(1)
        features = self._features[self.day]
        if self.shuffle_assets:
            held = held.gather(1, self.order)
            order = self.order.unsqueeze(1).expand(-1, 5, -1)
            features = features.view(self.num_envs, 5, self.num_assets).gather(2, order).flatten(1)
        weights = torch.cat([(self.cash / value).unsqueeze(1), held / value.unsqueeze(1)], dim=1)
        return torch.cat([weights.to(torch.float32), features, self._turbulence_obs[self.day].unsqueeze(1)], dim=1)

    def step(self, actions: Tensor) -> StepResult:
        obs, reward, terminated, truncated, info = super().step(actions)
        info.update(self._step_info)
        return obs, reward, terminated, truncated, info

    # -- for tests and the backtest ---------------------------------------------------------
    def portfolio_value(self) -> Tensor:
        """`[B]` float64: cash + holdings . close of every env's current date."""
        return self.cash + (self.holdings * self._close[self.day]).sum(1)

    def set_portfolio(self, cash: Any, holdings: Any, day: Any | None = None) -> None:
        """Put every env in a given state: cash `[B]`, holdings `[B, N]` (whole shares), and a date row `[B]`."""
        on = {"dtype": torch.float64, "device": self.device}
        self.cash = torch.as_tensor(cash, **on).expand(self.num_envs).clone()
        self.holdings = torch.as_tensor(holdings, **on).expand(self.num_envs, self.num_assets).clone()
        if day is not None:
            self.day = torch.as_tensor(day, dtype=torch.int64, device=self.device).expand(self.num_envs).clone()


def sharpe_ratio(total: Tensor, total_of_squares: Tensor, days: Tensor) -> Tensor:
    """The annualised Sharpe ratio (no risk-free rate) of `days` daily returns from their sum and sum of squares,
    with metrics.summary's conventions (sample standard deviation); 0 where it is undefined (under two days, or
    no variation)."""
    n = days.to(torch.float64)
    mean = total / n
    variance = ((total_of_squares - n * mean * mean) / (n - 1).clamp(min=1.0)).clamp(min=0.0)
    sd = variance.sqrt()
    defined = (n > 1) & (sd > 1e-12)
    return torch.where(defined, mean / sd.clamp(min=1e-12) * math.sqrt(DAYS_PER_YEAR), torch.zeros_like(mean))


def execute(order: Tensor, price: Tensor, cash: Tensor, holdings: Tensor, cost: float
            ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Carry out `order` `[B, N]` (whole shares, + buys, - sells) at `price` `[B, N]` from `cash` `[B]` and
    `holdings` `[B, N]`, paying `cost` of the traded value each way. Sells are cut to the holdings; buys are
    scaled down together to what the cash pays for, then rounded down. Returns new cash `[B]`, new holdings,
    shares sold `[B, N]`, shares bought `[B, N]` and the costs paid `[B]`."""
    sold = torch.minimum((-order).clamp(min=0.0), holdings)
    proceeds = (sold * price).sum(1)
    cash = cash + proceeds * (1.0 - cost)
    wanted = order.clamp(min=0.0)
    price_of_wanted = (wanted * price).sum(1) * (1.0 + cost)
    affordable = torch.where(price_of_wanted > cash, cash.clamp(min=0.0) / price_of_wanted.clamp(min=1e-300), 1.0)
    bought = torch.where(affordable.unsqueeze(1) < 1.0, torch.floor(wanted * affordable.unsqueeze(1)), wanted)
    spent = (bought * price).sum(1)
    cash = cash - spent * (1.0 + cost)
    return cash, holdings - sold + bought, sold, bought, (proceeds + spent) * cost
