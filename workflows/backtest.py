"""Backtest a trading checkpoint on the test period, which training and selection never see.

    python workflows/backtest.py STORE [KEY] [--json OUT.json] [--plot OUT.png] [--period test]

KEY defaults to the leaderboard's champion. The checkpoint's env (StockTrading-v0 with the env_kwargs
it trained with) is rebuilt on the test period: one episode from the period's first date to its last,
acting deterministically. Prints cumulative and annualised return, annualised volatility, Sharpe ratio,
maximum drawdown and turnover beside equal-weight buy-and-hold and equal weight rebalanced daily (same
cash, same costs); `--json` writes them (`sharpe`, `buy_and_hold_sharpe`, `max_drawdown`,
`cumulative_return`, `turnover`, ... and the equity curves); `--plot` draws the equity curves (needs
matplotlib). Exit codes: 0 done, 2 a store, key or env that cannot be backtested.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from dask_podracer.cli import OneLineArgumentParser
from dask_podracer.envs import StoredEnvRefused, canonical_env_name, make_vec_env
from dask_podracer.envs.trading import PERIODS, MarketDataError
from dask_podracer.envs.trading.backtest import backtest
from dask_podracer.store import PodracerStore, StoreError
from dask_podracer.train import load_agent

TRADING_ENV = "StockTrading-v0"
ROWS = (("cumulative return", "cumulative_return", "{:+.1%}"), ("annualised return", "annualised_return", "{:+.1%}"),
        ("annualised volatility", "annualised_volatility", "{:.1%}"), ("Sharpe ratio", "sharpe", "{:.2f}"),
        ("max drawdown", "max_drawdown", "{:.1%}"), ("turnover (daily)", "turnover", "{:.2%}"))


class BacktestError(Exception):
    """A store, key or env that cannot be backtested: one line for the user."""


def run(store_url: str, key: str | None = None, period: str = "test") -> dict:
    """The backtest of checkpoint `key` (default: the champion) of the store at `store_url` on `period`."""
    store = PodracerStore(store_url)  # StoreError: no store there, or a URL no fsspec protocol opens
    if key is None:
        board = store.read_leaderboard()
        if not board:
            raise BacktestError(f"the leaderboard of {store.url!r} is empty: no champion to backtest")
        key = board[0]["key"]
    if not store.has_checkpoint(key):
        raise BacktestError(f"store {store.url!r} has no checkpoint {key!r}")
    attrs = store.checkpoint_attrs(key)
    if canonical_env_name(attrs["env"]) != TRADING_ENV:
        raise BacktestError(f"checkpoint {key!r} is trained on {attrs['env']!r}, not on {TRADING_ENV}")
    agent = load_agent(store, key, replay=False, env=TRADING_ENV)  # evaluation only acts: no replay buffer
    env = make_vec_env(TRADING_ENV, 1, seed=0, **{**attrs.get("env_kwargs", {}), "period": period})
    result = backtest(env, lambda obs: agent.act(obs, deterministic=True))
    return {"store": store.url, "key": key, "algorithm": attrs["algorithm"], "validation_score": attrs.get("score"),
            "env_kwargs": attrs.get("env_kwargs", {}), **result}


def table(result: dict) -> str:
    """The figures of `result` as a text table: the agent beside the two baselines."""
    lines = [(f"backtest of {result['key']} ({result['algorithm']}) on the {result['period']} period, "
              f"{result['first_date']} to {result['last_date']} ({result['days']} days)"),
             f"{'':24}{'agent':>12}{'buy & hold':>12}{'rebalanced':>12}"]
    for label, name, fmt in ROWS:
        cells = (result[name], result[f"buy_and_hold_{name}"], result[f"rebalanced_{name}"])
        lines.append(f"{label:24}" + "".join(f"{fmt.format(c):>12}" for c in cells))
    lines.append(f"costs paid {result['costs']:,.0f}; shares not traded (clamped) {result['clamped_shares']:,.0f}; "
                 f"days liquidated for turbulence {result['turbulent_days']}")
    return "\n".join(lines)


def plot(result: dict, out: str) -> None:
    """Draw the three equity curves of `result` into the image `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = result["curves"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, label in (("agent", f"agent (Sharpe {result['sharpe']:.2f})"),
                        ("buy_and_hold", f"equal-weight buy & hold ({result['buy_and_hold_sharpe']:.2f})"),
                        ("rebalanced", f"equal weight, rebalanced daily ({result['rebalanced_sharpe']:.2f})")):
        ax.plot(range(len(curves[name])), curves[name], label=label)
    ax.set_xlabel(f"trading days from {result['first_date']}")
    ax.set_ylabel("portfolio value")
    ax.set_title(f"{result['key']} on the {result['period']} period")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


PLOT_FORMATS = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def check_outputs(json_out: str | None, plot_out: str | None) -> None:
    """Refuse an output the backtest could not write, before it runs: a directory that does not exist (or is a
    file) or an image format matplotlib does not write was a traceback after the backtest."""
    for option, out in (("--json", json_out), ("--plot", plot_out)):
        if out is None:
            continue
        path = Path(out)
        if not out or path.is_dir():
            raise BacktestError(f"{option} {out!r} is not a file name")
        if not path.parent.is_dir():
            raise BacktestError(f"{option} {out!r}: its directory {str(path.parent)!r} does not exist")
        if not os.access(path.parent, os.W_OK | os.X_OK):  # another's folder, a read-only mount
            raise BacktestError(f"{option} {out!r}: its directory {str(path.parent)!r} is not writable")
    if plot_out and Path(plot_out).suffix.lower() not in PLOT_FORMATS:
        raise BacktestError(f"--plot {plot_out!r}: name an image file ({', '.join(PLOT_FORMATS)})")
    if plot_out:
        try:  # without it the figures printed, then a traceback
            import matplotlib  # noqa: F401
        except ImportError:
            raise BacktestError("--plot draws with matplotlib, which is not installed: pip install "
                                "'dask-podracer[plot]', or leave --plot out (the figures print without it)") from None


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("key", nargs="?", help="a checkpoint key; default: the leaderboard's champion")
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write the figures and curves as JSON")
    parser.add_argument("--plot", metavar="OUT.png", help="draw the equity curves")
    parser.add_argument("--period", default="test", choices=PERIODS, help="the period to trade (default: test)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        check_outputs(args.json_out, args.plot)
        result = run(args.store, args.key, args.period)
    except (BacktestError, StoreError, StoredEnvRefused, MarketDataError) as e:
        print(f"backtest: error: {e}", file=sys.stderr)
        return 2
    print(table(result))
    try:
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
        if args.plot:
            plot(result, args.plot)
    except OSError as e:  # a write os.access allowed and the file system refused (/proc, a full disk)
        print(f"backtest: error: cannot write {e.filename or 'an output'}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
