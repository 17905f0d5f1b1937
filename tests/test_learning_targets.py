"""The exact targets each single-agent algorithm trains on, against plain-loop references, through both kinds of
episode end: a termination (nothing to bootstrap from) and a time-limit truncation (bootstrap from
`info["final_obs"]`, never from the next episode's first observation).

`TimedEnv` below is a real VecEnv (envs/base.py's `TorchVecEnv`) whose episodes end within three steps, some by
termination and some by truncation, with observations that say which episode and step they belong to, so a target
built from the wrong observation differs. `Recorder` keeps what the env really returned; the references are plain
Python loops over those records and the agent's own networks.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor

from dask_podracer.agents import make_agent
from dask_podracer.agents.ensemble import critic_member, redq_heads
from dask_podracer.agents.loop import sample_batch
from dask_podracer.envs import make_vec_env
from dask_podracer.envs.base import ResetRows, TorchVecEnv
from dask_podracer.envs.wrappers import VecEnvWrapper

TIME_LIMIT = 3
NUM_ENVS = 3


class TimedEnv(TorchVecEnv):
    """`num_envs` envs whose episodes last 2 steps and terminate, or 3 steps and are truncated, in turn.

    Env i's episode k terminates at its second step when (k + i) is even, else runs into the time limit of 3
    steps. Observation: [step in the episode, 10 * episode + env, 1 / (1 + step)]; reward 1 + step reached; the
    action is ignored. A final observation (step 2 or 3) never equals a first one (step 0).
    """

    max_episode_steps = TIME_LIMIT

    def __init__(self, num_envs: int, discrete: bool, seed: int = 0) -> None:
        super().__init__(num_envs, "cpu", seed)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.single_action_space = (gym.spaces.Discrete(2) if discrete
                                    else gym.spaces.Box(-2.0, 2.0, (1,), np.float32))
        self.step_in_episode = torch.zeros(num_envs)
        self.episode = torch.full((num_envs,), -1.0)
        self.env_index = torch.arange(num_envs, dtype=torch.float32)

    def _reset_where(self, rows: ResetRows) -> None:
        self.step_in_episode = rows.fill(self.step_in_episode, 0.0)
        self.episode = rows.put(self.episode, (self.episode + 1)[rows.ids] if rows.ids is not None
                                else self.episode + 1)

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        self.step_in_episode = self.step_in_episode + 1
        terminates = ((self.episode + self.env_index) % 2 == 0) & (self.step_in_episode == 2)
        return 1.0 + self.step_in_episode, terminates

    def _observe(self) -> Tensor:
        return torch.stack([self.step_in_episode, 10 * self.episode + self.env_index,
                            1 / (1 + self.step_in_episode)], dim=-1)


class Recorder(VecEnvWrapper):
    """Keeps every step's raw (obs acted on, reward, terminated, truncated, final_obs) as the env returned them."""

    def __init__(self, env: TimedEnv) -> None:
        super().__init__(env)
        self.steps: list[dict[str, Tensor]] = []
        self.obs: Tensor | None = None
        self.watch = None  # a callable whose dict of tensors is recorded with each step (an agent's statistics)

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        self.obs, info = self.env.reset(seed=seed)
        return self.obs.clone(), info

    def step(self, actions: Tensor):
        next_obs, reward, terminated, truncated, info = self.env.step(actions)
        self.steps.append({"obs": self.obs.clone(), "reward": reward.clone(), "terminated": terminated.clone(),
                           "truncated": truncated.clone(), "final_obs": info["final_obs"].clone(),
                           **(self.watch() if self.watch is not None else {})})
        self.obs = next_obs
        return next_obs.clone(), reward, terminated, truncated, info


def timed_env(discrete: bool) -> tuple[Recorder, Tensor]:
    env = Recorder(TimedEnv(NUM_ENVS, discrete))
    obs, _ = env.reset(seed=0)
    return env, obs


