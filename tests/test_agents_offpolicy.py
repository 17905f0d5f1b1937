"""DDPG, TD3 and the critic ensemble: known answers, the batched path against a loop, learning, resizing."""

import pytest
import torch
from helpers import score, train_agent

from dask_podracer.agents import algorithm_info, make_agent
from dask_podracer.agents.ddpg import DDPGConfig
from dask_podracer.agents.ensemble import (COMBINE_MODES, ENSEMBLE_TUNABLE, combine, combine_loop, critic_loop,
                                           redq_heads)
from dask_podracer.agents.networks import CriticEnsemble
from dask_podracer.agents.offpolicy import smoothed_target_action, td_target
from dask_podracer.agents.td3 import TD3Config
from dask_podracer.envs import make_vec_env
from dask_podracer.train.state import flatten_state, unflatten_state

TD3_FAST = {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 2.0, "gamma": 0.98}
DDPG_FAST = {"hidden": (64, 64), "num_envs": 4, "gamma": 0.98, "utd_ratio": 2.0, "batch_size": 128}
TINY = {"hidden": (16, 16), "num_envs": 2, "learning_starts": 32, "batch_size": 16, "buffer_size": 1000}


def _spaces(env="Pendulum"):
    env = make_vec_env(env, 1)
    return env.single_observation_space, env.single_action_space


# -- ensembles -----------------------------------------------------------------------------

def test_batched_ensemble_equals_its_loop_path_values_and_gradients():
    torch.manual_seed(0)
    critic = CriticEnsemble(3, 1, (32, 32), size=5)
    obs, action = torch.randn(7, 3), torch.randn(7, 1)
    batched = critic(obs, action)
    looped = critic_loop(critic, obs, action)
    assert batched.shape == looped.shape == (5, 7)
    torch.testing.assert_close(batched, looped)
    grads = [torch.autograd.grad(q.square().sum(), list(critic.parameters())) for q in (batched, looped)]
    for g_batched, g_loop in zip(*grads):
        torch.testing.assert_close(g_batched, g_loop)


@pytest.mark.parametrize("how", COMBINE_MODES)
def test_combine_equals_the_plain_loop(how):
    q = torch.randn(6, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    fast = combine(q, how, subset=3, weight=0.3, generator=torch.Generator().manual_seed(1))
    # The REDQ subset is random: both paths reduce over the same draw, `redq_heads` is tested on its own below.
    heads = redq_heads(6, 3, torch.Generator().manual_seed(1)).tolist()
    slow = combine_loop(list(q), how, heads=heads, weight=0.3)
    torch.testing.assert_close(fast, slow)


def test_redq_subsets_are_distinct_heads_drawn_uniformly():
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([redq_heads(5, 2, g) for _ in range(5000)])
    assert all(len(set(d.tolist())) == 2 for d in draws[:100]) and draws.min() >= 0 and draws.max() <= 4
    counts = torch.bincount(draws.flatten(), minlength=5).double() / 5000
    torch.testing.assert_close(counts, torch.full((5,), 2 / 5, dtype=torch.float64), atol=0.03, rtol=0)
    assert redq_heads(3, 7).sort().values.tolist() == [0, 1, 2]  # a subset larger than the ensemble: all heads


def test_combine_known_answers():
    q = torch.tensor([[1.0, 5.0], [3.0, 2.0], [2.0, 8.0]])  # 3 heads, 2 samples
    torch.testing.assert_close(combine(q, "mean"), torch.tensor([2.0, 5.0]))
    torch.testing.assert_close(combine(q, "min"), torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(combine(q, "weighted", weight=0.25), torch.tensor([0.25 * 1 + 0.75 * 2, 0.25 * 2 + 0.75 * 5]))
    # The same as an L-estimator: weight + (1 - weight) / E on the smallest head, (1 - weight) / E on the others.
    # Sample 0 sorted: 1, 2, 3 -> 0.5 * 1 + 0.25 * 2 + 0.25 * 3 = 1.75 = 0.25 * 1 + 0.75 * 2.
    torch.testing.assert_close(combine(q, "weighted", weight=0.25)[0], torch.tensor(0.5 * 1 + 0.25 * 2 + 0.25 * 3))
    torch.testing.assert_close(combine(q, "redq", subset=3), combine(q, "min"))  # all heads: the plain min
    # A subset of one head is that head: over many draws each sample takes one of the heads' values.
    draws = torch.stack([combine(q, "redq", subset=1) for _ in range(50)])
    assert all(any(torch.equal(d, q[i]) for i in range(3)) for d in draws) and len(draws.unique(dim=0)) > 1
    with pytest.raises(ValueError, match="combine must be one of"):
        combine(q, "max")


# -- TD3's pieces --------------------------------------------------------------------------

def test_td_target_bootstraps_except_at_terminal_states():
    got = td_target(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0]), torch.tensor([10.0, 10.0]), 0.9)
    torch.testing.assert_close(got, torch.tensor([10.0, 1.0]))


