"""Market data: the generators are seeded, a user's OHLCV file loads and splits by date, and every kind of
malformed file is refused in one line naming the file, the row and the column."""

import csv

import numpy as np
import pytest

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.trading import (
    MarketDataError,
    load_ohlcv,
    make_market,
    random_walk_market,
    trending_market,
)
from dask_podracer.envs.trading.ohlcv import MIN_DATES

HEADER = ["date", "ticker", "open", "high", "low", "close", "volume"]


def ohlcv_rows(days=130, tickers=("AAA", "BBB")):
    """Rows of a valid table: ISO dates, sorted by date, every ticker on every date."""
    market = random_walk_market(assets=len(tickers), days=days, seed=5)
    dates = np.datetime64("2020-01-01") + np.arange(days)
    rows = []
    for t in range(days):
        for j, ticker in enumerate(tickers):
            rows.append([str(dates[t]), ticker, *(f"{getattr(market, k)[t, j]:.6f}"
                                                  for k in ("open", "high", "low", "close", "volume"))])
    return rows


def write_csv(path, rows, header=HEADER):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_generators_are_seeded():
    a, b = trending_market(assets=5, days=300, seed=1), trending_market(assets=5, days=300, seed=1)
    assert np.array_equal(a.close, b.close) and np.array_equal(a.features, b.features)
    assert not np.array_equal(a.close, trending_market(assets=5, days=300, seed=2).close)
    walk = random_walk_market(assets=5, days=300, seed=1)
    assert walk.close.shape == (300, 5) and (walk.close > 0).all()
    assert (a.high >= np.maximum(a.open, a.close)).all() and (a.low <= np.minimum(a.open, a.close)).all()
    # correlated: the assets share a market factor
    returns = np.diff(np.log(walk.close), axis=0)
    assert np.corrcoef(returns, rowvar=False)[np.triu_indices(5, 1)].mean() > 0.1


def test_a_csv_file_loads_as_written(tmp_path):
    rows = ohlcv_rows()
    market = load_ohlcv(write_csv(tmp_path / "prices.csv", rows))
    assert market.tickers == ("AAA", "BBB") and market.num_dates == 130
    assert market.dates[0] == "2020-01-01" and market.close[3, 1] == pytest.approx(float(rows[7][5]))


def test_columns_are_found_by_name_in_any_order_and_case_and_volume_is_optional(tmp_path):
    rows = [[r[5], r[1], r[0], r[2], r[3], r[4]] for r in ohlcv_rows()]
    market = load_ohlcv(write_csv(tmp_path / "p.csv", rows, header=["Close", "Ticker", "DATE", "open", "High", "low"]))
    assert market.num_assets == 2 and (market.volume == 0).all()


def test_a_parquet_file_loads_like_the_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import datetime

    import pyarrow.parquet as pq

    rows = ohlcv_rows()
    columns = {name: [r[j] for r in rows] for j, name in enumerate(HEADER)}
    columns["date"] = [datetime.date.fromisoformat(d) for d in columns["date"]]
    for name in HEADER[2:]:
        columns[name] = [float(v) for v in columns[name]]
    pq.write_table(pa.table(columns), tmp_path / "p.parquet")
    from_parquet = load_ohlcv(tmp_path / "p.parquet")
    from_csv = load_ohlcv(write_csv(tmp_path / "p.csv", rows))
    assert np.array_equal(from_parquet.close, from_csv.close) and list(from_parquet.dates) == list(from_csv.dates)


def test_a_file_trains_splits_by_date_and_backtests(tmp_path):
    path = write_csv(tmp_path / "prices.csv", ohlcv_rows(days=200))
    env = make_vec_env("StockTrading-v0", 2, seed=0, market=str(path), split=["2020-04-20", "2020-05-30"])
    market = env.market
    assert env.periods["train"] == (60, 110)  # 2020-04-20 is row 110
    assert market.dates[env.periods["validation"][0]] == "2020-04-20"
    assert market.dates[env.periods["test"][0]] == "2020-05-30"
    assert make_market(str(path)) is market  # cached: every env of a segment shares it


def refusal(tmp_path, rows, header=HEADER, name="bad.csv"):
    with pytest.raises(MarketDataError) as e:
        load_ohlcv(write_csv(tmp_path / name, rows, header))
    message = str(e.value)
    assert "\n" not in message and str(tmp_path / name) in message
    return message


def test_unsorted_rows_are_refused(tmp_path):
    rows = ohlcv_rows()
    rows[10], rows[12] = rows[12], rows[10]  # a date of 2020-01-07 before one of 2020-01-06
    assert refusal(tmp_path, rows).endswith("row 12 (line 13), column date: 2020-01-06 comes after 2020-01-07; "
                                            "rows must be sorted by date")


def test_a_missing_date_is_refused(tmp_path):
    rows = ohlcv_rows()
    del rows[41]  # BBB on 2020-01-21
    message = refusal(tmp_path, rows)
    assert "row 41 (line 42), column ticker: date 2020-01-21 has no row for BBB" in message


def test_non_positive_prices_are_refused(tmp_path):
    rows = ohlcv_rows()
    rows[4][5] = "0"
    assert "row 5 (line 6), column close: 0 is not a positive price" in refusal(tmp_path, rows)
    rows = ohlcv_rows()
    rows[6][4] = "-2.5"
    assert "row 7 (line 8), column low: -2.5 is not a positive price" in refusal(tmp_path, rows)
    rows = ohlcv_rows()
    rows[8][3] = "n/a"
    assert "row 9 (line 10), column high: 'n/a' is not a number" in refusal(tmp_path, rows)


def test_too_few_rows_for_the_indicators_are_refused(tmp_path):
    rows = ohlcv_rows(days=MIN_DATES - 1)
    message = refusal(tmp_path, rows)
    assert f"row {len(rows)} (line {len(rows) + 1}), column date: {MIN_DATES - 1} dates" in message
    assert f"at least {MIN_DATES}" in message


def test_other_malformed_tables_are_refused(tmp_path):
    rows = ohlcv_rows()
    assert "row 0 (header), column close: no such column" in refusal(tmp_path, [r[:5] for r in rows], HEADER[:5])
    rows = ohlcv_rows()
    rows.insert(3, list(rows[2]))
    assert "row 4 (line 5), column ticker: a second row for AAA on 2020-01-02" in refusal(tmp_path, rows)
    rows = ohlcv_rows()
    rows[20] = rows[20][:4]
    assert "row 21 (line 22)" in refusal(tmp_path, rows)
    with pytest.raises(MarketDataError, match="cannot read it"):
        make_market(str(tmp_path / "absent.csv"))


def test_a_split_that_leaves_a_period_too_short_is_refused(tmp_path):
    path = write_csv(tmp_path / "prices.csv", ohlcv_rows(days=200))
    with pytest.raises(ValueError, match="the validation period has 5 rows"):
        make_vec_env("StockTrading-v0", 1, market=str(path), split=["2020-04-20", "2020-04-25"])
    with pytest.raises(ValueError, match="need 60 rows of history"):
        make_vec_env("StockTrading-v0", 1, market=str(path), split=["2020-01-10", "2020-04-25"])
