"""Read a user's OHLCV table (CSV or Parquet) into a `Market`, refusing malformed data in one line.

The table has one row per date and ticker, sorted by date, and the columns `date`, `ticker`, `open`,
`high`, `low` and `close` (`volume` is optional; any other column is ignored; names are matched
without regard to case). Every date must have a row for every ticker. Dates are ISO 8601 (2024-01-31,
optionally with a time), compared as text, which is then time order. A CSV file is UTF-8 (a byte-order
mark is allowed). Each row's prices must be consistent: low <= open, close <= high. Parquet needs pyarrow
(the `trading` extra).

Every refusal is a `MarketDataError` whose message names the file, the row (data rows counted from
1; in a CSV file that is line row + 1, after the header) and the column.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from dask_podracer.envs.trading.indicators import WARMUP
from dask_podracer.envs.trading.market import MIN_PERIOD_ROWS, PERIODS, Market, is_iso_date

REQUIRED = ("date", "ticker", "open", "high", "low", "close")
PRICES = ("open", "high", "low", "close")
PRICE_TOLERANCE = 1e-9
"""Relative slack for low <= open, close <= high: prices written as decimals can round across each other."""
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
        data = path.read_bytes()
    except OSError as e:
        raise MarketDataError(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        # utf-8-sig: a byte-order mark (Excel writes one) was read as part of the first column's name, "date"
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:  # was the codec's message alone, naming no file
        line = data[:e.start].count(b"\n") + 1
        where = "row 0 (header)" if line == 1 else f"row {line - 1} (line {line})"
        raise MarketDataError(f"{path}: {where}: not UTF-8 text ({e.reason} at byte {e.start}); save it as "
                              f"UTF-8") from None
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        header = next(reader, None)
        if header is None:
            raise MarketDataError(f"{path}: row 0 (header), column date: the file is empty")
        rows = list(reader)
    except csv.Error as e:  # a NUL byte, a field past csv's size limit
        raise MarketDataError(f"{path}: not a CSV table ({e})") from None
    names = [h.strip().lower() for h in header]
    _check_unique_columns(path, names)
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
    names = [name.strip().lower() for name in table.column_names]
    _check_unique_columns(path, names)
    return dict(zip(names, table.to_pydict().values()))


def _check_unique_columns(path: Path, names: list[str]) -> None:
    # names are matched in any case: "Close" and "close" (an adjusted close beside it) silently kept the last
    for j, name in enumerate(names):
        if name in names[:j] and name in (*REQUIRED, "volume"):
            raise MarketDataError(f"{path}: row 0 (header), column {name}: two columns are named {name} (names are "
                                  f"matched in any case); keep one")


def _market(path: Path, columns: dict[str, list]) -> Market:
    """The market of a table's columns, each checked as a whole (numpy), then the first row that breaks a rule
    named by the same per-row check that finds it (a thousand tickers over ten years are 2.5 million rows)."""
    for name in REQUIRED:
        if name not in columns:
            raise MarketDataError(f"{path}: row 0 (header), column {name}: no such column; the table needs "
                                  f"{', '.join(REQUIRED)} (and optionally volume)")
    dates = [_date_text(d) for d in columns["date"]]
    first_of = {}  # each date's first row (0-based), in the order the rows give them
    for i, d in enumerate(dates):
        first_of.setdefault(d, i)
    for d, i in first_of.items():
        _check_iso_date(path, i + 1, d)
    tickers = [str(t).strip() if t is not None else "" for t in columns["ticker"]]
    if "" in set(tickers):  # was "date ... has no row for ;", blaming a missing row
        i = tickers.index("") + 1
        raise MarketDataError(f"{path}: row {i}{_line(path, i)}, column ticker: empty; every row names its ticker")
    text = np.array(dates)
    unsorted = np.flatnonzero(text[1:] < text[:-1])
    if len(unsorted):
        i = int(unsorted[0]) + 1
        raise MarketDataError(f"{path}: row {i + 1}{_line(path, i + 1)}, column date: {dates[i]} comes after "
                              f"{dates[i - 1]}; rows must be sorted by date")
    names = sorted(set(tickers))
    unique_dates = sorted(first_of)
    if len(unique_dates) < MIN_DATES:
        raise MarketDataError(f"{path}: row {len(dates)}{_line(path, len(dates))}, column date: {len(unique_dates)} "
                              f"dates; the indicators need {WARMUP} dates of history and each of the train, "
                              f"validation and test periods {MIN_PERIOD_ROWS}: at least {MIN_DATES}")
    date_of = {d: t for t, d in enumerate(unique_dates)}
    ticker_of = {name: j for j, name in enumerate(names)}
    t_index = np.array([date_of[d] for d in dates])
    j_index = np.array([ticker_of[ticker] for ticker in tickers])
    cell = t_index * len(names) + j_index
    order = np.argsort(cell, kind="stable")
    repeated = order[1:][cell[order][1:] == cell[order][:-1]]  # rows whose date and ticker an earlier row had
    if len(repeated):
        i = int(repeated.min()) + 1
        raise MarketDataError(f"{path}: row {i}{_line(path, i)}, column ticker: a second row for {tickers[i - 1]} "
                              f"on {dates[i - 1]}; one row per date and ticker")
    numbers = {name: _numbers(path, name, columns[name], allow_zero=name == "volume")
               for name in (*PRICES, "volume") if name in columns}
    _check_ranges(path, *(numbers[name] for name in PRICES))
    present = np.zeros((len(unique_dates), len(names)), dtype=bool)
    present[t_index, j_index] = True
    if not present.all():
        t, j = (int(k[0]) for k in np.nonzero(~present))
        i = first_of[unique_dates[t]] + 1
        raise MarketDataError(f"{path}: row {i}{_line(path, i)}, column ticker: date {unique_dates[t]} has no row "
                              f"for {names[j]}; every date needs a row for every ticker (missing date)")
    values = {}
    for name in (*PRICES, "volume"):
        values[name] = np.zeros(present.shape)
        if name in numbers:
            values[name][t_index, j_index] = numbers[name]
    return Market(np.array(unique_dates), tuple(names), values["open"], values["high"], values["low"],
                  values["close"], values["volume"], source=str(path))


def _numbers(path: Path, column: str, values: list, allow_zero: bool) -> np.ndarray:
    """A column as float64, every value a positive number (zero allowed where `allow_zero`); the first that is not
    is named by `_positive`."""
    try:
        numbers = np.asarray(values, dtype=np.float64)  # None (a Parquet null) becomes NaN: refused below
    except (TypeError, ValueError):
        numbers = np.array([_positive(path, i, column, v, allow_zero) for i, v in enumerate(values, 1)])
    bad = ~np.isfinite(numbers) | (numbers < 0) | ((numbers == 0) & (not allow_zero))
    if bad.any():
        i = int(np.argmax(bad))
        _positive(path, i + 1, column, values[i], allow_zero)
    return numbers


def _check_ranges(path: Path, open_: np.ndarray, high: np.ndarray, low: np.ndarray, close: np.ndarray) -> None:
    """`_check_range` of every row: the first row outside its range is named by it."""
    slack = PRICE_TOLERANCE * high
    inside = (high >= low - slack) & (low - slack <= open_) & (open_ <= high + slack) \
        & (low - slack <= close) & (close <= high + slack)
    if not inside.all():
        i = int(np.argmin(inside))
        _check_range(path, i + 1, open_[i], high[i], low[i], close[i])


def _date_text(value: object) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value).strip()


def _check_iso_date(path: Path, row: int, text: str) -> None:
    # dates are compared as text: 01/02/2020 was taken for unsorted rows, or, within one year, passed and then
    # compared with a split given as ISO dates, leaving a period silently empty or wrong
    if not is_iso_date(text):
        raise MarketDataError(f"{path}: row {row}{_line(path, row)}, column date: {text!r} is not an ISO 8601 date "
                              f"(YYYY-MM-DD, as 2020-01-31); dates are compared as text, which only ISO dates sort "
                              f"in time order")


def _check_range(path: Path, row: int, open_: float, high: float, low: float, close: float) -> None:
    # high < low, or a close outside [low, high] (an adjusted close beside unadjusted highs and lows), trained
    # silently on indicators (CCI, ADX) computed from prices that cannot have been
    slack = PRICE_TOLERANCE * high
    if high < low - slack:
        raise MarketDataError(f"{path}: row {row}{_line(path, row)}, column high: {high:g} is below the low {low:g}")
    for column, price in (("open", open_), ("close", close)):
        if not low - slack <= price <= high + slack:
            raise MarketDataError(f"{path}: row {row}{_line(path, row)}, column {column}: {price:g} is outside the "
                                  f"day's range [low {low:g}, high {high:g}]; an adjusted close needs adjusted "
                                  f"open, high and low too")


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
