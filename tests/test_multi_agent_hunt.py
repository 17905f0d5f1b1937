"""Multi-agent training end to end: what a team's rollout and replay make of the envs' episode ends.

Real envs (MPE2 through the PettingZoo adapter, and a two-agent PettingZoo parallel env of the test's own in
which one agent leaves early) and real agents (agents/mappo.py, agents/maddpg.py).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mpe2")

from dask_podracer.agents.maddpg import MADDPGAgent, MADDPGConfig  # noqa: E402
from dask_podracer.agents.mappo import MAPPOAgent, MAPPOConfig, agent_ends  # noqa: E402
from dask_podracer.envs.multi_agent.pettingzoo_adapter import ParallelVecEnv, mpe2_factory  # noqa: E402

CPU = torch.device("cpu")


def mpe2_spread(num_envs: int = 2, max_episode_steps: int = 3) -> ParallelVecEnv:
    env = mpe2_factory("simple_spread_v3")(num_envs=num_envs, seed=0, max_episode_steps=max_episode_steps)
    env.reset(seed=0)
    return env


def test_mpe2_time_limit_is_a_truncation_for_every_agent():
    # PettingZoo drops every agent at max_cycles: marked agent_done there, agent_ends turned the team's
    # truncation into each agent's termination, and no MPE2 episode was ever bootstrapped
    env = mpe2_spread()
    actions = torch.full((env.num_envs, env.n_agents, 5), 0.5)
    for _ in range(env.max_episode_steps):
        _, _, terminated, truncated, info = env.step(actions)
    assert truncated.all() and not terminated.any()
    assert not info["agent_done"].any()
    agent_term, agent_trunc = agent_ends(terminated, truncated, info["agent_done"], env.n_agents)
    assert not agent_term.any() and agent_trunc.all()


def test_mappo_bootstraps_mpe2_episodes_at_the_time_limit():
    torch.manual_seed(0)
    env = mpe2_spread(max_episode_steps=3)
    agent = MAPPOAgent(env.single_observation_space, env.single_action_space,
                       MAPPOConfig(num_envs=2, rollout_steps=6, num_minibatches=2), CPU)
    obs, _ = env.reset(seed=0)
    agent.collect(env, obs)
    dones = agent.buffer.dones.view(6, 2, env.n_agents)
    assert dones[2].all() and dones[5].all()  # both episodes ended by the time limit...
    assert not agent.buffer.terminated.any()  # ...which is no terminal state: GAE bootstraps from final_obs


def test_maddpg_targets_bootstrap_mpe2_episodes_at_the_time_limit():
    torch.manual_seed(0)
    env = mpe2_spread(max_episode_steps=3)
    agent = MADDPGAgent(env.single_observation_space, env.single_action_space,
                        MADDPGConfig(num_envs=2, steps_per_iteration=6, batch_size=4, buffer_size=64,
                                     learning_starts=64), CPU)
    obs, _ = env.reset(seed=0)
    agent.train_iteration(env, obs)
    assert agent.replay.size == 12
    assert not agent.replay.data["terminated"][:12].any()  # y_i bootstraps Q'_i at truncation
    assert agent.replay.data["alive"][:12].all()


class OneLeavesEarly:
    """A PettingZoo parallel env of two agents: "quitter" terminates after its first step, "stayer" plays on
    until `max_cycles`, where PettingZoo truncates it (as MPE2 does every agent)."""

    metadata: dict[str, Any] = {"name": "one_leaves_early"}

    def __init__(self, max_cycles: int) -> None:
        self.possible_agents = ["quitter", "stayer"]
        self.max_cycles = max_cycles
        self.agents: list[str] = []
        self.steps = 0

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent: str) -> gym.spaces.Box:
        return gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.full(2, self.steps / 10, np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        self.agents, self.steps = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, np.ndarray]) -> tuple[dict, dict, dict, dict, dict]:
        self.steps += 1
        acting = list(self.agents)
        terminated = {a: a == "quitter" for a in acting}
        truncated = {a: self.steps >= self.max_cycles for a in acting}
        self.agents = [a for a in acting if not (terminated[a] or truncated[a])]
        obs = {a: np.full(2, self.steps / 10, np.float32) for a in acting}
        return obs, {a: 1.0 for a in acting}, terminated, truncated, {a: {} for a in acting}

    def close(self) -> None:
        pass


def test_an_agent_that_leaves_early_stays_terminated_and_the_rest_truncate():
    env = ParallelVecEnv(lambda: OneLeavesEarly(max_cycles=3), num_envs=1, max_episode_steps=3)
    env.reset(seed=0)
    flags = []
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(torch.zeros(1, 2, 1))
        flags.append(agent_ends(terminated, truncated, info["agent_done"], 2))
    (term0, trunc0), _, (term2, trunc2) = flags
    assert term0.tolist() == [[True, False]] and not trunc0.any()  # the quitter's own termination
    assert term2.tolist() == [[True, False]]  # still out at the team's last step, masked there anyway
    assert trunc2.tolist() == [[False, True]]  # the stayer is cut by the time limit: bootstrapped


# -- heterogeneous teams: the padded action entries past an agent's width --------------------------------------

def speaker_listener(num_envs: int = 4) -> Any:
    # VMAS's speaker acts 5 wide (move and say), its listener 2: the listener's entries 2..4 are padding
    from dask_podracer.envs.multi_agent.vmas_adapter import VmasVecEnv
    pytest.importorskip("vmas")
    env = VmasVecEnv("simple_speaker_listener", num_envs, seed=0, max_episode_steps=5)
    env.reset(seed=0)
    return env


def test_joint_action_box_knows_each_agents_width():
    env = speaker_listener()
    assert env.single_action_space.agent_widths == (5, 2)
    assert mpe2_spread().single_action_space.agent_widths == (5, 5, 5)


@pytest.mark.parametrize("share", [True, False])
def test_mappo_log_prob_and_entropy_ignore_padded_action_entries(share):
    # the env never sees the listener's entries 2..4, but they were in its log-prob: noise in the PPO ratio
    torch.manual_seed(0)
    env = speaker_listener()
    agent = MAPPOAgent(env.single_observation_space, env.single_action_space,
                       MAPPOConfig(num_envs=4, share_parameters=share), CPU)
    obs, _ = env.reset(seed=0)
    action, sampled_log_prob = agent.actor.sample(obs, agent.generator)
    moved = action.clone()
    moved[:, 1, 2:] += 1.0
    log_prob, entropy = agent.actor.log_prob_entropy(obs, action)
    assert torch.allclose(sampled_log_prob, log_prob)
    assert torch.equal(agent.actor.log_prob_entropy(obs, moved)[0], log_prob)
    unit_gaussian_entropy = 0.5 * np.log(2 * np.pi * np.e)  # log_std_init = 0
    assert torch.allclose(entropy, torch.tensor([5.0, 2.0]) * unit_gaussian_entropy)


def test_maddpg_keeps_padded_action_entries_out_of_replay_and_critic():
    torch.manual_seed(0)
    env = speaker_listener()
    agent = MADDPGAgent(env.single_observation_space, env.single_action_space,
                        MADDPGConfig(num_envs=4, steps_per_iteration=4, batch_size=8, learning_starts=8,
                                     buffer_size=64), CPU)
    obs, _ = env.reset(seed=0)
    for _ in range(2):  # random actions, then the actor's with noise
        obs, _, _ = agent.train_iteration(env, obs)
    actions = agent.replay.data["action"][:agent.replay.size].unflatten(1, (2, 5))
    assert actions[:, 0].abs().sum() > 0 and actions[:, 1, :2].abs().sum() > 0
    assert not actions[:, 1, 2:].any()
    assert agent.updates > 0
