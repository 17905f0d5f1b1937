"""Indicators and turbulence: no value at date t reads a later date; known answers; the vectorised turbulence
against a plain loop."""

import numpy as np
import pytest

from dask_podracer.envs.trading import Market, indicators, trending_market


def perturbed_after(market: Market, t: int, seed: int = 0) -> Market:
    """The same market, with every price after row t replaced by others."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name in ("open", "high", "low", "close", "volume"):
        a = getattr(market, name).copy()
        a[t + 1:] *= rng.uniform(0.5, 2.0, a[t + 1:].shape)
        arrays[name] = a
    arrays["high"] = np.maximum.reduce([arrays["high"], arrays["open"], arrays["close"]])
    arrays["low"] = np.minimum.reduce([arrays["low"], arrays["open"], arrays["close"]])
    return Market(market.dates, market.tickers, **arrays, source="perturbed")


@pytest.mark.parametrize("t", [0, 1, 5, 25, 59, 60, 61, 150, 298])
def test_no_feature_at_date_t_reads_a_later_date(t):
    market = trending_market(assets=6, days=300, seed=4)
    other = perturbed_after(market, t)
    assert not np.array_equal(market.close[t + 1:], other.close[t + 1:]) or t == 299
    # bit for bit: the rows up to t are computed from the same numbers in the same order
    assert np.array_equal(market.features[: t + 1], other.features[: t + 1])
    assert np.array_equal(market.turbulence[: t + 1], other.turbulence[: t + 1])
    if t + 1 < 300:  # and the future does change the future (the test can see a leak)
        assert not np.array_equal(market.features[t + 1:], other.features[t + 1:])


@pytest.mark.parametrize("name", ["macd", "rsi", "cci", "adx"])
def test_each_indicator_alone_is_causal(name):
    market = trending_market(assets=3, days=200, seed=1)
    other = perturbed_after(market, 100)
    args = {"macd": ("close",), "rsi": ("close",), "cci": ("high", "low", "close"), "adx": ("high", "low", "close")}
    compute = getattr(indicators, name)
    a = compute(*(getattr(market, k) for k in args[name]))
    b = compute(*(getattr(other, k) for k in args[name]))
    assert np.array_equal(a[:101], b[:101]) and not np.array_equal(a[101:], b[101:])


def test_known_answers():
    rising = np.linspace(10.0, 20.0, 50).reshape(-1, 1)
    assert np.allclose(indicators.rsi(rising)[1:], 100.0)
    assert np.allclose(indicators.rsi(rising[::-1].copy())[1:], 0.0)
    flat = np.full((40, 2), 7.0)
    assert np.allclose(indicators.macd(flat), 0.0) and np.allclose(indicators.rsi(flat), 50.0)
    assert np.allclose(indicators.ema(flat, 0.3), 7.0)
    # an EMA by hand: 0, then 0 + 0.5 (2 - 0) = 1, then 1 + 0.5 (4 - 1) = 2.5
    assert np.allclose(indicators.ema(np.array([[0.0], [2.0], [4.0]]), 0.5).ravel(), [0.0, 1.0, 2.5])
    # a mean over the last 3 rows (fewer at the start)
    assert np.allclose(indicators.rolling_mean(np.arange(5.0).reshape(-1, 1), 3).ravel(), [0, 0.5, 1, 2, 3])
    # CCI of a typical price that steps 1, 2, 3 (window 3): mean 2, mean deviation 2/3 -> (3 - 2) / (0.015 x 2/3)
    tp = np.array([[1.0], [2.0], [3.0]])
    assert indicators.cci(tp, tp, tp, period=3)[-1, 0] == pytest.approx(1 / (0.015 * 2 / 3))
    market = trending_market(assets=4, days=300, seed=0)
    adx = indicators.adx(market.high, market.low, market.close)
    assert (adx >= 0).all() and (adx <= 100).all()


def test_macd_reveals_the_synthetic_trend():
    """The documented structure: after a trend has run for a while, MACD's sign is mostly the trend's sign."""
    market = trending_market(assets=20, days=2000, seed=3)
    macd = indicators.macd(market.close)
    returns = market.close[1:] / market.close[:-1] - 1
    # tomorrow's return is higher where today's MACD is positive
    up = returns[60:][macd[60:-1] > 0].mean()
    down = returns[60:][macd[60:-1] < 0].mean()
    assert up - down > 0.001


@pytest.mark.parametrize("assets", [5, 45])  # 45 > window: the covariance is singular, taken through the Gram matrix
def test_turbulence_matches_a_plain_loop(assets, monkeypatch):
    monkeypatch.setattr(indicators, "TURBULENCE_CHUNK", 64)  # several chunks of dates, the last one short
    market = trending_market(assets=assets, days=200, seed=2)
    window = 30
    fast = indicators.turbulence(market.close, window=window)
    returns = np.vstack([np.zeros((1, assets)), market.close[1:] / market.close[:-1] - 1])
    for t in range(200):
        if t < window + 1:
            assert fast[t] == 0.0
            continue
        history = returns[t - window: t]
        mean = history.mean(axis=0)
        covariance = np.cov(history, rowvar=False)
        d = returns[t] - mean
        # hermitian=True: a covariance of more assets than days is singular, and a plain pinv of it depends on the
        # BLAS build and its threads (1e12 against 35.5 with numpy's OpenBLAS 0.3.34 and 0.3.31)
        assert fast[t] == pytest.approx(d @ np.linalg.pinv(covariance, hermitian=True) @ d, rel=1e-6)
