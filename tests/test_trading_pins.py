"""A market file is pinned by its content for a run: a run records its SHA-256 in `run.env_kwargs`
(`market_sha256`), every segment's env refuses a file whose bytes differ, and a store whose run began on other
bytes is not resumed. Before, the store compared only the path, and the workers loaded whatever the file held
when they built their env: a file edited mid-run, or before a resume, mixed checkpoints of two datasets."""

import csv
import hashlib

import numpy as np
import pytest

from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.envs import make_vec_env
from dask_podracer.envs.registry import same_env
from dask_podracer.envs.trading import MarketDataError, random_walk_market
from dask_podracer.population.preflight import check_store_fits, pin_data


def write_market(path, seed=5, days=300):
    market = random_walk_market(assets=2, days=days, seed=seed)
    dates = np.datetime64("2020-01-01") + np.arange(days)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["date", "ticker", "open", "high", "low", "close", "volume"])
        for t in range(days):
            for j, ticker in enumerate(("AAA", "BBB")):
                writer.writerow([str(dates[t]), ticker, *(f"{getattr(market, k)[t, j]:.6f}"
                                                          for k in ("open", "high", "low", "close", "volume"))])
    return str(path)


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def trading_config(tmp_path, market, eval_env_kwargs=None):
    return config_from_dict({
        "run": {"env": "StockTrading-v0", "env_kwargs": {"market": market, "episode_days": 20},
                "eval_env_kwargs": {"period": "validation", **(eval_env_kwargs or {})}, "algorithm": "sac",
                "max_segments": 2, "seed": 1, "store": str(tmp_path / "s.zarr")},
        "segment": {"env_steps": 100, "eval_episodes": 1},
        "hparams": {"hidden": [16], "num_envs": 2, "learning_starts": 50, "batch_size": 32},
    })


def test_a_run_pins_its_market_files_and_a_generated_market_is_left_as_it_is(tmp_path):
    train, other = write_market(tmp_path / "a.csv"), write_market(tmp_path / "b.csv", seed=6)
    pinned = pin_data(trading_config(tmp_path, train)).run
    assert pinned.env_kwargs == {"market": train, "episode_days": 20, "market_sha256": sha256(train)}
    assert pinned.eval_env_kwargs == {"period": "validation"}  # the scoring env reads the same file
    scored_elsewhere = pin_data(trading_config(tmp_path, train, {"market": other})).run
    assert scored_elsewhere.eval_env_kwargs == {"period": "validation", "market": other, "market_sha256": sha256(other)}
    generated = trading_config(tmp_path, "synthetic")
    assert pin_data(generated) is generated


def test_an_env_refuses_a_market_file_whose_content_changed(tmp_path):
    path = write_market(tmp_path / "a.csv")
    pin = sha256(path)
    make_vec_env("StockTrading-v0", 1, market=path, market_sha256=pin, episode_days=20)
    write_market(path, seed=6)  # edited while the run goes on: a worker that builds its env now reads it
    says = rf"^{path}: the file has changed since this run began on it \(SHA-256 now {sha256(path)[:12]}\.\.\., "
    with pytest.raises(MarketDataError, match=says + rf"the run's {pin[:12]}\.\.\.\)"):
        make_vec_env("StockTrading-v0", 1, market=path, market_sha256=pin, episode_days=20)
    with pytest.raises(ValueError, match="market_sha256 pins the content of a market file, and market 'synthetic'"):
        make_vec_env("StockTrading-v0", 1, market="synthetic", market_sha256=pin)


def test_a_pin_only_one_side_has_is_not_compared():
    # a store from before pins holds none: it resumes; two pins that differ are two datasets
    assert same_env({"market": "m.csv"}, {"market": "m.csv", "market_sha256": "ab"})
    assert not same_env({"market": "m.csv", "market_sha256": "cd"}, {"market": "m.csv", "market_sha256": "ab"})


@pytest.mark.slow
def test_a_store_whose_market_file_changed_is_not_resumed(cpu_client, tmp_path):
    from dask_podracer.population import run_tournament
    from dask_podracer.store import PodracerStore

    path = write_market(tmp_path / "a.csv")
    config = trading_config(tmp_path, path)
    run_tournament(config, cpu_client, poll_seconds=0.2)
    store = PodracerStore(str(tmp_path / "s.zarr"))
    board, history = store.read_leaderboard(), store.read_history()
    assert board and all(e["env_kwargs"]["market_sha256"] == sha256(path) for e in board)
    assert store.read_run_state()["env_kwargs"]["market_sha256"] == sha256(path)
    write_market(path, seed=6)
    with pytest.raises(ConfigError, match=r"holds a tournament on 'StockTrading-v0' trained on data whose content "
                                          r"has changed since \(market_sha256 [0-9a-f]{12}\.\.\., now"):
        run_tournament(config, cpu_client, poll_seconds=0.2)
    check_store_fits(config)  # the config as written holds no pin: what it names is compared when the run pins it
    assert store.read_leaderboard() == board and store.read_history() == history