def both_endings(steps: list[dict[str, Tensor]]) -> None:
    """The records hold terminations, truncations and steps that ended nothing: the test means something."""
    terminated = sum(int(s["terminated"].sum()) for s in steps)
    truncated = sum(int(s["truncated"].sum()) for s in steps)
    assert terminated > 0 and truncated > 0


def truncations_lead_elsewhere(steps: list[dict[str, Tensor]]) -> None:
    """At some truncation the final obs differs from the obs the env returned (the next episode's first): a target
    built from the wrong one would differ."""
    differ = sum(int((s["truncated"] & (s["final_obs"] != after["obs"]).any(-1)).sum())
                 for s, after in zip(steps, steps[1:]))
    assert differ > 0


def test_the_env_ends_episodes_both_ways_and_its_final_obs_are_not_first_ones():
    env, obs = timed_env(discrete=True)
    for _ in range(6):
        env.step(torch.zeros(NUM_ENVS, dtype=torch.int64))
    both_endings(env.steps)
    truncations_lead_elsewhere(env.steps)
    for s in env.steps:
        done = s["terminated"] | s["truncated"]
        assert torch.all(s["final_obs"][done, 0] >= 2)  # the step the episode ended on, not a fresh 0
        assert torch.all(s["truncated"] <= (s["final_obs"][:, 0] == TIME_LIMIT))


# -- PPO and A2C: GAE over rollouts that span auto-resets ------------------------------------------------------

