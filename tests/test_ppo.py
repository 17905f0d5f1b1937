"""PPO: known-answer GAE and losses, learning Pendulum, checkpoints, determinism."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.agents.base import algorithm_info, make_agent
from dask_podracer.agents.ppo import (PPOAgent, PPOConfig, adapt_learning_rate,
                                      clipped_surrogate_loss, value_loss)
from dask_podracer.agents.rollout import compute_gae
from dask_podracer.envs import make_vec_env
from dask_podracer.train.state import flatten_state, unflatten_state

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(num_envs=8, rollout_steps=16, hidden=(16, 16), epochs=2, num_minibatches=4)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny networks run fastest on one thread; more oversubscribe a shared CPU badly."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train(config: PPOConfig, env_steps: int, env_seed: int = 0, torch_seed: int = 0,
          disturb: bool = False) -> PPOAgent:
    """Seed torch, build a Pendulum VecEnv and a PPO agent, train until `env_steps`.

    With `disturb`, draw from torch's global RNG between iterations (as other code in a process may).
    """
    torch.manual_seed(torch_seed)
    env = make_vec_env("Pendulum", config.num_envs, seed=env_seed)
    agent = PPOAgent(env.single_observation_space, env.single_action_space, config, env.device)
    obs, _ = env.reset()
    steps = 0
    while steps < env_steps:
        obs, n, metrics = agent.train_iteration(env, obs)
        steps += n
        if disturb:
            torch.rand(10)
        assert all(np.isfinite(v) for v in metrics.values()), metrics
    return agent


def evaluate(agent: PPOAgent, num_envs: int = 10, seed: int = 12345) -> float:
    """Mean return of one deterministic 200-step episode in each of `num_envs` Pendulums."""
    env = make_vec_env("Pendulum", num_envs, seed=seed)
    obs, _ = env.reset()
    total = torch.zeros(num_envs)
    for _ in range(env.max_episode_steps):
        obs, reward, _, _, _ = env.step(agent.act(obs))
        total += reward
    return total.mean().item()


def flat_params(agent: PPOAgent) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in [*agent.actor.parameters(), *agent.critic.parameters()]])


# -- GAE -----------------------------------------------------------------------------------

def gae_reference(rewards, values, next_values, terminated, dones, gamma, lam):
    """The textbook recursion, one env and one step at a time, in plain Python floats."""
    T, B = len(rewards), len(rewards[0])
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t][b] else gamma * next_values[t][b]
            delta = rewards[t][b] + bootstrap - values[t][b]
            running = delta + (0.0 if dones[t][b] else gamma * lam * running)
            adv[t][b] = running
    return adv


def test_gae_matches_double_loop_on_random_data():
    g = torch.Generator().manual_seed(0)
    T, B = 9, 6
    rewards, values, next_values = (torch.randn(T, B, generator=g, dtype=torch.float64) for _ in range(3))
    truncated = torch.rand(T, B, generator=g) < 0.15
    terminated = (torch.rand(T, B, generator=g) < 0.2) & ~truncated
    dones = terminated | truncated
    adv, ret = compute_gae(rewards, values, next_values, terminated, dones, gamma=0.93, gae_lambda=0.8)
    expected = gae_reference(rewards.tolist(), values.tolist(), next_values.tolist(), terminated.tolist(),
                             dones.tolist(), 0.93, 0.8)
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(ret, adv + values)


def test_gae_hand_computed():
    # gamma = lambda = 0.5, so gamma * lambda = 0.25; V = 0.5 everywhere; reward 1 only at the last step.
    # env 0: one episode, terminated at t=2 (no bootstrap there).
    #   deltas: d0 = 0 + 0.5*0.5 - 0.5 = -0.25, d1 = -0.25, d2 = 1 - 0.5 = 0.5
    #   A2 = 0.5, A1 = -0.25 + 0.25*0.5 = -0.125, A0 = -0.25 + 0.25*(-0.125) = -0.28125
    # env 1: truncated at t=1, where the true next obs is worth 2.0; t=2 is a new episode, terminated.
    #   deltas: d0 = -0.25, d1 = 0 + 0.5*2.0 - 0.5 = 0.5, d2 = 0.5
    #   A2 = 0.5, A1 = 0.5 (the episode ended: no A2 term), A0 = -0.25 + 0.25*0.5 = -0.125
    rewards = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    values = torch.full((3, 2), 0.5)
    next_values = torch.tensor([[0.5, 0.5], [0.5, 2.0], [0.5, 0.5]])
    terminated = torch.tensor([[False, False], [False, False], [True, True]])
    truncated = torch.tensor([[False, False], [False, True], [False, False]])
    adv, ret = compute_gae(rewards, values, next_values, terminated, terminated | truncated, 0.5, 0.5)
    expected = torch.tensor([[-0.28125, -0.125], [-0.125, 0.5], [0.5, 0.5]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + 0.5)


# -- losses --------------------------------------------------------------------------------

def test_clipped_surrogate_gradient_vanishes_where_clipped():
    clip = 0.2
    ratio = torch.tensor([1.5, 0.5, 1.0, 1.5, 0.5], dtype=torch.float64)
    adv = torch.tensor([2.0, -2.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    # sample 0: A > 0, r > 1 + eps -> clipped, no gradient; sample 1: A < 0, r < 1 - eps -> clipped.
    # samples 2-4 keep r*A (the pessimistic side of the min): gradient d(-r A / N)/d log r = -r A / N.
    log_prob = ratio.log().requires_grad_()
    loss, clip_fraction, approx_kl = clipped_surrogate_loss(log_prob, torch.zeros(5, dtype=torch.float64), adv, clip)
    loss.backward()
    objective = [1.2 * 2.0, 0.8 * -2.0, 1.0, -1.5, 0.5]
    assert loss.item() == pytest.approx(-sum(objective) / 5)
    expected_grad = torch.tensor([0.0, 0.0, -1.0, 1.5, -0.5], dtype=torch.float64) / 5
    torch.testing.assert_close(log_prob.grad, expected_grad)
    assert clip_fraction.item() == pytest.approx(4 / 5)  # every ratio but 1.0 is outside [0.8, 1.2]
    assert approx_kl.item() > 0


def test_value_loss_clipping():
    returns, old = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0])
    values = torch.tensor([0.5, 0.1], requires_grad=True)
    loss = value_loss(values, old, returns, clip_value=0.2)
    # sample 0 moved 0.5 > 0.2 from old: the clipped error (0.2 - 1)^2 = 0.64 is larger and constant in V.
    # sample 1 moved 0.1: both errors are (0.1 - 1)^2 = 0.81.
    assert loss.item() == pytest.approx(0.5 * (0.64 + 0.81) / 2)
    loss.backward()
    torch.testing.assert_close(values.grad, torch.tensor([0.0, 0.5 * 2 * (0.1 - 1.0) / 2]))
    assert value_loss(values, old, returns, None).item() == pytest.approx(0.5 * (0.25 + 0.81) / 2)


# -- config and registry -------------------------------------------------------------------

def test_config_validation_and_toml_lists():
    assert PPOConfig(hidden=[32, 32]).hidden == (32, 32)
    assert PPOConfig(num_envs=4, rollout_steps=8).batch_size == 32
    with pytest.raises(ValueError, match=r"clip_coef must be in \(0, 1\], got 1\.5"):
        PPOConfig(clip_coef=1.5)
    with pytest.raises(ValueError, match=r"num_minibatches"):
        PPOConfig(num_envs=2, rollout_steps=2, num_minibatches=5)
    with pytest.raises(ValueError, match=r"gamma"):
        PPOConfig(gamma=1.1)


def test_registered_and_tunables_are_float_fields():
    info = algorithm_info("ppo")
    fields = {f.name: f for f in dataclasses.fields(PPOConfig)}
    assert info.config_cls is PPOConfig and info.factory is PPOAgent
    assert all(name in fields and isinstance(getattr(PPOConfig(), name), float) for name in info.tunable)
    env = make_vec_env("Pendulum", 2, seed=0)
    agent = make_agent("ppo", env.single_observation_space, env.single_action_space, {"num_envs": 2})
    action = agent.act(env.reset()[0], deterministic=False)
    assert action.shape == (2, 1) and bool((action.abs() <= 2.0).all())


# -- learning ------------------------------------------------------------------------------

@pytest.mark.slow
def test_learns_pendulum():
    # The defaults reach about -190 after 65k env steps (~8 s on one CPU thread); random is ~ -1250.
    agent = train(PPOConfig(seed=0), env_steps=65_536)
    assert evaluate(agent) > -500


class MatchSignEnv:
    """A contextual bandit with Discrete(2) actions: obs x ~ U(-1, 1) `[B, 1]`; action (x > 0) pays 1."""

    max_episode_steps = 1

    def __init__(self, num_envs: int, seed: int) -> None:
        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.generator = torch.Generator().manual_seed(seed)

    def reset(self, *, seed=None):
        self.obs = torch.rand(self.num_envs, 1, generator=self.generator) * 2 - 1
        return self.obs, {}

    def step(self, actions):
        reward = (actions == (self.obs[:, 0] > 0).long()).float()
        info = {"final_obs": self.obs, "episode_return": reward, "episode_length": torch.ones(self.num_envs)}
        ones = torch.ones(self.num_envs, dtype=torch.bool)
        return self.reset()[0], reward, ones, ~ones, info

    def close(self):
        pass


def test_learns_discrete_bandit():
    torch.manual_seed(0)  # the agent draws its own seed from the global generator: not from the tests before it
    config = PPOConfig(num_envs=16, rollout_steps=16, hidden=(16,), epochs=4, num_minibatches=4, learning_rate=3e-3)
    env = MatchSignEnv(config.num_envs, seed=0)
    agent = PPOAgent(env.single_observation_space, env.single_action_space, config, env.device)
    obs, _ = env.reset()
    for _ in range(20):
        obs, _, metrics = agent.train_iteration(env, obs)
    x = torch.linspace(-1, 1, 101).unsqueeze(-1)
    accuracy = (agent.act(x) == (x[:, 0] > 0).long()).float().mean().item()
    assert accuracy > 0.9 and metrics["episode_return"] > 0.8


# -- checkpoints ---------------------------------------------------------------------------

def _assert_plain(value, path="state"):
    if isinstance(value, dict):
        for k, v in value.items():
            _assert_plain(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _assert_plain(v, f"{path}[{i}]")
    else:
        assert value is None or isinstance(value, (torch.Tensor, bool, int, float, str)), (path, type(value))


def test_state_dict_round_trip_and_child_learning_rate():
    parent = train(PPOConfig(seed=1, **SMALL), env_steps=256)
    state = parent.state_dict()
    _assert_plain(state)
    env = make_vec_env("Pendulum", 8, seed=3)
    obs, _ = env.reset()

    child = PPOAgent(env.single_observation_space, env.single_action_space, PPOConfig(seed=7, **SMALL), env.device)
    assert not torch.equal(child.act(obs), parent.act(obs))
    child.load_state_dict(unflatten_state(*flatten_state(state)[::-1]))  # as a checkpoint stores it
    assert torch.equal(child.act(obs), parent.act(obs))
    torch.testing.assert_close(flat_params(child), flat_params(parent), rtol=0, atol=0)
    assert child.iterations == parent.iterations == 2

    faster = PPOConfig(seed=7, **{**SMALL, "learning_rate": 3e-4})
    child = PPOAgent(env.single_observation_space, env.single_action_space, faster, env.device)
    child.load_state_dict(state)
    assert [g["lr"] for g in child.optimizer.param_groups] == [3e-4]
    assert state["optimizer"]["param_groups"][0]["lr"] == parent.config.learning_rate  # the parent's is untouched
    # Adam's moments came with the state (an empty state would make the loop below check nothing)
    assert len(child.optimizer.state) == len(parent.optimizer.state) == len(parent.optimizer.param_groups[0]["params"])
    for p_state, c_state in zip(parent.optimizer.state.values(), child.optimizer.state.values()):
        assert torch.equal(p_state["exp_avg"], c_state["exp_avg"])


# -- the adaptive learning rate ----------------------------------------------------------------

def test_adaptive_rate_steps_by_the_kl_within_bounds_as_a_float_and_as_a_tensor():
    """rl_games' rule: /1.5 above 2 x desired_kl, x1.5 below desired_kl / 2, unchanged between; clamped."""
    param = torch.nn.Parameter(torch.zeros(1))
    eager = torch.optim.Adam([param], lr=1e-3)
    graphed = torch.optim.Adam([param], lr=torch.tensor(1e-3))  # a captured optimiser's rate, read by its graph
    rate = graphed.param_groups[0]["lr"]
    expected = 1e-3
    for kl, factor in [(0.02, 1 / 1.5), (0.0161, 1 / 1.5), (0.0159, 1.0), (0.005, 1.0), (0.0041, 1.0),
                       (0.0039, 1.5), (0.0, 1.5)]:
        for optim in (eager, graphed):
            adapt_learning_rate(optim, torch.tensor(kl), desired_kl=0.008, bounds=(1e-6, 1e-2))
        expected *= factor
        assert eager.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12), kl
        assert float(rate) == pytest.approx(expected, rel=1e-6), kl
    assert graphed.param_groups[0]["lr"] is rate  # changed in place
    low, high = 1e-5, 1e-3
    for _ in range(60):
        for optim in (eager, graphed):
            adapt_learning_rate(optim, torch.tensor(1.0), desired_kl=0.008, bounds=(low, high))
    assert eager.param_groups[0]["lr"] == low and float(rate) == pytest.approx(low)
    for _ in range(60):
        for optim in (eager, graphed):
            adapt_learning_rate(optim, torch.tensor(0.0), desired_kl=0.008, bounds=(low, high))
    assert eager.param_groups[0]["lr"] == high and float(rate) == pytest.approx(high)


