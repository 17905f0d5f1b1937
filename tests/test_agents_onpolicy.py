"""A2C (and PPO on discrete actions): A2C's gradient is the policy gradient; both learn CartPole."""

import pytest
import torch
from helpers import score, train_agent

from dask_podracer.agents import algorithm_info, make_agent
from dask_podracer.agents.a2c import A2CConfig
from dask_podracer.agents.ppo import clipped_surrogate_loss
from dask_podracer.envs import make_vec_env
from dask_podracer.train.state import flatten_state, unflatten_state


def test_a2c_step_is_the_plain_policy_gradient():
    # With one epoch and one minibatch the policy being updated is the one that acted: ratio = 1,
    # so PPO's clipped loss has the gradient of A2C's -E[A log pi], whatever the clip.
    g = torch.Generator().manual_seed(0)
    log_prob = torch.randn(32, generator=g, dtype=torch.float64).requires_grad_()
    advantages = torch.randn(32, generator=g, dtype=torch.float64)
    loss, clip_fraction, approx_kl = clipped_surrogate_loss(log_prob, log_prob.detach(), advantages, clip_coef=0.2)
    (grad,) = torch.autograd.grad(loss, log_prob)
    (expected,) = torch.autograd.grad(-(advantages * log_prob).mean(), log_prob)
    torch.testing.assert_close(grad, expected)
    assert clip_fraction.item() == 0.0 and approx_kl.item() == 0.0


def test_a2c_config_is_ppo_with_one_step_per_rollout():
    config = A2CConfig(num_envs=4, rollout_steps=5)
    assert (config.epochs, config.num_minibatches, config.batch_size) == (1, 1, 20)
    assert algorithm_info("a2c").config_cls is A2CConfig
    with pytest.raises(ValueError, match=r"rollout_steps must be >= 1, got 0"):
        A2CConfig(rollout_steps=0)
    env = make_vec_env("Pendulum", 4, seed=0)
    agent = make_agent("a2c", env.single_observation_space, env.single_action_space, {"num_envs": 4})
    obs, _ = env.reset()
    obs, steps, metrics = agent.train_iteration(env, obs)
    assert steps == 20 and metrics["updates"] == 1.0 and agent.algorithm == "a2c"


@pytest.mark.parametrize("algorithm, hparams, steps, threshold", [
    ("a2c", {"num_envs": 16, "rollout_steps": 8, "learning_rate": 1e-3}, 30_000, 150),
    ("ppo", {"num_envs": 16, "rollout_steps": 32, "gamma": 0.99, "reward_scale": 1.0, "epochs": 4,
             "num_minibatches": 4}, 20_480, 150),
])
def test_learns_cartpole_well_beyond_random(algorithm, hparams, steps, threshold):
    trained = score(train_agent(algorithm, hparams, env_steps=steps, env="CartPole"), env="CartPole")
    assert trained > threshold, f"{algorithm} reached only {trained:.0f} after {steps} env steps (random: ~10-40)"


def test_a2c_state_dict_round_trip():
    agent = train_agent("a2c", {"num_envs": 4}, env_steps=40, env="CartPole")
    env = make_vec_env("CartPole", 1)
    clone = make_agent("a2c", env.single_observation_space, env.single_action_space,
                       {"num_envs": 4, "learning_rate": 1e-4, "seed": 3})
    clone.load_state_dict(unflatten_state(*flatten_state(agent.state_dict())[::-1]))
    obs = torch.randn(16, 4)
    assert torch.equal(agent.act(obs), clone.act(obs))
    assert [g["lr"] for g in clone.optimizer.param_groups] == [1e-4]