def reference_gae(steps: list[dict[str, Tensor]], value, gamma: float, lam: float, scale: float
                  ) -> tuple[list[list[float]], list[list[float]]]:
    """Advantages and returns `[T][B]`, env by env and step by step, from the raw records: delta_t = r_t +
    gamma * V(s'_t) - V(s_t), V(s'_t) = 0 at a termination and V(final_obs_t) otherwise; the sum stops at any end."""
    T, B = len(steps), steps[0]["reward"].shape[0]
    adv = [[0.0] * B for _ in range(T)]
    ret = [[0.0] * B for _ in range(T)]
    for b in range(B):
        following = 0.0
        for t in reversed(range(T)):
            s = steps[t]
            ended = bool(s["terminated"][b] or s["truncated"][b])
            bootstrap = 0.0 if bool(s["terminated"][b]) else value(s["final_obs"][b])
            v = value(s["obs"][b])
            delta = float(s["reward"][b]) * scale + gamma * bootstrap - v
            following = delta + gamma * lam * (0.0 if ended else following)
            adv[t][b] = following
            ret[t][b] = following + v
    return adv, ret


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_gae_bootstraps_from_the_final_obs_at_a_truncation_and_not_at_a_termination(algorithm):
    torch.manual_seed(0)
    env, obs = timed_env(discrete=True)
    hparams = {"num_envs": NUM_ENVS, "rollout_steps": 8, "gamma": 0.9, "gae_lambda": 0.8, "reward_scale": 0.5}
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    agent.collect(env, obs)
    advantages, returns = agent.rollout_targets()
    both_endings(env.steps)

    def value(raw_obs: Tensor) -> float:
        return float(agent.value(raw_obs.unsqueeze(0)).detach())

    want_adv, want_ret = reference_gae(env.steps, value, 0.9, 0.8, 0.5)
    torch.testing.assert_close(advantages, torch.tensor(want_adv), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(returns, torch.tensor(want_ret), atol=1e-5, rtol=1e-5)


def plain_normalised(x: Tensor, mean: Tensor, var: Tensor) -> list[float]:
    """clip((x - mean) / sqrt(var + 1e-8), +-10), element by element."""
    return [max(-10.0, min(10.0, (float(x[i]) - float(mean[i])) / math.sqrt(float(var[i]) + 1e-8)))
            for i in range(x.shape[0])]


def plain_return_variances(steps: list[dict[str, Tensor]], gamma: float) -> list[float]:
    """After each step, the variance of every discounted return G (G <- gamma G + r, restarted after an end)
    seen so far, merged batch by batch into a prior of count 1e-4, mean 0, variance 1 (RunningMeanStd's)."""
    B = steps[0]["reward"].shape[0]
    g = [0.0] * B
    count, mean, var = 1e-4, 0.0, 1.0
    out = []
    for s in steps:
        g = [gamma * g[b] + float(s["reward"][b]) for b in range(B)]
        b_mean = sum(g) / B
        b_var = sum((x - b_mean) ** 2 for x in g) / B
        total = count + B
        delta = b_mean - mean
        m2 = var * count + b_var * B + delta ** 2 * count * B / total
        mean, var, count = mean + delta * B / total, m2 / total, total
        out.append(var)
        g = [0.0 if bool(s["terminated"][b] or s["truncated"][b]) else g[b] for b in range(B)]
    return out


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_ppo_normalises_final_obs_with_the_statistics_of_the_obs_and_scales_rewards_by_the_return_std(algorithm):
    torch.manual_seed(0)
    env, obs = timed_env(discrete=True)
    hparams = {"num_envs": NUM_ENVS, "rollout_steps": 8, "gamma": 0.9, "reward_scale": 0.5,
               "normalize_observations": True, "normalize_rewards": True}
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    env.watch = lambda: {"mean": agent.obs_norm.rms.mean.clone(), "var": agent.obs_norm.rms.var.clone()}
    agent.collect(env, obs)
    buf = agent.buffer
    variances = plain_return_variances(env.steps, 0.9)
    for t, s in enumerate(env.steps):
        for b in range(NUM_ENVS):
            assert buf.obs[t, b].tolist() == pytest.approx(plain_normalised(s["obs"][b], s["mean"], s["var"]),
                                                           abs=1e-5)
            assert buf.final_obs[t, b].tolist() == pytest.approx(
                plain_normalised(s["final_obs"][b], s["mean"], s["var"]), abs=1e-5)
            scaled = max(-10.0, min(10.0, float(s["reward"][b]) / math.sqrt(variances[t] + 1e-8))) * 0.5
            assert float(buf.rewards[t, b]) == pytest.approx(scaled, rel=1e-5)


# -- IMPALA: V-trace through both kinds of end -------------------------------------------------------------------

def reference_vtrace(rewards: list[list[float]], terminated: list[list[bool]], truncated: list[list[bool]],
                     v: list[list[float]], v_final: list[list[float]], rhos: list[list[float]], gamma: float,
                     rho_bar: float, c_bar: float) -> tuple[list[list[float]], list[list[float]]]:
    """v_s and A_s `[T][B]` from the paper's sum, episode by episode: v_s = V(x_s) + sum_{t>=s} (prod_{s<=i<t}
    gamma c_i) delta_t over the steps of s's episode in the rollout, delta_t = rho_t (r_t + gamma V(x'_t) -
    V(x_t)), where V(x'_t) is 0 at a termination, V(final_obs) at a truncation or at the rollout's last step, and
    V(x_{t+1}) otherwise; A_s = rho_s (r_s + gamma v'_s - V(x_s)), v'_s the same choice with v_{s+1}."""
    T, B = len(rewards), len(rewards[0])
    vs = [[0.0] * B for _ in range(T)]
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        def next_value(t: int, of_next: list[list[float]]) -> float:
            if terminated[t][b]:
                return 0.0
            if truncated[t][b] or t == T - 1:
                return v_final[t][b]
            return of_next[t + 1][b]

        delta = [min(rho_bar, rhos[t][b]) * (rewards[t][b] + gamma * next_value(t, v) - v[t][b]) for t in range(T)]
        for s in range(T):
            total, weight = 0.0, 1.0
            for t in range(s, T):
                total += weight * delta[t]
                if terminated[t][b] or truncated[t][b]:
                    break
                weight *= gamma * min(c_bar, rhos[t][b])
            vs[s][b] = v[s][b] + total
        for s in range(T):
            adv[s][b] = min(rho_bar, rhos[s][b]) * (rewards[s][b] + gamma * next_value(s, vs) - v[s][b])
    return vs, adv


@pytest.mark.parametrize("discrete", [True, False])
def test_vtrace_targets_bootstrap_from_the_final_obs_at_a_truncation_and_not_at_a_termination(discrete):
    torch.manual_seed(0)
    env, obs = timed_env(discrete)
    hparams = {"num_envs": NUM_ENVS, "rollout_steps": 8, "gamma": 0.9, "rho_bar": 1.5, "c_bar": 0.9,
               "reward_scale": 0.5}
    agent = make_agent("impala", env.single_observation_space, env.single_action_space, hparams)
    _, rollout, _ = agent.collect(env, obs)
    both_endings(env.steps)
    with torch.no_grad():  # another learner policy than the behaviour one: importance weights off 1
        for p in agent.actor.parameters():
            p.add_(0.3 * torch.randn_like(p))
    targets = agent.vtrace_targets(rollout)

    def value(x: Tensor) -> float:
        return float(agent.critic(x.unsqueeze(0)).squeeze().detach())

    with torch.no_grad():
        log_pi, _ = agent.actor.log_prob_entropy(rollout.obs.flatten(0, 1), rollout.actions.flatten(0, 1))
    rhos = (log_pi.reshape(8, NUM_ENVS) - rollout.behaviour_log_prob).exp().tolist()
    steps = env.steps
    want_vs, want_adv = reference_vtrace(
        [[float(s["reward"][b]) * 0.5 for b in range(NUM_ENVS)] for s in steps],
        [[bool(s["terminated"][b]) for b in range(NUM_ENVS)] for s in steps],
        [[bool(s["truncated"][b]) for b in range(NUM_ENVS)] for s in steps],
        [[value(s["obs"][b]) for b in range(NUM_ENVS)] for s in steps],
        [[value(s["final_obs"][b]) for b in range(NUM_ENVS)] for s in steps],
        rhos, 0.9, 1.5, 0.9)
    assert max(max(r) for r in rhos) > 1.5 > 0.9 > min(min(r) for r in rhos)  # both clips at work
    torch.testing.assert_close(targets.vs, torch.tensor(want_vs), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(targets.pg_advantages, torch.tensor(want_adv), atol=1e-5, rtol=1e-5)


# -- the off-policy family: what the replay keeps, and the 1-step targets ----------------------------------------

OFF_POLICY = {"sac": False, "ddpg": False, "td3": False, "dqn": True, "double_dqn": True, "d3qn": True}


def off_policy_agent(algorithm: str, **hparams: Any):
    """An agent of `algorithm` that has collected 5 steps of the timed env into its replay (no update yet)."""
    torch.manual_seed(0)
    env, obs = timed_env(OFF_POLICY[algorithm])
    hparams = {"num_envs": NUM_ENVS, "batch_size": 8, "buffer_size": 64, "learning_starts": 10_000, "gamma": 0.9,
               "hidden": [16, 16], "compile": "off", **hparams}
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    for _ in range(5):
        obs, _, _ = agent.train_iteration(env, obs)
    both_endings(env.steps)
    return agent, env


@pytest.mark.parametrize("algorithm,pipeline", [*((a, False) for a in OFF_POLICY), ("sac", True), ("dqn", True)])
def test_the_replay_keeps_the_final_obs_as_next_obs_and_only_terminations_as_terminal(algorithm, pipeline):
    agent, env = off_policy_agent(algorithm, pipeline=pipeline)
    agent.finish()  # pipeline mode: the learner thread ends (it had nothing to do: learning has not started)
    data = agent.replay.data
    rows = 0
    for s in env.steps:
        for b in range(NUM_ENVS):
            assert data["obs"][rows].tolist() == s["obs"][b].tolist()
            assert data["next_obs"][rows].tolist() == s["final_obs"][b].tolist()
            assert float(data["reward"][rows]) == float(s["reward"][b])
            assert float(data["terminated"][rows]) == float(s["terminated"][b])
            rows += 1
    assert agent.replay.size == rows


def test_a_sampled_batch_normalises_next_obs_with_the_statistics_of_obs_and_scales_rewards():
    agent, env = off_policy_agent("sac", normalize_observations=True, normalize_rewards=True)
    torch.manual_seed(1)
    normalised = sample_batch(agent)
    torch.manual_seed(1)
    batch = agent.replay.sample(8)  # the same draw, raw
    mean, var = agent.obs_norm.rms.mean, agent.obs_norm.rms.var
    variance = plain_return_variances(env.steps, 0.9)[-1]
    for i in range(8):
        assert normalised["obs"][i].tolist() == pytest.approx(plain_normalised(batch["obs"][i], mean, var), abs=1e-5)
        assert normalised["next_obs"][i].tolist() == pytest.approx(
            plain_normalised(batch["next_obs"][i], mean, var), abs=1e-5)
        assert float(normalised["reward"][i]) == pytest.approx(float(batch["reward"][i]) / math.sqrt(variance + 1e-8),
                                                               rel=1e-5)


def plain_combine(values: list[float], how: str, heads: list[int], weight: float) -> float:
    """One sample's heads combined: the mean, the min, the min over `heads` (redq) or weight * min + (1 - weight)
    * mean."""
    if how == "mean":
        return sum(values) / len(values)
    if how == "min":
        return min(values)
    if how == "redq":
        return min(values[i] for i in heads)
    return weight * min(values) + (1 - weight) * sum(values) / len(values)


def batch_of(agent, seed: int = 1) -> dict[str, Tensor]:
    torch.manual_seed(seed)
    return sample_batch(agent)


@pytest.mark.parametrize("combine", ["min", "mean", "redq", "weighted"])
def test_sac_target_is_r_plus_gamma_times_the_combined_soft_value_of_the_final_obs(combine):
    agent, _ = off_policy_agent("sac", num_critics=4, target_combine=combine, redq_subset=2, combine_weight=0.3,
                                init_alpha=0.7)
    batch = batch_of(agent)
    assert float(batch["terminated"].sum()) > 0
    torch.manual_seed(2)
    target = agent.target(batch)
    torch.manual_seed(2)
    with torch.no_grad():
        next_action, next_log_prob = agent.actor(batch["next_obs"])
        heads = redq_heads(4, 2).tolist() if combine == "redq" else []
        for i in range(8):
            q = [float(critic_member(agent.critic_target, e, batch["next_obs"][i:i + 1], next_action[i:i + 1]))
                 for e in range(4)]
            soft = plain_combine(q, combine, heads, 0.3) - 0.7 * float(next_log_prob[i])
            want = float(batch["reward"][i]) + 0.9 * (1 - float(batch["terminated"][i])) * soft
            assert float(target[i]) == pytest.approx(want, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("algorithm,combine", [("ddpg", "min"), ("td3", "min"), ("td3", "mean"), ("td3", "redq"),
                                               ("td3", "weighted")])
def test_ddpg_and_td3_targets_smooth_clip_and_combine_the_target_critics_at_the_final_obs(algorithm, combine):
    smooth = algorithm == "td3"
    agent, _ = off_policy_agent(algorithm, num_critics=3, target_combine=combine, redq_subset=2,
                                combine_weight=0.3, target_noise_clip=0.3, **({"target_noise": 0.5} if smooth else {}))
    batch = batch_of(agent)
    torch.manual_seed(2)
    target = agent.target(batch)
    torch.manual_seed(2)
    with torch.no_grad():
        mu = agent.actor_target(batch["next_obs"])
        noise = torch.randn(mu.shape) if smooth else torch.zeros(mu.shape)
        heads = redq_heads(3, 2).tolist() if combine == "redq" else []
        assert not smooth or float(noise.abs().max()) * 0.5 > 0.3  # the clip at work
        for i in range(8):
            # half-range units: the Box is [-2, 2], so a unit of noise is 2 in the action
            a = float(mu[i, 0]) + 2 * max(-0.3, min(0.3, 0.5 * float(noise[i, 0])))
            a = max(-2.0, min(2.0, a))
            action = torch.tensor([[a]])
            q = [float(critic_member(agent.critic_target, e, batch["next_obs"][i:i + 1], action)) for e in range(3)]
            want = float(batch["reward"][i]) + 0.9 * (1 - float(batch["terminated"][i])) * plain_combine(
                q, combine, heads, 0.3)
            assert float(target[i]) == pytest.approx(want, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("algorithm", ["dqn", "double_dqn", "d3qn"])
def test_dqn_targets_pick_and_value_the_next_action_as_each_variant_says(algorithm):
    agent, _ = off_policy_agent(algorithm)
    net = agent.q_net
    last = net.advantage if net.dueling else net.body[-1]
    with torch.no_grad():  # the online network prefers what the target one ranks last: Double DQN's choice shows
        last.weight.neg_()
        last.bias.neg_()
    batch = batch_of(agent)
    target = agent.target(batch)
    double = algorithm != "dqn"
    with torch.no_grad():
        q_target = agent.q_target(batch["next_obs"]).tolist()
        q_online = agent.q_net(batch["next_obs"]).tolist()
    picked_apart = 0
    for i in range(8):
        chooser = q_online[i] if double else q_target[i]
        best = max(range(2), key=lambda a: chooser[a])
        picked_apart += best != max(range(2), key=lambda a: q_target[i][a])
        want = float(batch["reward"][i]) + 0.9 * (1 - float(batch["terminated"][i])) * q_target[i][best]
        assert float(target[i]) == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert not double or picked_apart > 0  # some rows where the two networks pick apart: the test tells them apart


def test_d3qn_aggregates_value_and_advantages_with_the_mean_advantage_subtracted():
    agent, _ = off_policy_agent("d3qn")
    obs = torch.randn(5, 3)
    with torch.no_grad():
        q = agent.q_net(obs).tolist()
        hidden = agent.q_net.body(obs)
        value = agent.q_net.value(hidden).squeeze(-1).tolist()
        advantage = agent.q_net.advantage(hidden).tolist()
    for i in range(5):
        mean = sum(advantage[i]) / len(advantage[i])
        assert q[i] == pytest.approx([value[i] + a - mean for a in advantage[i]], abs=1e-6)


# -- the same through real envs: ours with a shortened time limit, and gymnasium's ----------------------------------

def real_env(name: str, time_limit: int, num_envs: int = 8) -> tuple[Recorder, Tensor]:
    """`name` from make_vec_env with episodes cut at `time_limit` steps: ours by their `max_episode_steps` (read
    at each step), gymnasium's by its TimeLimit."""
    if name.startswith("gym:"):
        env = make_vec_env(name, num_envs, seed=0, max_episode_steps=time_limit)
    else:
        env = make_vec_env(name, num_envs, seed=0)
        env.max_episode_steps = time_limit
    recorder = Recorder(env)
    obs, _ = recorder.reset(seed=0)
    return recorder, obs


@pytest.mark.parametrize("name", ["CartPole-v1", "gym:CartPole-v1"])
def test_ppo_gae_on_cartpole_cut_by_a_time_limit(name):
    torch.manual_seed(0)
    env, obs = real_env(name, time_limit=12)
    hparams = {"num_envs": 8, "rollout_steps": 30, "gamma": 0.9, "gae_lambda": 0.8, "reward_scale": 0.5}
    agent = make_agent("ppo", env.single_observation_space, env.single_action_space, hparams)
    agent.collect(env, obs)
    both_endings(env.steps)
    truncations_lead_elsewhere(env.steps)
    advantages, returns = agent.rollout_targets()

    def value(raw_obs: Tensor) -> float:
        return float(agent.value(raw_obs.unsqueeze(0)).detach())

    want_adv, want_ret = reference_gae(env.steps, value, 0.9, 0.8, 0.5)
    torch.testing.assert_close(advantages, torch.tensor(want_adv), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(returns, torch.tensor(want_ret), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("algorithm,name", [("sac", "Pendulum-v1"), ("td3", "gym:Pendulum-v1"),
                                            ("dqn", "CartPole-v1"), ("double_dqn", "gym:CartPole-v1")])
def test_the_replay_of_a_real_env_keeps_the_final_obs_at_a_time_limit(algorithm, name):
    torch.manual_seed(0)
    env, obs = real_env(name, time_limit=4 if "Pendulum" in name else 12, num_envs=4)
    hparams = {"num_envs": 4, "batch_size": 8, "buffer_size": 256, "learning_starts": 10_000, "hidden": [16]}
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    for _ in range(40):
        obs, _, _ = agent.train_iteration(env, obs)
    truncations_lead_elsewhere(env.steps)
    data = agent.replay.data
    rows = 0
    for s in env.steps:
        for b in range(4):
            assert data["next_obs"][rows].tolist() == s["final_obs"][b].tolist()
            assert float(data["terminated"][rows]) == float(s["terminated"][b])
            rows += 1


# -- Ape-X: an actor's chunk and its initial priorities; prioritised replay's priorities after an update --------------

@pytest.mark.parametrize("algorithm", ["dqn", "d3qn", "td3"])
def test_an_apex_chunk_keeps_the_final_obs_and_its_priorities_are_the_updates_td_errors(algorithm):
    torch.manual_seed(0)
    env, obs = timed_env(OFF_POLICY[algorithm])
    hparams = {"num_envs": NUM_ENVS, "apex_send_steps": 5, "prioritized": True, "gamma": 0.9, "hidden": [16],
               "normalize_observations": True, "compile": "off"}
    if algorithm == "td3":
        hparams["target_noise"] = 0.0  # the same target twice: no fresh smoothing noise
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    agent.start_acting(0, 2)
    agent.obs_norm.update(torch.randn(16, 3) * 5 + 2)  # statistics away from (0, 1): normalising shows
    _, chunk, _ = agent.collect(env, obs)
    both_endings(env.steps)
    for t, s in enumerate(env.steps):
        rows = slice(t * NUM_ENVS, (t + 1) * NUM_ENVS)
        assert chunk["next_obs"][rows].tolist() == s["final_obs"].tolist()
        assert chunk["terminated"][rows].tolist() == s["terminated"].tolist()
    mean, var = agent.obs_norm.rms.mean, agent.obs_norm.rms.var
    batch = {"obs": torch.tensor([plain_normalised(x, mean, var) for x in chunk["obs"]]),
             "next_obs": torch.tensor([plain_normalised(x, mean, var) for x in chunk["next_obs"]]),
             "action": chunk["actions"], "reward": chunk["rewards"], "terminated": chunk["terminated"].float()}
    target = agent.target(batch)
    with torch.no_grad():
        if algorithm == "td3":
            q = agent.critic(batch["obs"], batch["action"])  # [E, N]: the mean over heads of |Q_i - y|
            want = [sum(abs(float(q[e, i]) - float(target[i])) for e in range(q.shape[0])) / q.shape[0]
                    for i in range(q.shape[1])]
        else:
            q = agent.q_net(batch["obs"])
            want = [abs(float(q[i, int(batch["action"][i])]) - float(target[i])) for i in range(q.shape[0])]
    assert chunk["priorities"].tolist() == pytest.approx(want, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("algorithm", ["dqn", "sac"])
def test_prioritised_replay_sets_a_drawn_rows_priority_to_its_absolute_td_error(algorithm):
    agent, _ = off_policy_agent(algorithm, prioritized=True, priority_epsilon=1e-3)
    batch = batch_of(agent)
    torch.manual_seed(3)
    target = agent.target(batch)
    with torch.no_grad():
        if algorithm == "sac":
            q = agent.critic(batch["obs"], batch["action"])
            want = (q - target).abs().mean(0)
        else:
            want = (agent.q_net(batch["obs"]).gather(-1, batch["action"].long()).squeeze(-1) - target).abs()
    torch.manual_seed(3)
    losses = agent.update(batch)
    agent.replay.update_priorities(batch["index"], losses.pop("td_error"))
    last = {int(row): i for i, row in enumerate(batch["index"])}  # a row drawn twice keeps its last
    for row, i in last.items():
        assert float(agent.replay.priority[row]) == pytest.approx(float(want[i]) + 1e-3, rel=1e-4)
