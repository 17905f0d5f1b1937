"""Generator strategies: given the agents that are free to train, say what each starts from.

A strategy proposes; the tournament state machine decides and records. Each is a
small pure function of the machine's state and a seeded RNG:

- tournament: keep training your own checkpoint, unless an entry picked from the top
  of the leaderboard (by tournament or softmax) beats it (by more than `adopt_margin` of
  the entry's standard errors) and, with `progress_margin`, has learned (beats every first
  segment of its group): then adopt that entry with perturbed hyper-parameters
  (ElegantRL-Podracer's tournament-based ensemble training).
- pbt: truncation selection (Jaderberg et al. 2017): an agent in the bottom quantile of
  its group copies one from the top quantile (weights, optimizer and, by the replay
  policy, its buffer), then explores its hyper-parameters.
- generational: the same exploit/explore, but only when every agent has finished its
  generation (a barrier): the baseline the seeds compare the tournament against.
- random: random search; every agent trains its own draw from the prior, never exploits.

The three that exploit leave a line alone until it has trained `tournament.ready`
segments since it started (fresh or adopted): PBT's "ready".
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from dask_podracer.agents import algorithm_info
from dask_podracer.config import STRATEGIES as STRATEGY_NAMES
from dask_podracer.config import Config
from dask_podracer.population.pool import AgentState
from dask_podracer.search import perturb_hparams
from dask_podracer.store.records import LeaderboardEntry


class Standings(Protocol):
    """What a strategy reads of the tournament (the state machine is one): it never changes it."""

    config: Config
    board: list[LeaderboardEntry]
    first_segments: dict[str, tuple[float, float]]
    """Per group, the best first segment of a fresh line: (score, standard error)."""

    def active_agents(self) -> list[AgentState]: ...


@dataclasses.dataclass(frozen=True)
class Plan:
    """What an agent's next segment starts from."""

    parent: str | None
    """Checkpoint key to load, None for fresh networks."""
    hparams: dict[str, Any]
    generation: int
    """Segments in the lineage before this one."""
    load_replay: bool = True
    """Whether the parent's replay buffer comes along (False: the child starts with an empty one)."""
    adopted: bool = False
    """True when the parent is another agent's checkpoint (an exploit step)."""


Strategy = Callable[[Standings, Sequence[AgentState], random.Random], dict[int, Plan]]


def tournament(machine: Standings, idle: Sequence[AgentState], rng: random.Random) -> dict[int, Plan]:
    cfg = machine.config.tournament
    plans = {}
    for agent in idle:
        entries = [e for e in machine.board if e.get("group") == agent.group]
        if agent.checkpoint is None and len(entries) < cfg.fresh_agents:
            plans[agent.id] = fresh(agent)
            continue
        if not ready(agent, machine):
            plans[agent.id] = keep_training(agent)
            continue
        pick = select(entries, machine, rng) if entries else None
        if pick is not None and beats(pick, agent, cfg.adopt_margin) and learned(pick, machine):
            plans[agent.id] = adopt(machine, agent, pick["key"], pick["hparams"], int(pick["generation"]), rng)
        else:  # nothing worth adopting: one with no checkpoint yet trains its own draw, as in random search
            plans[agent.id] = keep_training(agent) if agent.checkpoint is not None else fresh(agent)
    return plans


def pbt(machine: Standings, idle: Sequence[AgentState], rng: random.Random) -> dict[int, Plan]:
    return {agent.id: _truncate(machine, agent, rng) for agent in idle}


def generational(machine: Standings, idle: Sequence[AgentState], rng: random.Random) -> dict[int, Plan]:
    if any(a.running for a in machine.active_agents()):
        return {}  # the barrier: nobody starts generation g + 1 before everyone has finished g
    return {agent.id: _truncate(machine, agent, rng) for agent in machine.active_agents()}


def random_search(machine: Standings, idle: Sequence[AgentState], rng: random.Random) -> dict[int, Plan]:
    return {agent.id: fresh(agent) if agent.checkpoint is None else keep_training(agent) for agent in idle}


STRATEGIES: Mapping[str, Strategy] = dict(zip(STRATEGY_NAMES, (tournament, pbt, generational, random_search),
                                              strict=True))
