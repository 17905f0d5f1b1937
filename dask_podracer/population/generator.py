"""The generator: what does the next segment start from, and with which hyper-parameters?

Tournament strategy (ElegantRL-Podracer): while the leaderboard is short, start
fresh agents; after that, draw a few entries from the top of the board, take the
best of them as the parent and perturb its hyper-parameters. Every proposal is a
function of (seed, proposal index, leaderboard), so a resumed run proposes what
an uninterrupted one would have.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

from dask_podracer.agents import algorithm_info
from dask_podracer.config import Config


@dataclasses.dataclass(frozen=True)
class Proposal:
    parent: str | None
    """Leaderboard key to start from, or None for a fresh agent."""
    hparams: dict[str, Any]
    generation: int
    """Segments in the lineage before this one."""


def propose(config: Config, index: int, leaderboard: Sequence[Mapping[str, Any]], fresh_started: int) -> Proposal:
    """The `index`-th proposal of this run, given the current (ranked) leaderboard."""
    t = config.tournament
    if fresh_started < t.fresh_agents or not leaderboard:
        return Proposal(parent=None, hparams=dict(config.hparams), generation=0)
    rng = random.Random(f"{config.run.seed}/{index}")
    candidates = list(leaderboard[: t.select_from_top])
    drawn = rng.sample(candidates, min(t.tournament_size, len(candidates)))
    parent = max(drawn, key=lambda entry: entry["score"])
    hparams = perturb(config, parent["hparams"], rng)
    return Proposal(parent=parent["key"], hparams=hparams, generation=int(parent.get("generation", 0)) + 1)


def perturb(config: Config, hparams: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """Multiply or divide each of `tournament.perturb` by `perturb_factor`; keep values the algorithm accepts."""
    config_cls = algorithm_info(config.run.algorithm).config_cls
    child = dict(hparams)
    factor = config.tournament.perturb_factor
    for name in config.tournament.perturb:
        old = child[name]
        child[name] = type(old)(old * factor if rng.random() < 0.5 else old / factor)
        try:
            config_cls(**child)
        except ValueError:
            child[name] = old  # e.g. gamma pushed above 1: keep the parent's value
    return child
