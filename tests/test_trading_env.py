"""StockTrading-v0: accounting, costs and clamping worked out by hand, turbulence, episodes, the VecEnv contract."""

import numpy as np
import pytest
import torch

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.checker import check_vec_env
from dask_podracer.envs.trading import Market, StockTradingVecEnv, execute

DAYS = 140  # the indicators' 60 rows of warm-up, then 80: train 60..100, validation 100..120, test 120..140


def flat_market(prices=(100.0, 50.0), days=DAYS) -> Market:
    """Assets whose price is constant except where a test changes it."""
    close = np.tile(np.array(prices, dtype=np.float64), (days, 1))
    return Market(np.array([f"d{t:03d}" for t in range(days)]), tuple(f"A{i}" for i in range(len(prices))),
                  close.copy(), close * 1.01, close * 0.99, close, np.ones_like(close), source="flat")


def env_on(market, num_envs=1, **kwargs) -> StockTradingVecEnv:
    kwargs = {"initial_cash": 10_000.0, "max_shares": 10, "turbulence": False, "split": (0.5, 0.75), **kwargs}
    env = StockTradingVecEnv(num_envs, market=market, seed=0, **kwargs)
    env.reset()
    return env


def test_costs_and_reward_known_answer():
    market = flat_market()
    market.close[71] = [110.0, 50.0]  # the day after the trade
    env = env_on(market)
    env.set_portfolio(10_000.0, [0.0, 0.0], day=70)
    # action 1 -> 10 shares of A0; 0.55 -> trunc(5.5) = 5 shares of A1: 1000 + 250 = 1250 bought, 0.1 % = 1.25 paid
    _, reward, _, _, info = env.step(torch.tensor([[1.0, 0.55]]))
    assert env.holdings.tolist() == [[10.0, 5.0]]
    assert env.cash.item() == pytest.approx(10_000.0 - 1250.0 - 1.25)
    assert info["costs"].item() == pytest.approx(1.25)
    assert info["traded_value"].item() == pytest.approx(1250.0)
    # value 10,000 before; after: 8748.75 + 10 x 110 + 5 x 50 = 10,098.75; scaled by 100 / initial cash
    assert info["portfolio_value"].item() == pytest.approx(10_098.75)
    assert reward.item() == pytest.approx(98.75 * 100 / 10_000, rel=1e-6)
    assert not info["clamped"].item()


def test_a_buy_beyond_the_cash_is_scaled_down_to_whole_shares():
    env = env_on(flat_market((100.0,)))
    env.set_portfolio(1_000.0, [0.0], day=70)
    _, _, _, _, info = env.step(torch.tensor([[1.0]]))  # 10 shares: 1001 with costs, more than the 1000 held
    # scaled by 1000 / 1001 and rounded down: 9 shares, 900 + 0.9 paid
    assert env.holdings.item() == 9.0
    assert env.cash.item() == pytest.approx(1_000.0 - 900.9)
    assert info["clamped_shares"].tolist() == [[1.0]] and info["clamped"].item()


def test_buys_are_scaled_together_and_sales_pay_for_them_first():
    env = env_on(flat_market((100.0, 100.0)), max_shares=10)
    env.set_portfolio(1_000.0, [0.0, 0.0], day=70)
    _, _, _, _, info = env.step(torch.tensor([[1.0, 1.0]]))  # 2002 asked for, 1000 there: x 0.4995 -> 4 each
    assert env.holdings.tolist() == [[4.0, 4.0]]
    assert env.cash.item() == pytest.approx(1_000.0 - 800.8)
    assert info["clamped_shares"].tolist() == [[6.0, 6.0]]
    env.set_portfolio(0.0, [10.0, 0.0], day=70)
    env.step(torch.tensor([[-1.0, 1.0]]))  # sell 10 (999 after costs), then buy: 1001 asked -> 9 shares
    assert env.holdings.tolist() == [[0.0, 9.0]]
    assert env.cash.item() == pytest.approx(999.0 - 900.9)


def test_a_sale_beyond_the_holdings_is_cut_no_shorting():
    env = env_on(flat_market((100.0,)))
    env.set_portfolio(0.0, [5.0], day=70)
    _, _, _, _, info = env.step(torch.tensor([[-1.0]]))  # sell 10, hold 5
    assert env.holdings.item() == 0.0
    assert env.cash.item() == pytest.approx(500.0 * 0.999)
    assert info["clamped_shares"].item() == 5.0 and info["costs"].item() == pytest.approx(0.5)