def test_target_policy_smoothing_is_clipped_and_in_bounds():
    torch.manual_seed(0)  # the noise: every one of 4,000 huge draws must clip (one below 5e-7 in size would not)
    low, high = torch.tensor([-2.0]), torch.tensor([2.0])  # half range 2
    action = torch.zeros(4000, 1)
    smoothed = smoothed_target_action(action, noise_std=1e6, noise_clip=0.5, low=low, high=high)
    assert set(smoothed.unique().tolist()) == {-1.0, 1.0}  # huge noise is clipped to +-0.5 half-ranges
    smoothed = smoothed_target_action(action, noise_std=0.2, noise_clip=0.5, low=low, high=high)
    assert 0.29 < smoothed.abs().mean().item() < 0.35  # E|N(0, 0.2 * 2)| = 0.32 (the clip at 1.0 is 2.5 sigma)
    smoothed = smoothed_target_action(torch.full((4000, 1), 1.9), noise_std=0.2, noise_clip=0.5, low=low, high=high)
    assert smoothed.max().item() == 2.0 and smoothed.min().item() >= 0.9 - 1e-6  # within bounds and the clip


def test_td3_moves_actor_and_targets_once_per_policy_delay():
    agent = make_agent("td3", *_spaces(), {**TINY, "policy_delay": 3})
    agent.replay.add(torch.randn(64, 3), torch.rand(64, 1) * 4 - 2, torch.randn(64), torch.randn(64, 3),
                     torch.zeros(64))
    snapshots = []
    for _ in range(6):
        agent.update(agent.replay.sample(16))
        snapshots.append([m.state_dict()["body.0.weight"].clone() if hasattr(m, "body") else m.state_dict()["net.0.weight"].clone()
                          for m in (agent.actor, agent.actor_target, agent.critic_target)])
    moved = [[not torch.equal(a, b) for a, b in zip(snapshots[i - 1], snapshots[i])] for i in range(1, 6)]
    # updates 2..6: the actor and both targets move at updates 3 and 6 only.
    assert moved == [[False] * 3, [True] * 3, [False] * 3, [False] * 3, [True] * 3]


def test_td3_target_by_hand_smoothed_clipped_action_and_the_minimum_of_its_critics():
    agent = make_agent("td3", *_spaces(), {**TINY, "num_critics": 3, "target_noise": 0.6, "target_noise_clip": 0.5,
                                           "gamma": 0.9})
    g = torch.Generator().manual_seed(0)
    batch = {"obs": torch.randn(64, 3, generator=g), "action": torch.rand(64, 1, generator=g) * 4 - 2,
             "reward": torch.randn(64, generator=g), "next_obs": torch.randn(64, 3, generator=g) * 3,
             "terminated": (torch.rand(64, generator=g) < 0.25).float()}
    r, not_done = batch["reward"], 1 - batch["terminated"]
    torch.manual_seed(7)
    noise = torch.randn(64, 1)  # the draw the target makes after the same seed (randn_like of a [64, 1] action)
    with torch.no_grad():
        mu = agent.actor_target(batch["next_obs"])
        eps = (noise * 0.6).clamp(-0.5, 0.5)  # in half-range units; Pendulum's half range is 2
        assert (eps.abs() == 0.5).any() and (eps.abs() < 0.5).any()  # the clip is active for some samples only
        smoothed = (mu + 2 * eps).clamp(-2, 2)
        q_next = agent.critic_target(batch["next_obs"], smoothed)  # [3, 64]
        expected = r + 0.9 * not_done * q_next.min(dim=0).values
        q = agent.critic(batch["obs"], batch["action"])
        # What a broken target would give instead: no smoothing, or the mean of the critics.
        unsmoothed = r + 0.9 * not_done * agent.critic_target(batch["next_obs"], mu).min(dim=0).values
        mean_of_critics = r + 0.9 * not_done * q_next.mean(dim=0)
    assert (expected - unsmoothed).abs().max() > 1e-3 and (expected - mean_of_critics).abs().max() > 1e-3
    torch.manual_seed(7)
    torch.testing.assert_close(agent.target(batch), expected)
    torch.manual_seed(7)  # and update() regresses the critics on exactly that target
    critic_loss = agent.update(batch)["critic_loss"]
    torch.testing.assert_close(critic_loss, 0.5 * (q - expected).square().mean(dim=1).sum())


# -- learning ------------------------------------------------------------------------------

@pytest.mark.slow
def test_td3_learns_pendulum_well_beyond_random():
    trained = score(train_agent("td3", TD3_FAST, env_steps=3000))
    assert trained > -700, f"TD3 reached only {trained:.0f} after 3000 env steps (random: about -1300)"


@pytest.mark.slow
def test_ddpg_learns_pendulum_well_beyond_random():
    trained = score(train_agent("ddpg", DDPG_FAST, env_steps=3000))
    assert trained > -700, f"DDPG reached only {trained:.0f} after 3000 env steps (random: about -1300)"


