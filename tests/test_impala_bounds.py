"""IMPALA's Gaussian policy under policy lag (issue 25): the bounds loss that keeps its mean near the clipped action
range, and the raw (unclipped) actions that its importance ratios are computed for."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dask_podracer.agents import make_agent
from dask_podracer.agents.impala import SOFT_BOUND, IMPALAConfig, bounds_loss
from dask_podracer.envs import make_vec_env

HPARAMS = {"num_envs": 4, "rollout_steps": 5, "hidden": (16,)}


def test_bounds_loss_pulls_a_mean_past_the_soft_bound_back_and_is_flat_inside_it():
    mean = torch.tensor([[3.0], [0.5], [-3.0], [SOFT_BOUND], [-1.0]], requires_grad=True)
    loss = bounds_loss(mean)
    loss.backward()
    excess = 3.0 - SOFT_BOUND
    assert loss.item() == pytest.approx(2 * excess**2 / 5)
    # gradient descent moves 3.0 down and -3.0 up, towards the range; inside [-1.1, 1.1] nothing moves
    assert mean.grad.squeeze(-1).tolist() == pytest.approx([2 * excess / 5, 0.0, -2 * excess / 5, 0.0, 0.0])
    wide = torch.tensor([[3.0, 0.0], [0.0, -2.0]])  # summed over action dims, averaged over the batch
    assert bounds_loss(wide).item() == pytest.approx(((3.0 - SOFT_BOUND) ** 2 + (2.0 - SOFT_BOUND) ** 2) / 2)


def _agent_with_mean(bias: float, **hparams):
    """An IMPALA agent on Pendulum whose policy mean is about `bias` everywhere and whose critic says 0."""
    torch.manual_seed(0)
    env = make_vec_env("Pendulum-v1", HPARAMS["num_envs"], device="cpu", seed=0)
    agent = make_agent("impala", env.single_observation_space, env.single_action_space, {**HPARAMS, **hparams})
    last = [m for m in agent.actor.body if isinstance(m, nn.Linear)][-1]
    critic_last = [m for m in agent.critic if isinstance(m, nn.Linear)][-1]
    with torch.no_grad():
        last.bias.fill_(bias)
        critic_last.weight.zero_()
        critic_last.bias.zero_()
    return agent, env


def _mean_after_zero_advantage_steps(bias: float, steps: int = 10, **hparams) -> tuple[float, float]:
    """The policy mean over a rollout's observations before and after `steps` learner steps on that rollout with
    its rewards set to 0: with V = 0 every V-trace advantage and target is 0, so the policy gradient and the value
    loss push nothing; whatever moves the mean is the bounds loss."""
    agent, env = _agent_with_mean(bias, **hparams)
    obs, _ = env.reset(seed=0)
    _, rollout, _ = agent.collect(env, obs)
    rollout.rewards.zero_()
    flat = rollout.obs.flatten(0, 1)
    with torch.no_grad():
        before = float(agent.actor.body(flat).mean())
        for _ in range(steps):
            with torch.enable_grad():
                agent.learn([rollout])
        return before, float(agent.actor.body(flat).mean())


def test_a_mean_outside_the_clip_range_is_pulled_back_by_the_default_config():
    assert IMPALAConfig().bound_coef > 0
    before, after = _mean_after_zero_advantage_steps(3.0)
    assert before == pytest.approx(3.0, abs=0.2)
    assert after < before - 0.01, (before, after)  # Adam at 2e-3: about 0.02 in 10 steps
    # without the bounds loss nothing pulls it: the clipped action's return is flat out there
    before_off, after_off = _mean_after_zero_advantage_steps(3.0, bound_coef=0.0)
    assert after_off == before_off
    # inside the range the loss is 0 and so is its gradient: the mean stays where it is
    before_in, after_in = _mean_after_zero_advantage_steps(0.5)
    assert after_in == before_in


def test_rollouts_keep_the_raw_gaussian_sample_and_its_log_prob_while_the_env_gets_it_clipped():
    agent, env = _agent_with_mean(3.0)
    sent = []
    step = env.step
    env.step = lambda action: (sent.append(action.clone()), step(action))[1]
    obs, _ = env.reset(seed=0)
    _, rollout, _ = agent.collect(env, obs)
    raw = rollout.actions  # [T, B, 1], in [-1, 1] units before clipping
    assert raw.shape == (HPARAMS["rollout_steps"], HPARAMS["num_envs"], 1) and float(raw.max()) > 1.5
    # the env got the clip of the sample, scaled to Pendulum's [-2, 2]
    assert torch.equal(torch.stack(sent), 2.0 * raw.clamp(-1.0, 1.0))
    # the behaviour log-probability is the raw sample's, the one the learner evaluates: ratio 1 on-policy
    log_prob, _ = agent.actor.log_prob_entropy(rollout.obs.flatten(0, 1), raw.flatten(0, 1))
    torch.testing.assert_close(log_prob.reshape(rollout.rewards.shape), rollout.behaviour_log_prob)
    assert agent.learn([rollout])["mean_rho"] == pytest.approx(1.0)


def test_a_negative_bound_coef_is_refused():
    with pytest.raises(ValueError, match="bound_coef must be >= 0"):
        IMPALAConfig(bound_coef=-1.0)
