"""Bad input to the stock-trading env, as a new user meets it (a hunt of 2026-11-29): an OHLCV file that is
not UTF-8, has a byte-order mark, non-ISO dates, impossible prices, duplicate columns or an empty ticker, and
env_kwargs of the wrong type or out of range. Each is refused in one line naming the file, row and column, or the
field, where before it was a traceback, a message naming nothing, or a market silently wrong."""

import csv

import numpy as np
import pytest

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.trading import MarketDataError, load_ohlcv, random_walk_market

HEADER = ["date", "ticker", "open", "high", "low", "close", "volume"]


def rows_of(days=130, tickers=("AAA", "BBB")):
    market = random_walk_market(assets=len(tickers), days=days, seed=5)
    dates = np.datetime64("2020-01-01") + np.arange(days)
    columns = ("open", "high", "low", "close", "volume")
    return [[str(dates[t]), ticker, *(f"{getattr(market, k)[t, j]:.6f}" for k in columns)]
            for t in range(days) for j, ticker in enumerate(tickers)]


def write(path, rows, header=HEADER, encoding="utf-8"):
    with open(path, "w", newline="", encoding=encoding) as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def refusal(path) -> str:
    with pytest.raises(MarketDataError) as e:
        load_ohlcv(path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_a_csv_that_is_not_utf8_is_named_with_its_row(tmp_path):
    rows = rows_of()
    rows[6][1] = "CAFÉ"  # latin-1: before, the codec's message alone ("'utf-8' codec can't decode byte 0xc9 ...")
    message = refusal(write(tmp_path / "latin1.csv", rows, encoding="latin-1"))
    assert "row 7 (line 8): not UTF-8 text" in message


def test_a_csv_with_a_byte_order_mark_loads(tmp_path):
    # before: "row 0 (header), column date: no such column" (the mark was read as part of the name)
    market = load_ohlcv(write(tmp_path / "bom.csv", rows_of(), encoding="utf-8-sig"))
    assert market.tickers == ("AAA", "BBB") and market.dates[0] == "2020-01-01"


@pytest.mark.parametrize("form", ["{m}/{d}/{y}", "{d}/{m}/{y}", "{y}-{mi}-{di}"])
def test_dates_that_are_not_iso_are_refused_by_their_format(tmp_path, form):
    # before: MM/DD/YYYY within one year loaded (and a split of ISO dates then cut nothing), the others were
    # refused as "rows must be sorted by date", which they were
    rows = rows_of()
    for row in rows:
        y, m, d = row[0].split("-")
        row[0] = form.format(y=y, m=m, d=d, mi=int(m), di=int(d))
    assert "row 1 (line 2), column date:" in refusal(write(tmp_path / "dates.csv", rows))
    assert "is not an ISO 8601 date" in refusal(tmp_path / "dates.csv")


@pytest.mark.parametrize("column, value, expected", [
    ("high", lambda r: r[4], "row 9 (line 10), column high:"),  # high set below the low
    ("close", lambda r: str(float(r[3]) * 1.5), "row 9 (line 10), column close:"),
    ("open", lambda r: str(float(r[4]) * 0.5), "row 9 (line 10), column open:"),
])
def test_prices_outside_the_days_range_are_refused(tmp_path, column, value, expected):
    rows = rows_of()
    if column == "high":
        rows[8][3], rows[8][4] = rows[8][4], rows[8][3]
    else:
        rows[8][HEADER.index(column)] = value(rows[8])
    message = refusal(write(tmp_path / "prices.csv", rows))  # before: loaded and trained on them
    assert expected in message


def test_two_columns_of_one_name_and_an_empty_ticker_are_refused(tmp_path):
    rows = rows_of()
    # before: the last "close" (any case) was silently used
    assert "row 0 (header), column close: two columns are named close" in refusal(
        write(tmp_path / "dup.csv", [r + [r[5]] for r in rows], HEADER + ["Close"]))
    rows[5][1] = ""  # before: "date 2020-01-01 has no row for ;"
    assert "row 6 (line 7), column ticker: empty" in refusal(write(tmp_path / "empty.csv", rows))


def test_a_split_of_dates_that_do_not_fit_the_market_is_refused(tmp_path):
    # a synthetic market's dates are day numbers, unsorted as text: the split was looked up in an unsorted array
    with pytest.raises(ValueError, match="this market's dates are day numbers; give split as two fractions"):
        make_vec_env("StockTrading-v0", 1, assets=2, days=400, split=["300", "350"])
    path = write(tmp_path / "prices.csv", rows_of(days=300))
    with pytest.raises(ValueError, match="split date '06/01/2020' is not an ISO 8601 date"):
        make_vec_env("StockTrading-v0", 1, market=str(path), split=["06/01/2020", "08/01/2020"])
    for split in ("0.7,0.85", 0.7, {"a": 1, "b": 2}):  # cut into characters, a TypeError, a dict's keys
        with pytest.raises(ValueError, match="split must be a list of two fractions or two dates"):
            make_vec_env("StockTrading-v0", 1, assets=2, days=400, split=split)


@pytest.mark.parametrize("kwargs, expected", [
    ({"cost": "0.001"}, "cost must be a number"),  # was "'<=' not supported between ..."
    ({"initial_cash": float("nan")}, "initial_cash must be a finite number"),  # "cannot convert float NaN ..."
    ({"initial_cash": float("inf")}, "initial_cash must be a finite number"),  # an OverflowError: a traceback
    ({"max_shares": 0}, r"max_shares must be in \[1, inf\]"),  # silently the default
    ({"max_shares": 1.5}, "max_shares must be an integer"),  # silently 1
    ({"reward_scale": float("nan")}, "reward_scale must be a finite number"),  # NaN rewards
    ({"reward_scale": 0}, r"reward_scale must be in \(0, inf\]"),  # nothing to learn
    ({"turbulence_threshold": float("nan")}, "turbulence_threshold must be a finite number"),  # NaN observations
    ({"turbulence_quantile": 1.5}, r"turbulence_quantile must be in \[0, 1\]"),  # numpy's, naming no field
    ({"episode_days": 2.5}, "episode_days must be an integer"),
    ({"shuffle_assets": "false"}, "shuffle_assets must be true or false"),  # "false" was true
    ({"turbulence": "false"}, "turbulence must be true or false"),
    ({"assets": 0}, r"assets must be in \[1, inf\]"),  # a ZeroDivisionError: a traceback
    ({"days": -5}, r"days must be in \[1, inf\]"),  # "negative dimensions are not allowed"
    ({"market": 123}, "market must be one of"),  # Path()'s TypeError
])
def test_env_kwargs_of_the_wrong_type_or_range_name_the_field(kwargs, expected):
    with pytest.raises(ValueError, match=expected):
        make_vec_env("StockTrading-v0", 1, seed=0, **{"assets": 2, "days": 400, **kwargs})


def test_backtest_outputs_it_could_not_write_are_refused_before_it_runs(tmp_path, capsys):
    # before: the backtest ran, then a FileNotFoundError (or matplotlib's ValueError) traceback; here the store
    # does not exist either, and the outputs are named first
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("backtest_workflow",
                                                  Path(__file__).parents[1] / "workflows" / "backtest.py")
    backtest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backtest)
    for argv, expected in ((["--json", str(tmp_path / "no" / "out.json")], "--json"),
                           (["--plot", str(tmp_path / "equity.xyz")], "--plot")):
        assert backtest.main([str(tmp_path / "absent.zarr"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"backtest: error: {expected} ") and err.count("\n") == 1
