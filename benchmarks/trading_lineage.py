"""One PPO agent trained alone on the trading env, backtested on the validation and test periods as it learns,
beside the MACD rule and equal-weight buy-and-hold: what a single lineage reaches, without a tournament.

    python benchmarks/trading_lineage.py [--seeds 0 1 2 3 4] [--steps 1000000] [--evaluations 5]
                                         [--market synthetic|random_walk] [--set SECTION.KEY=VALUE ...]
                                         [--quick]

Per seed: the shipped `workflows/configs/stock_trading.toml`'s env (its `env_kwargs`, `market_seed` = the seed)
and PPO hyper-parameters, as `--set` changes them (`podracer train`'s spelling: `run.env_kwargs.days=20000`,
`hparams.gamma=0.97`), one process, one torch thread; `--evaluations` backtests of the deterministic policy
(workflows/backtest.py's figures, `envs/trading/backtest.py`) spread over `--steps` env steps. The MACD rule
acts with the sign of each asset's MACD feature, no learning. Prints one line per evaluation; the last line is
JSON: per seed, the final test Sharpe ratios of the agent, the rule and buy-and-hold. `--quick`: seed 0, 100,000
steps, about half a minute.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch import Tensor

from dask_podracer.agents import make_agent
from dask_podracer.config import Config, ConfigError, load_config
from dask_podracer.envs import make_vec_env
from dask_podracer.envs.trading.backtest import backtest
from dask_podracer.population import check_constructs

CONFIG = Path(__file__).resolve().parents[1] / "workflows" / "configs" / "stock_trading.toml"
PERIODS = ("validation", "test")
MACD = 1  # the feature blocks after cash and holdings: day's return, MACD, RSI, CCI, ADX


def macd_rule(assets: int):
    """Buy every asset whose MACD is positive, sell every one whose MACD is negative, each day."""
    start = 1 + assets + MACD * assets

    def act(obs: Tensor) -> Tensor:
        return torch.sign(obs[:, start:start + assets])
    return act


def sharpes(evals: dict, policy) -> dict[str, float]:
    figures = {period: backtest(env, policy) for period, env in evals.items()}
    out = {}
    for period, f in figures.items():
        out[period] = round(f["sharpe"], 2)
        out[f"{period}_buy_and_hold"] = round(f["buy_and_hold_sharpe"], 2)
    out["test_turnover"] = round(figures["test"]["turnover"], 3)
    return out


def one_seed(config: Config, seed: int, steps: int, evaluations: int, market: str | None = None) -> dict:
    env_kwargs = {**config.run.env_kwargs, "market_seed": seed, **({"market": market} if market else {})}
    hparams = dict(config.hparams)
    torch.manual_seed(seed)
    env = make_vec_env(config.run.env, hparams["num_envs"], device="cpu", seed=seed, **env_kwargs)
    evals = {p: make_vec_env(config.run.env, 1, device="cpu", seed=0, **{**env_kwargs, "period": p}) for p in PERIODS}
    rule = sharpes(evals, macd_rule(env.num_assets))
    print(f"seed {seed}: MACD rule {rule}", flush=True)
    agent = make_agent(config.run.algorithm, env.single_observation_space, env.single_action_space, hparams)
    obs, _ = env.reset(seed=seed)
    done, started, rows = 0, time.perf_counter(), []
    for k in range(1, evaluations + 1):
        while done < steps * k // evaluations:
            obs, taken, _ = agent.train_iteration(env, obs)
            done += taken
        row = {"env_steps": done, "seconds": round(time.perf_counter() - started, 1), **sharpes(evals, agent.act)}
        rows.append(row)
        print(f"seed {seed}: {json.dumps(row)}", flush=True)
    last = rows[-1]
    return {"seed": seed, "market": env_kwargs["market"], "env_steps": done, "test_sharpe": last["test"], "validation_sharpe": last["validation"],
            "macd_test_sharpe": rule["test"], "buy_and_hold_test_sharpe": last["test_buy_and_hold"],
            "beats_buy_and_hold": last["test"] > last["test_buy_and_hold"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--evaluations", type=int, default=5)
    parser.add_argument("--market", choices=["synthetic", "random_walk"], default=None,
                        help="the config's market (synthetic) or the control with nothing to learn")
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                        help="config values to change, as podracer train's --set: run.env_kwargs.days=20000")
    parser.add_argument("--quick", action="store_true", help="seed 0, 100,000 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.evaluations = [0], 100_000, 2
    torch.set_num_threads(1)
    try:  # a bad setting ends the run here, in one line, before any seed trains
        config = load_config(CONFIG, args.set)
        check_constructs(config)
    except (ConfigError, ValueError) as e:  # ValueError: an env_kwargs value the env cannot take ("many" days)
        parser.error(str(e))
    results = [one_seed(config, seed, args.steps, args.evaluations, args.market) for seed in args.seeds]
    beats = sum(r["beats_buy_and_hold"] for r in results)
    print(f"the agent's test Sharpe beat buy-and-hold's on {beats} of {len(results)} seeds")
    print(json.dumps({"seeds": results, "beats": beats}))


if __name__ == "__main__":
    main()
