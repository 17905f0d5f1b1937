"""Read a user's OHLCV table (CSV or Parquet) into a `Market`, refusing malformed data in one line.

The table has one row per date and ticker, sorted by date, and the columns `date`, `ticker`, `open`,
`high`, `low` and `close` (`volume` is optional; any other column is ignored; names are matched
without regard to case). Every date must have a row for every ticker. Dates are compared as text,
so write them so that text order is time order (ISO 8601: 2024-01-31). Parquet needs pyarrow (the
`trading` extra).

Every refusal is a `MarketDataError` whose message names the file, the row (data rows counted from
1; in a CSV file that is line row + 1, after the header) and the column.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from dask_podracer.envs.trading.indicators import WARMUP
from dask_podracer.envs.trading.market import MIN_PERIOD_ROWS, PERIODS, Market

REQUIRED = ("date", "ticker", "open", "high", "low", "close")
PRICES = ("open", "high", "low", "close")
MIN_DATES = WARMUP + len(PERIODS) * MIN_PERIOD_ROWS
"""Dates a table needs: the indicators' warm-up, then at least MIN_PERIOD_ROWS in each period."""


class MarketDataError(ValueError):
    """Malformed market data: the message names the file, the row and the column."""


def load_ohlcv(path: str | Path) -> Market:
    """The market in the CSV or Parquet file at `path` (module docstring)."""
    path = Path(path)
    columns = _read_parquet(path) if path.suffix.lower() in (".parquet", ".pq") else _read_csv(path)
    return _market(path, columns)


def _read_csv(path: Path) -> dict[str, list]:
    try:
        with path.open(newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise MarketDataError(f"{path}: row 0 (header), column date: the file is empty")
            rows = list(reader)
    except OSError as e:
        raise MarketDataError(f"{path}: cannot read it ({e.strerror or e})") from None
    names = [h.strip().lower() for h in header]
    for i, row in enumerate(rows, 1):
        if len(row) != len(names):
            raise MarketDataError(f"{path}: row {i} (line {i + 1}), column {names[min(len(row), len(names) - 1)]}: "
                                  f"{len(row)} fields where the header has {len(names)}")
    return {name: [row[j] for row in rows] for j, name in enumerate(names)}


def _read_parquet(path: Path) -> dict[str, list]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MarketDataError(f"{path}: reading Parquet needs pyarrow: pip install 'dask_podracer[trading]'") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:
        raise MarketDataError(f"{path}: cannot read it as Parquet ({e})") from None
    return {name.strip().lower(): values for name, values in table.to_pydict().items()}


def _market(path: Path, columns: dict[str, list]) -> Market:
    for name in REQUIRED:
        if name not in columns:
            raise MarketDataError(f"{path}: row 0 (header), column {name}: no such column; the table needs "
                                  f"{', '.join(REQUIRED)} (and optionally volume)")
    dates = [_date_text(d) for d in columns["date"]]
    tickers = [str(t).strip() for t in columns["ticker"]]
    for i in range(1, len(dates)):
        if dates[i] < dates[i - 1]:
            raise MarketDataError(f"{path}: row {i + 1}{_line(path, i + 1)}, column date: {dates[i]} comes after "
                                  f"{dates[i - 1]}; rows must be sorted by date")
    names = sorted(set(tickers))
    unique_dates = sorted(set(dates))
    if len(unique_dates) < MIN_DATES:
        raise MarketDataError(f"{path}: row {len(dates)}{_line(path, len(dates))}, column date: {len(unique_dates)} "
                              f"dates; the indicators need {WARMUP} dates of history and each of the train, "
                              f"validation and test periods {MIN_PERIOD_ROWS}: at least {MIN_DATES}")
    row_of = {name: j for j, name in enumerate(names)}
    date_of = {d: t for t, d in enumerate(unique_dates)}
    present = np.zeros((len(unique_dates), len(names)), dtype=bool)
    first_row = {}
    values = {name: np.full((len(unique_dates), len(names)), np.nan) for name in (*PRICES, "volume")}
    for i, (d, ticker) in enumerate(zip(dates, tickers), 1):
        t, j = date_of[d], row_of[ticker]
        first_row.setdefault(t, i)
        if present[t, j]:
            raise MarketDataError(f"{path}: row {i}{_line(path, i)}, column ticker: a second row for {ticker} "
                                  f"on {d}; one row per date and ticker")
        present[t, j] = True
        for name in (*PRICES, "volume"):
            if name == "volume" and name not in columns:
                continue
            values[name][t, j] = _positive(path, i, name, columns[name][i - 1], allow_zero=name == "volume")
    if not present.all():
        t, j = (int(k[0]) for k in np.nonzero(~present))
        i = first_row[t]
        raise MarketDataError(f"{path}: row {i}{_line(path, i)}, column ticker: date {unique_dates[t]} has no row "
                              f"for {names[j]}; every date needs a row for every ticker (missing date)")
    volume = values["volume"] if "volume" in columns else np.zeros_like(values["close"])
    return Market(np.array(unique_dates), tuple(names), values["open"], values["high"], values["low"],
                  values["close"], volume, source=str(path))


def _date_text(value: object) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value).strip()


def _line(path: Path, row: int) -> str:
    return f" (line {row + 1})" if path.suffix.lower() not in (".parquet", ".pq") else ""


def _positive(path: Path, row: int, column: str, value: object, allow_zero: bool = False) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MarketDataError(f"{path}: row {row}{_line(path, row)}, column {column}: {value!r} is not a "
                              f"number") from None
    if not np.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        what = "a non-negative volume" if allow_zero else "a positive price"
        raise MarketDataError(f"{path}: row {row}{_line(path, row)}, column {column}: {number:g} is not {what}")
    return number