def test_adaptive_schedule_steers_the_rate_and_each_segment_starts_from_learning_rate():
    """A desired KL far below what steps move the policy by lowers the rate at each minibatch step, one far above
    raises it; the metric reports the rate reached; a checkpoint's child starts again from its own learning_rate.

    Each iteration's first step sees the rollout's own policy, whose KL is 0 up to rounding (+-1e-8 here): it may
    go either way, so two iterations of 8 steps lower the rate at least 14 times and raise it at most twice."""
    steps = 2 * SMALL["epochs"] * SMALL["num_minibatches"]  # two iterations' minibatch steps
    cautious = train(PPOConfig(seed=1, lr_schedule="adaptive", desired_kl=1e-12, **SMALL), env_steps=256)
    assert cautious.optimizer.param_groups[0]["lr"] <= 1e-3 / 1.5 ** (steps - 4) * (1 + 1e-9)
    bold = train(PPOConfig(seed=1, lr_schedule="adaptive", desired_kl=10.0, **SMALL), env_steps=256)
    assert bold.optimizer.param_groups[0]["lr"] == 1e-2  # 1e-3 x 1.5^16, clamped by the default bounds
    bounded = train(PPOConfig(seed=1, lr_schedule="adaptive", desired_kl=10.0, lr_bounds=[1e-4, 2e-3], **SMALL),
                    env_steps=256)
    assert bounded.config.lr_bounds == (1e-4, 2e-3) and bounded.optimizer.param_groups[0]["lr"] == 2e-3

    env = make_vec_env("Pendulum", SMALL["num_envs"], seed=3)
    obs, _ = env.reset(seed=3)
    config = PPOConfig(seed=7, lr_schedule="adaptive", desired_kl=1e-12, **{**SMALL, "learning_rate": 3e-4})
    child = PPOAgent(env.single_observation_space, env.single_action_space, config, env.device)
    child.load_state_dict(cautious.state_dict())
    assert child.optimizer.param_groups[0]["lr"] == 3e-4  # not the parent's adapted rate
    _, _, metrics = child.train_iteration(env, obs)
    assert metrics["learning_rate"] <= 3e-4 / 1.5 ** (steps // 2 - 2) * (1 + 1e-9)
    fixed = train(PPOConfig(seed=1, **SMALL), env_steps=256)
    assert fixed.optimizer.param_groups[0]["lr"] == 1e-3
    with pytest.raises(ValueError, match=r"lr_schedule must be one of \('fixed', 'adaptive'\), got 'cosine'"):
        PPOConfig(lr_schedule="cosine")
    with pytest.raises(ValueError, match=r"desired_kl must be > 0, got 0"):
        PPOConfig(desired_kl=0)
    with pytest.raises(ValueError, match=r"lr_bounds must be \[lowest, highest\] with 0 < lowest <= highest, "
                                         r"got \(0\.01, 0\.001\)"):
        PPOConfig(lr_bounds=[1e-2, 1e-3])


# -- determinism ---------------------------------------------------------------------------

def test_same_seed_same_result():
    a = train(PPOConfig(seed=5, **SMALL), env_steps=384)
    b = train(PPOConfig(seed=5, **SMALL), env_steps=384)
    c = train(PPOConfig(seed=6, **SMALL), env_steps=384)
    d = train(PPOConfig(seed=5, **SMALL), env_steps=384, torch_seed=1)  # a segment with another seed
    e = train(PPOConfig(seed=5, **SMALL), env_steps=384, disturb=True)
    assert torch.equal(flat_params(a), flat_params(b))
    assert torch.equal(flat_params(a), flat_params(e))
    assert not torch.equal(flat_params(a), flat_params(c))
    assert not torch.equal(flat_params(a), flat_params(d))


def test_same_seed_same_result_in_a_fresh_process():
    script = (
        "import torch\n"
        "torch.set_num_threads(1)\n"
        "from tests.test_ppo import SMALL, PPOConfig, train, flat_params\n"
        "print(flat_params(train(PPOConfig(seed=5, **SMALL), env_steps=384)).double().sum().item().hex())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True)
    here = flat_params(train(PPOConfig(seed=5, **SMALL), env_steps=384)).double().sum().item().hex()
    assert out.stdout.strip() == here
