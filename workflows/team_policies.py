"""A team's exported policies: the whole team as one TorchScript module, and one module per agent.

`export_champion.py` writes, for a checkpoint of a multi-agent algorithm (ippo, mappo, maddpg):

- `policy.pt`, the team: joint observations `[B, n_agents, obs_dim]` -> joint actions `[B, n_agents, act_dim]`,
  agent i in row i (its id is its row: a shared network appends the one-hot id itself); narrower agents' rows
  are padded with zeros and their trailing action entries are to be ignored, as in the multi-agent VecEnv
  contract (dask_podracer/envs/multi_agent/base.py);
- `agent_<i>.pt`, agent i alone, for decentralised execution: its own observation `[B, obs_width_i]` ->
  its own action `[B, act_width_i]`, nothing padded.

An agent's policy is the team's row i. It is exact because every team algorithm's actors are decentralised
(agent i's action depends on o_i only); `agent_policies` checks that on sampled observations before it writes
anything, so an algorithm whose actors communicate is refused rather than exported wrong.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn


class AgentPolicy(nn.Module):
    """Agent `index`'s deterministic action from its own observation, through the team's policy."""

    def __init__(self, team: nn.Module, index: int, n_agents: int, obs_dim: int, obs_width: int,
                 act_width: int) -> None:
        super().__init__()
        self.team = team
        self.index, self.n_agents, self.obs_dim = index, n_agents, obs_dim
        self.obs_width, self.act_width = obs_width, act_width

    def forward(self, obs: Tensor) -> Tensor:
        joint = obs.new_zeros((obs.shape[0], self.n_agents, self.obs_dim))
        joint[:, self.index, : self.obs_width] = obs
        return self.team(joint)[:, self.index, : self.act_width]


def _sample(space, count: int, generator: torch.Generator) -> Tensor:
    """`count` observations uniformly in a Box, its unbounded sides read as [-1, 1]."""
    low = torch.as_tensor(space.low, dtype=torch.float32).nan_to_num(neginf=-1.0, posinf=1.0).clamp(-1e3, 1e3)
    high = torch.as_tensor(space.high, dtype=torch.float32).nan_to_num(neginf=-1.0, posinf=1.0).clamp(-1e3, 1e3)
    low, high = torch.minimum(low, high), torch.maximum(low, high)
    return low + (high - low) * torch.rand((count, *low.shape), generator=generator)


@torch.no_grad()
def agent_policies(team: nn.Module, env, out: Path) -> list[dict]:
    """Trace and save `out`/agent_<i>.pt for every agent of `env`'s team; the card's entry per agent.

    `team` maps joint observations to joint deterministic actions (the traced or plain team policy)."""
    n, obs_dim = env.single_observation_space.shape
    generator = torch.Generator().manual_seed(0)
    joint = torch.zeros(8, n, obs_dim)
    for i, space in enumerate(env.agent_observation_spaces):
        joint[:, i, : space.shape[0]] = _sample(space, 8, generator)
    team_actions = team(joint)
    entries, modules = [], []
    for i, (obs_space, act_space) in enumerate(zip(env.agent_observation_spaces, env.agent_action_spaces)):
        width, act_width = obs_space.shape[0], act_space.shape[0]
        policy = AgentPolicy(team, i, n, obs_dim, width, act_width).requires_grad_(False)
        traced = torch.jit.trace(policy, joint[:, i, :width], check_trace=False)
        if not torch.equal(traced(joint[:, i, :width]), team_actions[:, i, :act_width]):
            raise ValueError(f"agent {i}'s action depends on other agents' observations: its policy cannot be "
                             f"exported alone (policy.pt, the team's, is exact)")
        modules.append(traced)
        entries.append({"agent": i, "policy": f"agent_{i}.pt", "observation_shape": [width],
                        "action_shape": [act_width], "action_low": act_space.low.tolist(),
                        "action_high": act_space.high.tolist()})
    for i, traced in enumerate(modules):
        traced.save(str(out / f"agent_{i}.pt"))
    return entries
