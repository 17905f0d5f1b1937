"""Backtest figures worked out by hand, the baselines, a policy played through a period, and
workflows/backtest.py on the store of a real (tiny) tournament."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.trading import metrics
from dask_podracer.envs.trading.backtest import backtest, play
from dask_podracer.train import SegmentSpec
from dask_podracer.train.evaluate import episode_scores

ROOT = Path(__file__).resolve().parents[1]


def test_summary_known_answers():
    values = np.array([100.0, 110.0, 99.0, 99.0 * 1.2])
    s = metrics.summary(values, traded=np.array([50.0, 0.0, 9.9]))
    returns = np.array([0.1, -0.1, 0.2])
    assert s["days"] == 3
    assert s["cumulative_return"] == pytest.approx(0.188)
    assert s["annualised_return"] == pytest.approx(1.188 ** (252 / 3) - 1)
    assert s["annualised_volatility"] == pytest.approx(returns.std(ddof=1) * np.sqrt(252))
    assert s["sharpe"] == pytest.approx(returns.mean() / returns.std(ddof=1) * np.sqrt(252))
    assert s["max_drawdown"] == pytest.approx(0.1)  # 110 -> 99
    assert s["turnover"] == pytest.approx((0.5 + 0.0 + 0.1) / 3)


def test_buy_and_hold_known_answer():
    close = np.array([[10.0, 20.0], [11.0, 20.0], [12.0, 10.0]])
    values, traded = metrics.buy_and_hold(close, 1000.0, cost=0.0)
    # 500 in each: 50 and 25 shares
    assert values.tolist() == pytest.approx([1000.0, 1050.0, 850.0])
    assert traded.tolist() == [1000.0, 0.0]
    values, _ = metrics.buy_and_hold(close, 1001.0, cost=0.001)
    assert values[1] == pytest.approx(1050.0)  # 1 of the 1001 went to costs


def test_rebalanced_daily_known_answer():
    close = np.array([[10.0, 20.0], [11.0, 20.0], [12.0, 10.0]])
    values, traded = metrics.rebalanced(close, 1000.0, cost=0.0)
    # each day the mean of the assets' returns: +5 %, then (12/11 - 1 - 0.5) / 2
    assert values[1] == pytest.approx(1050.0)
    assert values[2] == pytest.approx(1050.0 * (1 + (12 / 11 - 1 - 0.5) / 2))
    assert traded[0] == pytest.approx(1000.0) and traded[1] == pytest.approx(50.0)  # 550/500 -> 525/525
    costly, _ = metrics.rebalanced(close, 1000.0, cost=0.01)
    assert costly[1] == pytest.approx(1000.0 / 1.01 * 1.05, rel=1e-9)  # 1 % of what is bought is paid


class Momentum:
    """A fixed policy: buy what MACD says is rising, sell what it says is falling. It has the `act` that
    evaluation calls on an agent, and is itself the callable the backtest plays."""

    def __init__(self, assets: int) -> None:
        self.macd = slice(1 + 2 * assets, 1 + 3 * assets)

    def __call__(self, obs):
        return torch.sign(obs[:, self.macd])

    def act(self, obs, deterministic=False):
        return self(obs)


def test_a_validation_backtest_scores_what_the_tournament_scores():
    """A segment's score is the mean of `episode_scores` over its evaluation episodes; on the trading env, whose
    default score is "sharpe", an episode scores the annualised Sharpe ratio of its daily returns
    (info["episode_score"]), not its summed rewards. Over the validation period (every episode the whole period,
    from its first date) that is the backtest's `sharpe`; the summed rewards are 100 x its cumulative return
    (reward is the change in value scaled by 100 / initial cash)."""
    kwargs = {"assets": 4, "days": 400}
    policy = Momentum(kwargs["assets"])
    # as run_segment evaluates: eval_episodes envs of the eval period, seeded
    env = make_vec_env("StockTrading-v0", 3, seed=SegmentSpec.eval_seed, period="validation", **kwargs)
    scores = episode_scores(policy, env, seed=SegmentSpec.eval_seed)
    obs, _ = env.reset(seed=1)
    total = torch.zeros(3, dtype=torch.float64)
    for _ in range(env.max_episode_steps):
        obs, reward, *_ = env.step(policy(obs))
        total += reward.double()
    result = backtest(make_vec_env("StockTrading-v0", 1, seed=0, period="validation", **kwargs), policy)
    assert scores.tolist() == pytest.approx([result["sharpe"]] * 3, rel=1e-9)
    assert float(total[0]) == pytest.approx(100 * result["cumulative_return"], rel=1e-4)
    # a Sharpe ratio, not the return: ranking by the one is not ranking by the other
    assert abs(result["sharpe"] - 100 * result["cumulative_return"]) > 0.1
    assert result["days"] == env.max_episode_steps and result["turnover"] > 0
    assert len(result["curves"]["agent"]) == len(result["curves"]["buy_and_hold"]) == result["days"] + 1


def test_doing_nothing_keeps_the_cash_and_holding_everything_tracks_the_market():
    env = make_vec_env("StockTrading-v0", 1, seed=0, period="test", assets=4, days=400, turbulence=False)
    idle = play(env, lambda obs: torch.zeros(1, 4))
    assert (idle["values"] == env.initial_cash).all() and idle["costs"].sum() == 0
    result = backtest(env, lambda obs: torch.zeros(1, 4))
    assert result["cumulative_return"] == 0.0 and result["sharpe"] == 0.0
    assert result["buy_and_hold_cumulative_return"] != 0.0


@pytest.mark.slow
def test_the_backtest_workflow_on_a_tiny_tournament(cpu_client, tmp_path):
    """A two-segment tournament on the suite's cluster, then backtest.py on its champion: text, JSON and plot."""
    from dask_podracer.config import config_from_dict
    from dask_podracer.population import run_tournament
    from dask_podracer.store import PodracerStore

    env_kwargs = {"market": "synthetic", "assets": 3, "days": 300, "episode_days": 20}
    config = config_from_dict({
        "run": {"name": "bt", "env": "StockTrading-v0", "env_kwargs": env_kwargs,
                "eval_env_kwargs": {"period": "validation"}, "algorithm": "sac", "max_segments": 2, "seed": 1,
                "store": str(tmp_path / "bt.zarr")},
        "segment": {"env_steps": 200, "eval_episodes": 1},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32},
    })
    run_tournament(config, cpu_client, poll_seconds=0.2)
    store = PodracerStore(str(tmp_path / "bt.zarr"))
    champion = store.read_leaderboard()[0]
    out = subprocess.run([sys.executable, str(ROOT / "workflows/backtest.py"), str(tmp_path / "bt.zarr"),
                          "--json", str(tmp_path / "bt.json"), "--plot", str(tmp_path / "bt.png")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert f"backtest of {champion['key']}" in out.stdout and "buy & hold" in out.stdout
    result = json.loads((tmp_path / "bt.json").read_text())
    for name in ("sharpe", "buy_and_hold_sharpe", "max_drawdown", "cumulative_return", "turnover",
                 "rebalanced_sharpe", "annualised_return", "annualised_volatility"):
        assert np.isfinite(result[name])
    assert result["period"] == "test" and (tmp_path / "bt.png").stat().st_size > 0
    # the baselines are those of the test period's prices
    env = make_vec_env("StockTrading-v0", 1, period="test", **env_kwargs)
    start, end = env.periods["test"]
    hold, _ = metrics.buy_and_hold(env.market.close[start:end], env.initial_cash, env.cost)
    assert result["curves"]["buy_and_hold"] == pytest.approx(hold.tolist())
    # on the validation period, the backtest repeats the score the tournament ranked the champion by: its Sharpe
    # ratio there (the env's default score, info["episode_score"])
    out = subprocess.run([sys.executable, str(ROOT / "workflows/backtest.py"), str(tmp_path / "bt.zarr"),
                          champion["key"], "--period", "validation", "--json", str(tmp_path / "val.json")],
                         capture_output=True, text=True, timeout=120, check=False)
    validation = json.loads((tmp_path / "val.json").read_text())
    assert validation["sharpe"] == pytest.approx(champion["score"], rel=1e-4, abs=1e-4)
    # so do the exported card's evaluation and evaluate_top.py's, on the env that scored it: its checkpoint
    # records run.eval_env_kwargs (before, both played the train period and summed the rewards)
    assert store.checkpoint_attrs(champion["key"])["eval_env_kwargs"] == {"period": "validation"}
    out = subprocess.run([sys.executable, str(ROOT / "workflows/export_champion.py"), str(tmp_path / "bt.zarr"),
                          str(tmp_path / "champion"), "--episodes", "2"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    evaluation = json.loads((tmp_path / "champion" / "card.json").read_text())["evaluation"]
    assert evaluation["env_kwargs"] == {**env_kwargs, "period": "validation"}
    assert evaluation["score"] == pytest.approx(champion["score"], rel=1e-4, abs=1e-4)
    assert evaluation["scores"] == pytest.approx([validation["sharpe"]] * 2, rel=1e-4, abs=1e-4)
    assert evaluation["returns"] == pytest.approx([100 * validation["cumulative_return"]] * 2, rel=1e-3, abs=1e-3)
    out = subprocess.run([sys.executable, str(ROOT / "workflows/evaluate_top.py"), str(tmp_path / "bt.zarr"),
                          "--top", "1", "--episodes", "2", "--out", str(tmp_path / "top")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    [row] = json.loads((tmp_path / "top.json").read_text())
    assert row["fresh_score"] == pytest.approx(champion["score"], rel=1e-4, abs=1e-4)


def test_the_backtest_workflow_refuses_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "workflows/backtest.py"), str(tmp_path / "nothing.zarr")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"backtest: error: no podracer store at '{tmp_path / 'nothing.zarr'}'"]


def test_the_backtest_workflow_without_matplotlib_refuses_plot_before_it_runs(tmp_path):
    # docs/trading.md: --plot needs the plot extra; without it the figures printed, then a traceback
    hide_matplotlib = ("import runpy, sys; sys.modules['matplotlib'] = None; sys.argv = sys.argv[1:]; "
                       "runpy.run_path(sys.argv[0], run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", hide_matplotlib, str(ROOT / "workflows/backtest.py"),
                          str(tmp_path / "nothing.zarr"), "--plot", str(tmp_path / "equity.png")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "backtest: error: --plot draws with matplotlib, which is not installed: pip install 'dask-podracer[plot]', "
        "or leave --plot out (the figures print without it)"]
