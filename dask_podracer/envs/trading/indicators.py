"""Technical indicators and the turbulence index, for every date and asset at once.

Every function takes `[T, N]` arrays (dates by assets, oldest date first) and returns `[T, N]`
(or `[T]`) whose row t is computed from rows 0..t only: recursions run forward in time and
windows end at t, so no value at date t reads a later date (tests/test_trading_indicators.py
perturbs the future and checks). The loops run over dates; each step is vectorised over assets.
Rows before an indicator has its full window hold the value of the shorter history (an EMA starts
at the first price, a window shrinks to the rows there are); `WARMUP` rows are enough for all of
them to be fully formed, and periods never start before it (market.py).
"""

from __future__ import annotations

import numpy as np

WARMUP = 60
"""Rows of history every indicator (and a turbulence window of up to 60 dates) needs before a period starts."""


def ema(x: np.ndarray, alpha: float) -> np.ndarray:
    """Exponential moving average `[T, N]` with smoothing `alpha`, started at the first row."""
    out = np.empty_like(x, dtype=np.float64)
    out[0] = x[0]
    for t in range(1, len(x)):
        out[t] = out[t - 1] + alpha * (x[t] - out[t - 1])
    return out


def rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of rows max(0, t-window+1)..t for every t: `[T, N]`."""
    csum = np.cumsum(np.vstack([np.zeros((1, *x.shape[1:])), x]), axis=0)
    t = np.arange(1, len(x) + 1)
    lo = np.maximum(t - window, 0)
    count = (t - lo).reshape(-1, *([1] * (x.ndim - 1)))
    return (csum[t] - csum[lo]) / count


def macd(close: np.ndarray, fast: int = 12, slow: int = 26) -> np.ndarray:
    """MACD line (EMA(fast) - EMA(slow) of the close) divided by the close: a trend's sign and strength, `[T, N]`."""
    return (ema(close, 2.0 / (fast + 1)) - ema(close, 2.0 / (slow + 1))) / close


def rsi(close: np.ndarray, period: int = 14) -> np.ndarray:
    """Wilder's relative strength index in [0, 100], `[T, N]` (50 on the first row)."""
    change = np.diff(close, axis=0, prepend=close[:1])
    gain = ema(np.maximum(change, 0.0), 1.0 / period)
    loss = ema(np.maximum(-change, 0.0), 1.0 / period)
    total = gain + loss
    return np.where(total > 0, 100.0 * gain / np.where(total > 0, total, 1.0), 50.0)


def cci(high: np.ndarray, low: np.ndarray, close: np.ndarray, period: int = 20) -> np.ndarray:
    """Commodity channel index, `[T, N]`: (typical price - its mean) / (0.015 x mean absolute deviation),
    both over the last `period` rows (fewer on the first rows)."""
    typical = (high + low + close) / 3.0
    mean = rolling_mean(typical, period)
    deviation = np.zeros_like(typical)
    for lag in range(min(period, len(typical))):  # |tp[t-lag] - mean[t]| for every t that has a row t-lag
        deviation[lag:] += np.abs(typical[: len(typical) - lag] - mean[lag:])
    count = np.minimum(np.arange(1, len(typical) + 1), period).reshape(-1, *([1] * (typical.ndim - 1)))
    return (typical - mean) / (0.015 * np.maximum(deviation / count, 1e-12 * typical))


def adx(high: np.ndarray, low: np.ndarray, close: np.ndarray, period: int = 14) -> np.ndarray:
    """Wilder's average directional index in [0, 100], `[T, N]`: how strong a trend is, whichever its sign."""
    previous_close = np.vstack([close[:1], close[:-1]])
    true_range = np.maximum(high, previous_close) - np.minimum(low, previous_close)
    up = np.diff(high, axis=0, prepend=high[:1])
    down = -np.diff(low, axis=0, prepend=low[:1])
    plus_dm = np.where((up > down) & (up > 0), up, 0.0)
    minus_dm = np.where((down > up) & (down > 0), down, 0.0)
    alpha = 1.0 / period
    atr = np.maximum(ema(true_range, alpha), 1e-12)
    plus_di = 100.0 * ema(plus_dm, alpha) / atr
    minus_di = 100.0 * ema(minus_dm, alpha) / atr
    total = plus_di + minus_di
    dx = np.where(total > 0, 100.0 * np.abs(plus_di - minus_di) / np.where(total > 0, total, 1.0), 0.0)
    return ema(dx, alpha)


TURBULENCE_CHUNK = 128
"""Dates whose windows are centred at once: the `[dates, window, assets]` array stays small (a thousand assets and
all 2,500 dates at once needed 1 GB for it, and the covariances 20 GB)."""


def turbulence(close: np.ndarray, window: int = 60) -> np.ndarray:
    """Kritzman and Li's turbulence index `[T]`: the Mahalanobis distance of date t's asset returns from the
    mean and covariance of the `window` dates before t. Zero until there are `window` earlier returns."""
    returns = np.diff(close, axis=0, prepend=close[:1]) / np.vstack([close[:1], close[:-1]])
    out = np.zeros(len(close))
    if len(close) <= window + 1:
        return out
    # windows of returns 1..t-1 before each t >= window + 1: [T', window, N], a view
    windows = np.lib.stride_tricks.sliding_window_view(returns[1:-1], window, axis=0).transpose(0, 2, 1)
    for start in range(0, len(windows), TURBULENCE_CHUNK):
        chunk = windows[start:start + TURBULENCE_CHUNK]
        mean = chunk.mean(axis=1)
        today = returns[window + 1 + start:window + 1 + start + len(chunk)] - mean
        out[window + 1 + start:window + 1 + start + len(chunk)] = _distances(chunk - mean[:, None, :], today)
    return out


def _distances(centred: np.ndarray, today: np.ndarray) -> np.ndarray:
    """today_t' C_t^+ today_t for each date t, C_t the covariance of the centred window `[window, N]` of t."""
    window, assets = centred.shape[1:]
    if assets <= window:
        covariance = centred.transpose(0, 2, 1) @ centred / (window - 1)
        return np.einsum("ti,tij,tj->t", today, np.linalg.pinv(covariance, hermitian=True), today)
    # More assets than dates: C = A'A / (window - 1) has rank below `window`, and x' C^+ x equals
    # (window - 1) |G^+ A x|^2 with G = A A', `window` square rather than N square: by A's SVD, both are sums over
    # its singular values, and pinv's relative cut-off drops the same ones (G's eigenvalues are C's times window - 1).
    gram = centred @ centred.transpose(0, 2, 1)
    projected = np.einsum("twn,tn->tw", centred, today)
    solved = np.einsum("tvw,tw->tv", np.linalg.pinv(gram, hermitian=True), projected)
    return (window - 1) * np.einsum("tv,tv->t", solved, solved)
