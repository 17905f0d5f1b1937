"""Per-agent dones (`info["agent_done"]`): an agent that leaves its episode early while its team plays on.

No VMAS scenario reports one (VMAS's `done()` is one flag per env), so `LeavingTeam` below is a small torch env
that does: it passes the multi-agent checker; the masked GAE of IPPO/MAPPO is checked against a plain loop; and
for IPPO, MAPPO and MADDPG the rewards an env hands to agents after they left change nothing in an update, while
the same rewards without `agent_done` do (so the masks are what keeps them out).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.agents.base import make_agent
from dask_podracer.agents.mappo import agent_ends, agent_gae, alive_mask
from dask_podracer.envs.multi_agent import check_multi_agent_env


class LeavingTeam:
    """`n_agents` points on a line, each rewarded -|position| while in its episode; agent i leaves after a
    number of steps drawn per episode in [1, max_episode_steps] (`info["agent_done"]`), gets
    `reward_after_done` from then on, and the episode terminates when all have left (else it is truncated)."""

    def __init__(self, num_envs: int, n_agents: int = 2, max_episode_steps: int = 6, reward_after_done: float = 0.0,
                 report_agent_done: bool = True) -> None:
        self.num_envs, self.n_agents, self.max_episode_steps = num_envs, n_agents, max_episode_steps
        self.device = torch.device("cpu")
        self.reward_after_done, self.report_agent_done = reward_after_done, report_agent_done
        self.agent_observation_spaces = tuple(gym.spaces.Box(-np.inf, np.inf, (2,)) for _ in range(n_agents))
        self.agent_action_spaces = tuple(gym.spaces.Box(-1.0, 1.0, (1,)) for _ in range(n_agents))
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (n_agents, 2))
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (n_agents, 1))
        self.generator = torch.Generator().manual_seed(0)

    def _new_episodes(self, which: torch.Tensor) -> None:
        k = int(which.sum())
        self.pos[which] = torch.rand(k, self.n_agents, generator=self.generator) * 2 - 1
        self.leave_at[which] = torch.randint(1, self.max_episode_steps + 1, (k, self.n_agents), generator=self.generator)
        self.elapsed[which] = 0
        self.returns[which] = 0.0

    def _obs(self) -> torch.Tensor:
        clock = (self.elapsed.float() / self.max_episode_steps).unsqueeze(-1).expand(-1, self.n_agents)
        return torch.stack([self.pos, clock], dim=-1)

    def reset(self, *, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        if seed is not None:
            self.generator.manual_seed(seed)
        b, n = self.num_envs, self.n_agents
        self.pos, self.returns = torch.zeros(b, n), torch.zeros(b, n)
        self.leave_at, self.elapsed = torch.zeros(b, n, dtype=torch.int64), torch.zeros(b, dtype=torch.int64)
        self._new_episodes(torch.ones(b, dtype=torch.bool))
        return self._obs(), {}

    def step(self, actions: torch.Tensor):
        was_in = self.elapsed.unsqueeze(-1) < self.leave_at
        self.pos = self.pos + 0.2 * actions[..., 0].clamp(-1, 1) * was_in
        self.elapsed += 1
        reward = torch.where(was_in, -self.pos.abs(), torch.full_like(self.pos, self.reward_after_done))
        self.returns += reward
        agent_done = self.elapsed.unsqueeze(-1) >= self.leave_at
        terminated = agent_done.all(-1)
        truncated = (self.elapsed >= self.max_episode_steps) & ~terminated
        final_obs = self._obs()
        info = {"final_obs": final_obs, "episode_return": self.returns.mean(1), "agent_episode_return": self.returns.clone(),
                "episode_length": self.elapsed.clone()}
        if self.report_agent_done:
            info["agent_done"] = agent_done
        done = terminated | truncated
        self._new_episodes(done)
        return self._obs(), reward, terminated, truncated, info

    def close(self) -> None:
        """Nothing to release."""


def test_an_env_with_per_agent_dones_passes_the_checker():
    env = LeavingTeam(4)
    report = check_multi_agent_env(env, seed=3)
    assert report.terminations + report.truncations >= 4
    _, _, _, _, info = env.step(torch.zeros(4, 2, 1))
    assert info["agent_done"].shape == (4, 2) and info["agent_done"].dtype == torch.bool


def plain_masked_gae(rewards, values, next_values, terminated, truncated, agent_done, gamma, lam):
    """Per env and agent, one number at a time: which steps the agent was in, and its GAE cut where it left."""
    t_len, b, n = values.shape
    alive = torch.zeros(t_len, b, n, dtype=torch.bool)
    advantages = torch.zeros(t_len, b, n, dtype=values.dtype)
    for e in range(b):
        for i in range(n):
            inside = True
            for t in range(t_len):
                alive[t, e, i] = inside
                inside = bool(terminated[t, e] or truncated[t, e]) or not bool(agent_done[t, e, i])
            running = 0.0
            for t in reversed(range(t_len)):
                leaves = bool(agent_done[t, e, i]) or bool(terminated[t, e])  # nothing to bootstrap from
                ends = leaves or bool(truncated[t, e])
                bootstrap = 0.0 if leaves else gamma * next_values[t, e, i]
                delta = rewards[t, e, i] + bootstrap - values[t, e, i]
                running = delta + (0.0 if ends else gamma * lam * running)
                advantages[t, e, i] = running
    return advantages, alive


def test_masked_gae_matches_a_plain_loop():
    t, b, n, gamma, lam = 12, 5, 3, 0.9, 0.8
    g = torch.Generator().manual_seed(4)
    rewards, values, next_values = (torch.randn(t, b, n, generator=g, dtype=torch.float64) for _ in range(3))
    terminated = torch.rand(t, b, generator=g) < 0.1
    truncated = (torch.rand(t, b, generator=g) < 0.1) & ~terminated
    agent_done = torch.rand(t, b, n, generator=g) < 0.2
    for step in range(1, t):  # an agent stays out until its team's episode ends
        agent_done[step] |= agent_done[step - 1] & ~(terminated[step - 1] | truncated[step - 1]).unsqueeze(-1)
    flags = [agent_ends(terminated[s], truncated[s], agent_done[s], n) for s in range(t)]
    agent_term = torch.stack([f[0] for f in flags])
    agent_trunc = torch.stack([f[1] for f in flags])
    advantages, returns = agent_gae(rewards, values, next_values, agent_term, agent_term | agent_trunc, gamma, lam)
    alive, after = alive_mask(agent_done, terminated | truncated, torch.ones(b, n, dtype=torch.bool))
    expected, expected_alive = plain_masked_gae(rewards, values, next_values, terminated, truncated, agent_done,
                                                gamma, lam)
    assert torch.equal(alive, expected_alive) and 0 < int((~alive).sum()) < alive.numel()
    torch.testing.assert_close(advantages[alive], expected[alive])
    torch.testing.assert_close(returns[alive], (expected + values)[alive])
    assert torch.equal(after, ~agent_done[-1] | (terminated[-1] | truncated[-1]).unsqueeze(-1))
    term, trunc = agent_ends(terminated[0], truncated[0], None, n)  # no agent_done: the team's flags, per agent
    assert term.shape == (b, n) and torch.equal(term[:, 1], terminated[0]) and torch.equal(trunc[:, 2], truncated[0])


HPARAMS = {
    "mappo": {"num_envs": 4, "rollout_steps": 12, "epochs": 2, "num_minibatches": 2, "hidden": (8,)},
    "ippo": {"num_envs": 4, "rollout_steps": 12, "epochs": 2, "num_minibatches": 2, "hidden": (8,)},
    "maddpg": {"num_envs": 4, "steps_per_iteration": 6, "learning_starts": 8, "batch_size": 16, "buffer_size": 64,
               "utd_ratio": 0.5, "hidden": (8,)},
}


def _parameters_after_training(algorithm: str, **env_kwargs) -> torch.Tensor:
    env = LeavingTeam(4, **env_kwargs)
    torch.manual_seed(0)
    team = make_agent(algorithm, env.single_observation_space, env.single_action_space, HPARAMS[algorithm])
    obs, _ = env.reset(seed=1)
    for _ in range(2):
        obs, _, metrics = team.train_iteration(env, obs)
        assert all(np.isfinite(v) for v in metrics.values())
    return torch.cat([p.detach().flatten() for p in team.actor.parameters()] +
                     [p.detach().flatten() for p in team.critic.parameters()])


@pytest.mark.parametrize("algorithm", ["ippo", "mappo", "maddpg"])
def test_rewards_after_an_agent_left_do_not_reach_the_update(algorithm):
    clean = _parameters_after_training(algorithm)
    noisy = _parameters_after_training(algorithm, reward_after_done=5.0)
    assert torch.equal(clean, noisy)  # masked out: the same update to the bit
    # the control changes the reward alone: without agent_done the rewards after leaving do reach the update
    unmasked_clean = _parameters_after_training(algorithm, report_agent_done=False)
    unmasked_noisy = _parameters_after_training(algorithm, reward_after_done=5.0, report_agent_done=False)
    assert not torch.allclose(unmasked_clean, unmasked_noisy)


def test_a_maddpg_replay_saved_before_per_agent_dones_still_loads():
    from dask_podracer.agents.maddpg import TeamReplay

    old = {"obs": torch.randn(5, 6), "action": torch.randn(5, 4), "reward": torch.randn(5, 2),
           "next_obs": torch.randn(5, 6), "terminated": torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0])}  # the team's flag
    replay = TeamReplay(8, 2, 3, 2, torch.device("cpu"))
    replay.load_state_dict(old)
    state = replay.state_dict()
    assert replay.size == 5 and torch.equal(state["alive"], torch.ones(5, 2))
    assert torch.equal(state["terminated"], old["terminated"].unsqueeze(-1).expand(5, 2))
    assert torch.equal(state["reward"], old["reward"])
