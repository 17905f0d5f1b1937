"""V-trace (agents/vtrace.py) against the paper's definition written as plain loops, and known answers."""

import math

import pytest
import torch

from dask_podracer.agents.vtrace import discounts_from_dones, vtrace


def reference(behaviour_log_prob, target_log_prob, rewards, discounts, values, bootstrap, rho_bar, c_bar):
    """Espeholt et al. 2018, eq. (1), one sample at a time, as a sum (not the recursion the code uses):
    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t, and
    A_s = rho_s (r_s + gamma_s v_{s+1} - V(x_s)), with V(x_T) = v_T = the bootstrap value."""
    T, B = values.shape
    vs = [[0.0] * B for _ in range(T)]
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        def value(t):
            return float(values[t, b]) if t < T else float(bootstrap[b])

        def ratio(t):
            return math.exp(float(target_log_prob[t, b]) - float(behaviour_log_prob[t, b]))

        for s in range(T):
            total, trace = value(s), 1.0
            for t in range(s, T):
                delta = min(rho_bar, ratio(t)) * (float(rewards[t, b]) + float(discounts[t, b]) * value(t + 1)
                                                  - value(t))
                total += trace * delta
                trace *= float(discounts[t, b]) * min(c_bar, ratio(t))
            vs[s][b] = total
        for s in range(T):
            v_next = vs[s + 1][b] if s + 1 < T else float(bootstrap[b])
            adv[s][b] = min(rho_bar, ratio(s)) * (float(rewards[s, b]) + float(discounts[s, b]) * v_next - value(s))
    return torch.tensor(vs, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64)