def test_sac_with_a_redq_ensemble_and_thousands_of_envs_runs():
    hparams = {**TINY, "num_envs": 2048, "batch_size": 1024, "buffer_size": 10_000, "utd_ratio": 0.002,  # 4 updates per iteration
               "num_critics": 6, "target_combine": "redq", "redq_subset": 2}
    agent = train_agent("sac", hparams, env_steps=3 * 2048)
    assert agent.updates == 12 and agent.critic.size == 6 and agent.replay.size == 3 * 2048


# -- checkpoints, config, determinism ------------------------------------------------------

@pytest.mark.parametrize("algorithm", ["ddpg", "td3"])
def test_state_dict_round_trip_and_new_learning_rates_win(algorithm):
    agent = train_agent(algorithm, TINY, env_steps=64)
    state = agent.state_dict()
    clone = make_agent(algorithm, *_spaces(), {**TINY, "actor_lr": 5e-4, "critic_lr": 2e-3})
    clone.load_state_dict(unflatten_state(*flatten_state(state)[::-1]))  # as a checkpoint stores it
    obs = torch.randn(16, 3)
    assert torch.equal(agent.act(obs), clone.act(obs))
    assert [g["lr"] for g in clone.actor_optim.param_groups] == [5e-4]
    assert [g["lr"] for g in clone.critic_optim.param_groups] == [2e-3]
    assert clone.updates == agent.updates > 0 and clone.replay.size == agent.replay.size == 64


def test_configs_and_registry():
    assert TD3Config().num_critics == 2 and TD3Config().policy_delay == 2 and TD3Config().target_noise == 0.2
    assert DDPGConfig().num_critics == 1 and DDPGConfig().policy_delay == 1 and DDPGConfig().target_noise == 0.0
    for name in ("ddpg", "td3", "sac"):
        info, config = algorithm_info(name), algorithm_info(name).config_cls()
        assert set(ENSEMBLE_TUNABLE) <= set(info.tunable)
        for t in info.tunable:  # floats, the ensemble's two ints, and categoricals with declared options
            value = getattr(config, t)
            assert isinstance(value, float) or (t in ("num_critics", "redq_subset") and isinstance(value, int)) \
                or value in info.choices[t], t
    with pytest.raises(ValueError, match=r"policy_delay must be >= 1, got 0"):
        TD3Config(policy_delay=0)
    with pytest.raises(ValueError, match=r"target_combine must be one of"):
        TD3Config(target_combine="max")
    with pytest.raises(ValueError, match=r"^num_critics must be >= 2 \(twin or larger critics\), got 1$"):
        TD3Config(num_critics=1)
    assert DDPGConfig(num_critics=1).num_critics == 1
    with pytest.raises(ValueError, match="Box"):
        make_agent("td3", *_spaces("CartPole"), {})


# -- the ensemble's size changes between segments ---------------------------------------------

@pytest.mark.parametrize("algorithm", ["sac", "td3"])
@pytest.mark.parametrize("parent_size, child_size", [(2, 4), (4, 2)])
def test_a_child_loads_a_parent_with_another_ensemble_size_and_trains_on(algorithm, parent_size, child_size):
    parent = train_agent(algorithm, {**TINY, "utd_ratio": 1.0, "num_critics": parent_size}, env_steps=64)
    state = unflatten_state(*flatten_state(parent.state_dict())[::-1])  # as a checkpoint stores it
    child = make_agent(algorithm, *_spaces(), {**TINY, "utd_ratio": 1.0, "num_critics": child_size})
    child.load_state_dict(state)
    shared, source = min(parent_size, child_size), [i % parent_size for i in range(parent_size, child_size)]
    for name in ("critic", "critic_target"):
        ours, theirs = getattr(child, name).state_dict(), getattr(parent, name).state_dict()
        for key, p in theirs.items():
            assert ours[key].shape == (child_size, *p.shape[1:])
            assert torch.equal(ours[key][:shared], p[:shared]), (name, key)  # the shared heads are the parent's
            if name == "critic_target":  # an added head's target is its source head's target
                assert torch.equal(ours[key][shared:], p[source])
            elif source:  # an added online head is its source head, jittered by about 1% so the two can part
                assert not torch.equal(ours[key][shared:], p[source])
                torch.testing.assert_close(ours[key][shared:], p[source], rtol=0, atol=0.06 * p.abs().max().item())
    moments, parent_moments = child.critic_optim.state_dict()["state"], parent.critic_optim.state_dict()["state"]
    for index, param_state in parent_moments.items():
        for k in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(moments[index][k][:shared], param_state[k][:shared])
            assert torch.equal(moments[index][k][shared:], param_state[k][source])
        assert torch.equal(moments[index]["step"], param_state["step"])
    obs = torch.randn(16, 3)
    assert torch.equal(child.act(obs), parent.act(obs)) and child.updates == parent.updates > 0
    env = make_vec_env("Pendulum", 2, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(8):
        obs, _, metrics = child.train_iteration(env, obs)
    assert child.updates == parent.updates + 8 * 2 and child.critic(obs, child.act(obs)).shape == (child_size, 2)
    assert metrics and all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