"""The strategy of each name `tournament.strategy` accepts (config.STRATEGIES, in the same order)."""


# -- the pieces they share ----------------------------------------------------------------

def fresh(agent: AgentState) -> Plan:
    return Plan(parent=None, hparams=dict(agent.hparams), generation=0)


def keep_training(agent: AgentState) -> Plan:
    return Plan(parent=agent.checkpoint, hparams=dict(agent.hparams), generation=agent.generation + 1)


def adopt(machine: Standings, agent: AgentState, key: str, hparams: Mapping[str, Any], generation: int,
          rng: random.Random) -> Plan:
    """Start from someone else's checkpoint `key` with explored hyper-parameters."""
    cfg = machine.config.tournament
    group = machine.config.group(agent.group)
    info = algorithm_info(group.algorithm)
    child = perturb_hparams(hparams, cfg.perturb, cfg.perturb_factor, rng, group.search, cfg.resample_probability,
                            valid=lambda h: info.config_cls(**h), options=info.choices)
    return Plan(parent=key, hparams=child, generation=generation + 1, load_replay=cfg.replay != "reset", adopted=True)


def ready(agent: AgentState, machine: Standings) -> bool:
    """Whether the agent's line has trained long enough to be judged (and abandoned); an agent with no
    checkpoint (its first segment was cancelled or its checkpoint damaged) has no line to keep."""
    return agent.checkpoint is None or agent.line_segments >= machine.config.tournament.ready


def beats(entry: Mapping[str, Any], agent: AgentState, margin: float) -> bool:
    """Whether board `entry` beats the agent's own latest score by more than `margin` of the entry's
    standard errors. The board keeps the luckiest evaluations, so an entry's score is optimistic by about
    its noise; the agent's latest score was not selected for luck. (Entries from before standard errors
    were recorded count as exact.)"""
    if agent.score is None:
        return True
    return entry["score"] > agent.score + margin * entry.get("score_stderr", 0.0)


def learned(entry: Mapping[str, Any], machine: Standings) -> bool:
    """Whether board `entry` beats the best first segment of its group by more than `tournament.progress_margin`
    of their combined standard errors (always, with the margin 0 or no first segment seen yet). A line whose
    hyper-parameters learn nothing still climbs the board, by the luck of its best evaluations; a line that
    learns passes this bar, where one that is merely lucky rarely does."""
    margin = machine.config.tournament.progress_margin
    first = machine.first_segments.get(entry.get("group"))
    if not margin or first is None:
        return True
    score, stderr = first
    return entry["score"] > score + margin * math.hypot(entry.get("score_stderr", 0.0), stderr)


def select(entries: Sequence[Mapping[str, Any]], machine: Standings, rng: random.Random) -> Mapping[str, Any]:
    """One entry from the top of a ranked board, by tournament or by softmax over standardised scores."""
    cfg = machine.config.tournament
    top = list(entries[: cfg.select_from_top])
    if cfg.selection == "tournament":
        return max(rng.sample(top, min(cfg.tournament_size, len(top))), key=lambda e: e["score"])
    scores = [e["score"] for e in top]
    spread = _std(scores) or 1.0
    weights = [math.exp((s - max(scores)) / (cfg.softmax_temperature * spread)) for s in scores]
    return rng.choices(top, weights=weights)[0]


def _truncate(machine: Standings, agent: AgentState, rng: random.Random) -> Plan:
    """PBT's exploit step for one agent: copy a top-quantile peer if this agent is in the bottom quantile."""
    if agent.checkpoint is None:
        return fresh(agent)
    if not ready(agent, machine):
        return keep_training(agent)
    peers = sorted((a for a in machine.active_agents() if a.group == agent.group and a.score is not None),
                   key=lambda a: (-a.score, a.id))
    cut = max(1, math.floor(machine.config.tournament.quantile * len(peers)))
    if len(peers) < 2 or agent not in peers[-cut:]:
        return keep_training(agent)
    donor = rng.choice(peers[:cut])
    return adopt(machine, agent, donor.checkpoint, donor.checkpoint_hparams, donor.generation, rng)


def _std(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