def test_execute_on_a_batch_matches_a_plain_loop():
    """The vectorised order execution against the rules written one env and one asset at a time."""
    g = torch.Generator().manual_seed(0)
    b, n, cost = 64, 5, 0.001
    price = torch.rand(b, n, generator=g, dtype=torch.float64) * 100 + 1
    holdings = torch.randint(0, 20, (b, n), generator=g).double()
    cash = torch.rand(b, generator=g, dtype=torch.float64) * 3000
    order = torch.randint(-25, 26, (b, n), generator=g).double()
    new_cash, new_holdings, *_ = execute(order, price, cash, holdings, cost)
    for k in range(b):
        c = cash[k].item()
        h = holdings[k].tolist()
        for i in range(n):
            if order[k, i] < 0:
                s = min(-order[k, i].item(), h[i])
                h[i] -= s
                c += s * price[k, i].item() * (1 - cost)
        wanted = sum(max(order[k, i].item(), 0) * price[k, i].item() for i in range(n)) * (1 + cost)
        scale = min(1.0, c / wanted) if wanted > 0 else 1.0
        for i in range(n):
            if order[k, i] > 0:
                q = np.floor(order[k, i].item() * scale) if scale < 1 else order[k, i].item()
                h[i] += q
                c -= q * price[k, i].item() * (1 + cost)
        assert new_cash[k].item() == pytest.approx(c, abs=1e-6)
        assert new_holdings[k].tolist() == h
    assert (new_cash > -1e-6).all() and (new_holdings >= 0).all()


def test_accounting_is_conserved_over_random_trades():
    """cash + holdings . price changes over a step by the holdings' price change less the costs paid, nothing else."""
    env = make_vec_env("StockTrading-v0", 16, seed=1, assets=5, days=400, episode_days=40)
    g = torch.Generator().manual_seed(2)
    env.reset(seed=1)
    total_costs = 0.0
    for _ in range(200):
        value_before = env.portfolio_value()
        price_today = env._close[env.day]
        day_before = env.day.clone()
        _, reward, _, truncated, info = env.step(torch.rand(16, 5, generator=g) * 2.2 - 1.1)
        cont = ~truncated  # envs that reset report their last value in info, but their holdings are fresh
        price_tomorrow = env._close[day_before + 1]
        move = (env.holdings * (price_tomorrow - price_today)).sum(1)
        expected = value_before + move - info["costs"]
        assert torch.allclose(info["portfolio_value"][cont], expected[cont], rtol=0, atol=1e-6)
        assert torch.allclose(reward.double(), (info["portfolio_value"] - value_before) * env.reward_scale,
                              rtol=1e-5, atol=1e-4)
        assert (env.cash > -1e-6).all() and (env.holdings >= 0).all()
        assert torch.equal(env.holdings, env.holdings.round())  # whole shares
        total_costs += float(info["costs"].sum())
    assert total_costs > 0


def test_turbulence_above_the_threshold_liquidates():
    env = env_on(flat_market(), turbulence=True, turbulence_threshold=-1.0)  # every day is turbulent
    env.set_portfolio(1_000.0, [3.0, 4.0], day=70)
    _, _, _, _, info = env.step(torch.tensor([[1.0, 1.0]]))  # the buy is replaced by selling everything
    assert info["turbulent"].item() and env.holdings.tolist() == [[0.0, 0.0]]
    assert env.cash.item() == pytest.approx(1_000.0 + 500.0 * 0.999)
    calm = env_on(flat_market(), turbulence=False)
    calm.set_portfolio(1_000.0, [3.0, 4.0], day=70)
    _, _, _, _, info = calm.step(torch.tensor([[0.0, 0.0]]))
    assert not info["turbulent"].item() and calm.holdings.tolist() == [[3.0, 4.0]]


def test_the_default_threshold_is_a_quantile_of_the_training_period():
    env = make_vec_env("StockTrading-v0", 1, seed=0, assets=5, days=400)
    start, end = env.periods["train"]
    assert env.turbulence_threshold == pytest.approx(np.quantile(env.market.turbulence[start:end], 0.99))