def random_batch(T=7, B=5, seed=0, done_rate=0.2, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    behaviour = -torch.rand(T, B, generator=g, dtype=torch.float64) * 2
    target = behaviour + spread * torch.randn(T, B, generator=g, dtype=torch.float64)
    rewards = torch.randn(T, B, generator=g, dtype=torch.float64)
    dones = torch.rand(T, B, generator=g, dtype=torch.float64) < done_rate
    values = torch.randn(T, B, generator=g, dtype=torch.float64)
    bootstrap = torch.randn(B, generator=g, dtype=torch.float64)
    return behaviour, target, rewards, discounts_from_dones(dones, 0.9).to(torch.float64), values, bootstrap


@pytest.mark.parametrize("rho_bar, c_bar", [(1.0, 1.0), (2.0, 0.5), (0.7, 0.7), (math.inf, math.inf)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_papers_definition_on_random_data(seed, rho_bar, c_bar):
    batch = random_batch(seed=seed)
    result = vtrace(*batch, rho_bar=rho_bar, c_bar=c_bar)
    vs, adv = reference(*batch, rho_bar, c_bar)
    torch.testing.assert_close(result.vs, vs)
    torch.testing.assert_close(result.pg_advantages, adv)
    ratio = torch.exp(batch[1] - batch[0])
    torch.testing.assert_close(result.clipped_rhos, ratio.clamp(max=rho_bar))


def n_step_returns(rewards, discounts, bootstrap):
    """G_s = r_s + gamma_s r_{s+1} + ... + (prod gamma) bootstrap, by a plain loop per sample."""
    T, B = rewards.shape
    out = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        for s in range(T):
            total, discount = 0.0, 1.0
            for t in range(s, T):
                total += discount * float(rewards[t, b])
                discount *= float(discounts[t, b])
            out[s, b] = total + discount * float(bootstrap[b])
    return out


@pytest.mark.parametrize("bar", [1.0, 3.0])
def test_on_policy_it_is_the_n_step_return(bar):
    behaviour, _, rewards, discounts, values, bootstrap = random_batch(seed=3)
    result = vtrace(behaviour, behaviour.clone(), rewards, discounts, values, bootstrap, rho_bar=bar, c_bar=bar)
    returns = n_step_returns(rewards, discounts, bootstrap)
    torch.testing.assert_close(result.vs, returns)
    # With rho = 1 the advantage is the one-step-bootstrapped n-step return minus the value.
    next_returns = torch.cat([returns[1:], bootstrap[None]])
    torch.testing.assert_close(result.pg_advantages, rewards + discounts * next_returns - values)


def test_by_hand_two_steps():
    # T = 2, B = 1, gamma = 0.5, V = (1, 2), bootstrap 4, rewards (1, 1).
    # Step 0: ratio 2 (rho_bar 1.5 clips it to 1.5, c_bar 0.5 to 0.5); step 1: ratio 0.5 (no clipping).
    # delta_1 = 0.5 * (1 + 0.5 * 4 - 2) = 0.5; v_1 = 2 + 0.5 = 2.5
    # delta_0 = 1.5 * (1 + 0.5 * 2 - 1) = 1.5; v_0 = 1 + 1.5 + 0.5 * 0.5 * 0.5 = 2.625
    # A_0 = 1.5 * (1 + 0.5 * 2.5 - 1) = 1.875; A_1 = 0.5 * (1 + 0.5 * 4 - 2) = 0.5
    log = torch.log
    behaviour = log(torch.tensor([[0.25], [0.5]]))
    target = log(torch.tensor([[0.5], [0.25]]))
    result = vtrace(behaviour, target, torch.ones(2, 1), torch.full((2, 1), 0.5), torch.tensor([[1.0], [2.0]]),
                    torch.tensor([4.0]), rho_bar=1.5, c_bar=0.5)
    torch.testing.assert_close(result.vs, torch.tensor([[2.625], [2.5]]))
    torch.testing.assert_close(result.pg_advantages, torch.tensor([[1.875], [0.5]]))


def test_clipping_as_the_paper_says():
    behaviour, _, rewards, discounts, values, bootstrap = random_batch(seed=4)
    on_policy = vtrace(behaviour, behaviour, rewards, discounts, values, bootstrap)
    # Ratios far above 1 are truncated to rho_bar = c_bar = 1: the on-policy answer.
    greedy = vtrace(behaviour, behaviour + 5.0, rewards, discounts, values, bootstrap, rho_bar=1.0, c_bar=1.0)
    torch.testing.assert_close(greedy.vs, on_policy.vs)
    torch.testing.assert_close(greedy.pg_advantages, on_policy.pg_advantages)
    # Without truncation the same data gives other targets.
    assert not torch.allclose(vtrace(behaviour, behaviour + 5.0, rewards, discounts, values, bootstrap,
                                     rho_bar=math.inf, c_bar=math.inf).vs, on_policy.vs)
    # Ratios near 0 (actions the target policy never takes): no correction, v_s = V(x_s).
    ignored = vtrace(behaviour, behaviour - 50.0, rewards, discounts, values, bootstrap)
    torch.testing.assert_close(ignored.vs, values)
    torch.testing.assert_close(ignored.pg_advantages, torch.zeros_like(values))
    # c_bar only cuts the traces: with c_bar -> 0, v_s is the one-step target V + rho (r + gamma V' - V).
    one_step = vtrace(behaviour, behaviour, rewards, discounts, values, bootstrap, rho_bar=1.0, c_bar=1e-12)
    next_values = torch.cat([values[1:], bootstrap[None]])
    torch.testing.assert_close(one_step.vs, rewards + discounts * next_values)
    # rho_bar scales the TD errors: on policy with rho_bar = 0.5, v_s - V(x_s) starts at half the one-step error.
    half = vtrace(behaviour, behaviour, rewards, discounts, values, bootstrap, rho_bar=0.5, c_bar=1e-12)
    torch.testing.assert_close(half.vs, values + 0.5 * (rewards + discounts * next_values - values))


def test_an_episode_end_cuts_the_recursion():
    T, B = 6, 3
    g = torch.Generator().manual_seed(5)
    behaviour = -torch.rand(T, B, generator=g, dtype=torch.float64)
    target = behaviour + torch.randn(T, B, generator=g, dtype=torch.float64)
    rewards = torch.randn(T, B, generator=g, dtype=torch.float64)
    values = torch.randn(T, B, generator=g, dtype=torch.float64)
    bootstrap = torch.randn(B, generator=g, dtype=torch.float64)
    dones = torch.zeros(T, B, dtype=torch.bool)
    dones[2] = True  # every episode ends at step 2; steps 3.. are another episode
    discounts = discounts_from_dones(dones, 0.9).to(torch.float64)
    result = vtrace(behaviour, target, rewards, discounts, values, bootstrap)
    # What comes after the end does not reach the steps before it...
    changed = vtrace(behaviour, target, rewards + torch.arange(T)[:, None].ge(3) * 100.0, discounts, values,
                     bootstrap * 7)
    torch.testing.assert_close(changed.vs[:3], result.vs[:3])
    torch.testing.assert_close(changed.pg_advantages[:3], result.pg_advantages[:3])
    assert not torch.allclose(changed.vs[3:], result.vs[3:])
    # ...and the first episode's steps equal V-trace of that episode alone, ending with a bootstrap of 0.
    alone = vtrace(behaviour[:3], target[:3], rewards[:3], discounts[:3], values[:3],
                   torch.zeros(B, dtype=torch.float64))
    torch.testing.assert_close(result.vs[:3], alone.vs)
    torch.testing.assert_close(result.pg_advantages[:3], alone.pg_advantages)


def test_continuous_actions_through_log_probs():
    # A Gaussian policy's log-probs of sampled actions (summed over action dims) work like discrete ones.
    g = torch.Generator().manual_seed(6)
    T, B, A = 5, 4, 2
    actions = torch.randn(T, B, A, generator=g)
    mu = torch.distributions.Normal(torch.zeros(T, B, A), torch.ones(T, B, A))
    pi = torch.distributions.Normal(0.3 * torch.ones(T, B, A), 0.8 * torch.ones(T, B, A))
    behaviour, target = mu.log_prob(actions).sum(-1), pi.log_prob(actions).sum(-1)
    rewards, values = torch.randn(T, B, generator=g), torch.randn(T, B, generator=g)
    discounts, bootstrap = torch.full((T, B), 0.9), torch.randn(B, generator=g)
    result = vtrace(behaviour, target, rewards, discounts, values, bootstrap, rho_bar=1.0, c_bar=1.0)
    vs, adv = reference(behaviour, target, rewards, discounts, values, bootstrap, 1.0, 1.0)
    torch.testing.assert_close(result.vs, vs.float())
    torch.testing.assert_close(result.pg_advantages, adv.float())
    assert not result.vs.requires_grad


def test_refuses_bad_input():
    behaviour, target, rewards, discounts, values, bootstrap = random_batch()
    with pytest.raises(ValueError, match="rho_bar and c_bar must be > 0"):
        vtrace(behaviour, target, rewards, discounts, values, bootstrap, rho_bar=0.0)
    with pytest.raises(ValueError, match="rewards must have the shape of values"):
        vtrace(behaviour, target, rewards[:-1], discounts, values, bootstrap)
    with pytest.raises(ValueError, match="bootstrap_value must have shape"):
        vtrace(behaviour, target, rewards, discounts, values, bootstrap[:-1])
