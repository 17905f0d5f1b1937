"""A market as arrays of dates by assets, its observation features, and its split into periods.

A `Market` holds OHLCV arrays `[T, N]` (dates by assets, oldest first). `features()` turns it into
what the env observes of each date, and `split()` cuts its dates into the train, validation and test
periods: consecutive, in that order, never overlapping, each a half-open range of rows `[start, end)`.
Indicators are computed over the whole series, which is safe because each row reads only earlier
rows (indicators.py): the validation period's first MACD reads the end of the training period, never
the other way round.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from dask_podracer.envs.trading import indicators

PERIODS = ("train", "validation", "test")
DEFAULT_SPLIT = (0.7, 0.85)
"""Where validation and test start, as fractions of the rows after the indicators' warm-up."""
MIN_PERIOD_ROWS = 20
TURBULENCE_WINDOW = 50
"""Dates of returns the turbulence index compares each date with (fewer than WARMUP, so it is formed in time)."""


def is_iso_date(text: str) -> bool:
    """Whether `text` is an ISO 8601 date, YYYY-MM-DD, optionally with a time: the dates that sort as text in time
    order, which is how dates are compared here."""
    try:
        (datetime.datetime if len(text) > 10 else datetime.date).fromisoformat(text)
    except (TypeError, ValueError):
        return False
    return len(text) >= 10 and text[4] == "-" and text[7] == "-"  # fromisoformat also takes 20200102


@dataclasses.dataclass(frozen=True, eq=False)
class Market:
    """OHLCV of `len(tickers)` assets on `len(dates)` dates: each array `[T, N]` float64, oldest date first."""

    dates: np.ndarray
    """`[T]` str: ISO dates (a user's file) or day numbers (a synthetic market)."""
    tickers: tuple[str, ...]
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    source: str = "<market>"
    """Where it came from, for messages: a path or a generator's name."""

    @property
    def num_dates(self) -> int:
        return len(self.dates)

    @property
    def num_assets(self) -> int:
        return len(self.tickers)

    @cached_property
    def turbulence(self) -> np.ndarray:
        """`[T]` the turbulence index of every date (indicators.turbulence)."""
        return indicators.turbulence(self.close, window=TURBULENCE_WINDOW)

    @cached_property
    def features(self) -> np.ndarray:
        """`[T, 5, N]` float32, what the env observes of each date and asset, each scaled to about [-1, 1]:
        the day's return / 2 %, MACD / 2 % of the price, (RSI - 50) / 50, CCI / 200, ADX / 50 - 1."""
        close = self.close
        daily = np.diff(close, axis=0, prepend=close[:1]) / np.vstack([close[:1], close[:-1]])
        rows = [daily / 0.02, indicators.macd(close) / 0.02, (indicators.rsi(close) - 50.0) / 50.0,
                indicators.cci(self.high, self.low, close) / 200.0,
                indicators.adx(self.high, self.low, close) / 50.0 - 1.0]
        return np.clip(np.stack(rows, axis=1), -5.0, 5.0).astype(np.float32)

    def split(self, split: Sequence[float | str] = DEFAULT_SPLIT) -> dict[str, tuple[int, int]]:
        """The rows `[start, end)` of each period. `split` gives where validation and test start: two fractions
        of the rows after the warm-up (0.7, 0.85), or two dates as the data writes them ("2022-01-03",
        "2023-01-02"; the first row on or after each). Training starts after `indicators.WARMUP` rows."""
        if isinstance(split, (str, bytes)) or not isinstance(split, Sequence):  # "0.7,0.85" was cut into characters
            raise ValueError(f"split must be a list of two fractions or two dates, got {split!r}")
        if len(split) != 2:
            raise ValueError(f"split must be two entries (where validation and where test start), got {split!r}")
        first = indicators.WARMUP
        if all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in split):
            if not 0 < split[0] < split[1] < 1:
                raise ValueError(f"split fractions must satisfy 0 < validation < test < 1, got {list(split)}")
            usable = self.num_dates - first
            bounds = [first + round(f * usable) for f in split]
        elif all(isinstance(s, str) for s in split):
            if not all(is_iso_date(str(d)) for d in self.dates[:1]):
                # a generated market's dates are day numbers, which do not sort as text: "16000" was looked up in an
                # unsorted array and gave periods no one asked for
                raise ValueError(f"{self.source}: split {list(split)} gives dates, but this market's dates are day "
                                 f"numbers; give split as two fractions (where validation and test start)")
            for date in split:
                if not is_iso_date(date):
                    raise ValueError(f"{self.source}: split date {date!r} is not an ISO 8601 date (YYYY-MM-DD), as the "
                                     f"market's are ({self.dates[0]}): compared as text it would cut the wrong rows")
            bounds = [int(np.searchsorted(self.dates, s)) for s in split]
            if bounds[0] < first:
                raise ValueError(f"{self.source}: validation starts at {split[0]}, row {bounds[0]}, but the "
                                 f"indicators need {first} rows of history and a training period after them")
        else:
            raise ValueError(f"split must be two fractions or two dates, got {split!r}")
        periods = dict(zip(PERIODS, [(first, bounds[0]), (bounds[0], bounds[1]), (bounds[1], self.num_dates)]))
        for name, (start, end) in periods.items():
            if end - start < MIN_PERIOD_ROWS:
                raise ValueError(f"{self.source}: the {name} period has {max(end - start, 0)} rows (split "
                                 f"{list(split)}); each period needs at least {MIN_PERIOD_ROWS}")
        return periods