def test_episodes_train_on_random_windows_and_evaluate_on_the_whole_period():
    kwargs = {"assets": 4, "days": 400, "episode_days": 30}
    train = make_vec_env("StockTrading-v0", 8, seed=3, **kwargs)
    train.reset(seed=3)
    start, end = train.periods["train"]
    assert train.max_episode_steps == 30
    assert ((train.day >= start) & (train.day <= end - 1 - 30)).all() and train.day.unique().numel() > 1
    again = make_vec_env("StockTrading-v0", 8, seed=3, **kwargs)
    again.reset(seed=3)
    assert torch.equal(train.day, again.day)
    for period in ("validation", "test"):
        env = make_vec_env("StockTrading-v0", 2, seed=0, period=period, **kwargs)
        obs, _ = env.reset()
        first, last = env.periods[period]
        assert env.max_episode_steps == last - 1 - first and (env.day == first).all()
        assert torch.equal(obs[0], obs[1])
        for _ in range(env.max_episode_steps - 1):
            _, _, terminated, truncated, _ = env.step(torch.zeros(2, 4))
            assert not (terminated | truncated).any()
        _, _, terminated, truncated, info = env.step(torch.zeros(2, 4))
        assert truncated.all() and not terminated.any() and (info["portfolio_value"] == 10_000.0 * 100).all()
    assert train.periods["train"][1] == train.periods["validation"][0]
    assert train.periods["validation"][1] == train.periods["test"][0] == env.periods["test"][0]


def test_observation_layout():
    env = make_vec_env("StockTrading-v0", 3, seed=0, assets=4, days=400)
    obs, _ = env.reset()
    assert obs.shape == (3, 2 + 6 * 4) and obs.dtype == torch.float32
    assert torch.equal(obs[:, 0], torch.ones(3)) and torch.equal(obs[:, 1:5], torch.zeros(3, 4))  # all cash
    features = torch.as_tensor(env.market.features[env.day].reshape(3, -1))
    assert torch.equal(obs[:, 5:25], features)
    env.step(torch.ones(3, 4))
    obs = env._observe()
    weights = obs[:, :5].double()
    assert torch.allclose(weights.sum(1), torch.ones(3, dtype=torch.float64), atol=1e-5)


def test_the_vec_env_contract_holds_in_the_train_period():
    """The checker's seeding rule (another seed, other initial observations) holds where episodes start on random
    dates; validation and test episodes all start on the period's first date, whatever the seed, by design."""
    env = make_vec_env("StockTrading-v0", 3, seed=0, assets=4, days=400, episode_days=25)
    report = check_vec_env(env)
    assert report.truncations >= 3 and report.terminations == 0


def test_float64_simulation_gives_float32_outputs():
    env = make_vec_env("StockTrading-v0", 2, seed=0, assets=3, days=300, dtype=torch.float64)
    obs, _ = env.reset()
    _, reward, _, _, info = env.step(torch.zeros(2, 3))
    assert obs.dtype == reward.dtype == info["episode_return"].dtype == torch.float32


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="period must be one of"):
        make_vec_env("StockTrading-v0", 1, period="future", assets=3, days=300)
    with pytest.raises(ValueError, match="market must be one of"):
        make_vec_env("StockTrading-v0", 1, market="nasdaq")
    with pytest.raises(ValueError, match="cost must be"):
        make_vec_env("StockTrading-v0", 1, cost=1.5, assets=3, days=300)
    with pytest.raises(ValueError, match="score must be one of"):
        make_vec_env("StockTrading-v0", 1, score="sortino", assets=3, days=300)
    with pytest.raises(ValueError, match="reward must be one of"):
        make_vec_env("StockTrading-v0", 1, reward="log", assets=3, days=300)


def random_trader(num_assets: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    return lambda obs: torch.rand(obs.shape[0], num_assets, generator=generator) * 2 - 1


def test_the_episode_score_is_the_backtests_sharpe_ratio():
    """Evaluation ranks a validation episode by its Sharpe ratio (info["episode_score"]), the backtest's figure."""
    from dask_podracer.envs.trading.backtest import backtest
    from dask_podracer.train.evaluate import episode_scores

    kwargs = {"assets": 4, "days": 600, "market_seed": 3, "period": "validation"}
    act = random_trader(4, seed=0)
    agent = type("Random", (), {"act": lambda self, obs, deterministic=True: act(obs)})()
    score = episode_scores(agent, make_vec_env("StockTrading-v0", 1, **kwargs), seed=0)
    act = random_trader(4, seed=0)
    figures = backtest(make_vec_env("StockTrading-v0", 1, **kwargs), act)
    assert score.item() == pytest.approx(figures["sharpe"], rel=1e-9)
    act = random_trader(4, seed=0)
    by_return = episode_scores(agent, make_vec_env("StockTrading-v0", 1, score="return", **kwargs), seed=0)
    assert by_return.item() == pytest.approx(100 * figures["cumulative_return"], rel=1e-6)  # float32 rewards


def test_the_excess_reward_subtracts_what_the_initial_cash_made_in_the_market():
    market = flat_market()
    market.close[71] = [110.0, 45.0]  # the market: +10 % and -10 %, 0 on average
    market.close[72] = [121.0, 45.0]  # +10 % and 0: +5 % on average
    env = env_on(market, reward="excess")
    env.set_portfolio(10_000.0, [0.0, 0.0], day=70)
    _, reward, _, _, info = env.step(torch.tensor([[1.0, 0.0]]))  # 10 shares of A0, 1 paid in costs
    assert reward.item() == pytest.approx((10_099.0 - 10_000.0 - 0.0) * 100 / 10_000, rel=1e-6)
    _, reward, _, _, info = env.step(torch.tensor([[0.0, 0.0]]))  # holds: +110 while the market made 5 % of 10,000
    assert reward.item() == pytest.approx((110.0 - 500.0) * 100 / 10_000, rel=1e-6)
    assert info["portfolio_value"].item() == pytest.approx(10_209.0)  # the accounting is the same


def test_shuffled_assets_are_one_order_per_episode_for_observations_and_actions_alike():
    kwargs = {"assets": 5, "days": 600, "episode_days": 20}
    shuffled = make_vec_env("StockTrading-v0", 4, seed=1, shuffle_assets=True, **kwargs)
    plain = make_vec_env("StockTrading-v0", 4, seed=1, **kwargs)
    shuffled.reset(seed=3)
    plain.reset(seed=3)
    plain.day = shuffled.day.clone()
    first_orders = shuffled.order.clone()
    assert not torch.equal(first_orders, torch.arange(5).expand(4, 5))  # (seeded: some env is shuffled)
    act = random_trader(5, seed=0)
    for _ in range(19):
        order = shuffled.order.clone()
        action = act(torch.zeros(4, 1))
        obs, reward, *_ = shuffled.step(action)
        plain_obs, plain_reward, *_ = plain.step(torch.empty_like(action).scatter_(1, order, action))
        assert torch.equal(reward, plain_reward)
        assert torch.equal(obs[:, 1:6], plain_obs[:, 1:6].gather(1, order))  # holdings, slot j = asset order[j]
        features = plain_obs[:, 6:31].view(4, 5, 5).gather(2, order.unsqueeze(1).expand(-1, 5, -1))
        assert torch.equal(obs[:, 6:31].view(4, 5, 5), features)
    shuffled.step(act(torch.zeros(4, 1)))  # the 20th day ends every episode: new orders
    assert not torch.equal(shuffled.order, first_orders)
    validation = make_vec_env("StockTrading-v0", 2, shuffle_assets=True, period="validation", **kwargs)
    validation.reset(seed=0)
    assert torch.equal(validation.order, torch.arange(5).expand(2, 5))  # scored in the market's own order


def test_turbulence_is_observed_relative_to_the_threshold_even_when_it_does_not_liquidate():
    """`turbulence = false` divided the index by 1 instead of the threshold: the last observation entry was the raw
    index clipped at 10 (10 on most days of a 10-asset market), unlike docs/trading.md's turbulence / threshold."""
    kwargs = {"assets": 10, "days": 600}
    on = make_vec_env("StockTrading-v0", 4, seed=0, **kwargs)
    off = make_vec_env("StockTrading-v0", 4, seed=0, turbulence=False, **kwargs)
    assert off.turbulence_threshold == float("inf")  # never liquidates
    obs_on, _ = on.reset(seed=0)
    obs_off, _ = off.reset(seed=0)
    for _ in range(50):  # no trades: liquidation changes nothing, so the observations must agree
        assert torch.equal(obs_on, obs_off)
        expected = np.minimum(off.market.turbulence[off.day.numpy()] / on.turbulence_threshold, 10.0)
        np.testing.assert_allclose(obs_off[:, -1].numpy(), expected, rtol=1e-6)
        obs_on, *_ = on.step(torch.zeros(4, 10))
        obs_off, *_ = off.step(torch.zeros(4, 10))
