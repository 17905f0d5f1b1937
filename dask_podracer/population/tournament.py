"""The tournament's decisions as a state machine without I/O.

Events in (a segment finished or failed, a checkpoint found damaged, the cluster's
capacity changed, the budget ran out), instructions out (train, promote, evict,
cancel, quarantine, stop). One
method, `handle`, mutates; every decision draws from an RNG seeded by the run's
seed and the event's id, so a scripted sequence of events always gives the same
instructions and a decision can be traced to the event that caused it. The
Dask loop (`orchestrator.py`) only carries the instructions out: a Train instruction
holds everything its segment's spec needs (`segment_spec` builds it).
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from dask_podracer.agents import algorithm_info
from dask_podracer.config import Config, GroupConfig
from dask_podracer.population.pool import AgentState
from dask_podracer.population.strategies import STRATEGIES, Plan
from dask_podracer.population.updater import update_leaderboard
from dask_podracer.search import freeze, sample_hparams
from dask_podracer.store.records import LeaderboardEntry
from dask_podracer.train import SegmentResult, SegmentSpec
from dask_podracer.train.spec import ActorsSpec, LearnersSpec


# -- events ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SegmentFinished:
    agent: int
    result: SegmentResult


@dataclasses.dataclass(frozen=True)
class SegmentFailed:
    agent: int
    key: str
    error: str
    damaged: str | None = None
    """A checkpoint the segment found damaged (failed its checksum): never to be used again."""


@dataclasses.dataclass(frozen=True)
class CheckpointDamaged:
    """A checkpoint found on resume that fails its checksum (its segment's result cannot be trusted)."""

    key: str
    error: str


@dataclasses.dataclass(frozen=True)
class SegmentRecovered:
    """A checkpoint found in the store on resume that the history never recorded: its segment finished
    after the last write of an earlier invocation (or while its client was dead)."""

    agent: int | None
    """The agent that was training it, if the saved state knew."""
    result: SegmentResult
    resumed: bool = False
    """True when it belongs to the interrupted invocation being continued: it counts towards max_segments."""


@dataclasses.dataclass(frozen=True)
class CapacityChanged:
    slots: int
    """Segments the cluster can run at once now."""


@dataclasses.dataclass(frozen=True)
class BudgetReached:
    pass


Event = SegmentFinished | SegmentFailed | SegmentRecovered | CheckpointDamaged | CapacityChanged | BudgetReached
EVENTS = (SegmentFinished, SegmentFailed, SegmentRecovered, CheckpointDamaged, CapacityChanged, BudgetReached)


# -- instructions ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Train:
    """Train one segment: everything its `SegmentSpec` says but where the store is and how long the run has
    left (`segment_spec` adds those)."""

    event: int
    agent: int
    key: str
    group: str
    plan: Plan
    seed: int
    env_step_budget: int
    algorithm: str
    env: str
    env_kwargs: dict[str, Any]
    eval_env_kwargs: dict[str, Any]
    seconds: float
    """The segment's own time limit (`segment.seconds`); 0 for none, when the run's budget still caps it."""
    eval_episodes: int
    device: str
    torch_threads: int
    share_replay: bool
    actors: ActorsSpec | None = None
    """[actors]: the segment is a learner task that starts actor tasks; None: one task."""
    learners: LearnersSpec | None = None
    """[learners]: the segment is several learner tasks averaging gradients; None: one."""
    graphs_allowed: bool = True
    """False where segments share a GPU as threads (`SegmentSpec.graphs_allowed`)."""


@dataclasses.dataclass(frozen=True)
class Promote:
    event: int
    key: str
    rank: int


@dataclasses.dataclass(frozen=True)
class Evict:
    event: int
    key: str


@dataclasses.dataclass(frozen=True)
class Cancel:
    event: int
    agent: int
    key: str
    reason: str
    """capacity (the pool shrank), or the reason of the Stop that came with it."""


@dataclasses.dataclass(frozen=True)
class Quarantine:
    event: int
    key: str
    reason: str
    """The error that found it damaged."""


@dataclasses.dataclass(frozen=True)
class Stop:
    event: int
    reason: str
    """target, max_segments, budget or failing."""


Instruction = Train | Promote | Evict | Cancel | Quarantine | Stop


def segment_spec(train: Train, store_url: str, seconds_left: float) -> SegmentSpec:
    """The spec of the segment `train` asks for; it never trains past the run's budget (`seconds_left`), so the
    last segments end with it."""
    seconds_left = max(1.0, seconds_left)
    return SegmentSpec(
        key=train.key, store_url=store_url, env=train.env, algorithm=train.algorithm, hparams=train.plan.hparams,
        parent=train.plan.parent, seed=train.seed, env_step_budget=train.env_step_budget,
        seconds=min(train.seconds, seconds_left) if train.seconds > 0 else seconds_left,
        eval_episodes=train.eval_episodes, device=train.device, torch_threads=train.torch_threads,
        generation=train.plan.generation, load_replay=train.plan.load_replay, share_replay=train.share_replay,
        env_kwargs=train.env_kwargs, eval_env_kwargs=train.eval_env_kwargs, actors=train.actors,
        learners=train.learners, graphs_allowed=train.graphs_allowed,
    )


def _actors_spec(config: Config) -> ActorsSpec | None:
    actors = config.actors
    if actors is None:
        return None
    return ActorsSpec(workers=actors.workers, max_policy_lag=actors.max_policy_lag, reuse=actors.reuse,
                      weights_every=actors.weights_every, connect_timeout=actors.connect_timeout,
                      max_in_flight=actors.max_in_flight)


def _learners_spec(config: Config) -> LearnersSpec | None:
    learners = config.learners
    if learners is None or learners.workers == 1:  # one learner: a plain segment
        return None
    return LearnersSpec(workers=learners.workers, connect_timeout=learners.connect_timeout)


def config_values(config: Config, group: str) -> dict[str, Any]:
    """The tunable hyper-parameters of `group` that only its config sets: neither drawn from a `[search]` prior
    nor perturbed (those are each agent's own). A child may change a tunable one and still load its parent's
    checkpoint, so every segment takes these from the config."""
    settings = config.group(group)
    own = set(settings.search) | set(config.tournament.perturb)
    tunable = algorithm_info(settings.algorithm).tunable
    return {name: value for name, value in settings.hparams.items() if name in tunable and name not in own}


def _default_key(index: int) -> str:
    return f"s{index:06d}-{uuid.uuid4().hex[:8]}"


class Tournament:
    """Agents, the leaderboard and the counters of one tournament; `handle(event) -> instructions`."""

    def __init__(self, config: Config, board: list[LeaderboardEntry] | None = None,
                 state: Mapping[str, Any] | None = None, key_factory: Callable[[int], str] = _default_key,
                 completed_before: int = 0) -> None:
        """`state`: `to_state()` of an earlier invocation, to resume; `completed_before`: segments that count
        towards `run.max_segments` already (an interrupted invocation being resumed)."""
        self.config = config
        self.board: list[LeaderboardEntry] = [LeaderboardEntry(**e) for e in board or []]
        self.key_factory = key_factory
        self.strategy = STRATEGIES[config.tournament.strategy]
        state = dict(state or {})
        self.counters = {"events": 0, "segments_started": 0, "segments_completed": 0, "segments_failed": 0,
                         "env_steps": 0, "failed_in_a_row": 0, **state.get("counters", {})}
        self.agents: dict[int, AgentState] = {}
        self.in_flight: dict[str, int] = {}
        """Segment key -> agent, of the segments an earlier invocation left running (see SegmentRecovered)."""
        for raw in state.get("agents", []):  # a resumed run: in-flight segments are lost, agents are not
            agent = AgentState(**{**raw, "running": None, "active": False})
            if agent.left_line is not None:  # its adopting segment is lost (unless recovered: see _recovered)
                agent.hparams, agent.line_segments = agent.left_line
                agent.left_line = None
            self.agents[agent.id] = agent
            if raw.get("running"):
                self.in_flight[raw["running"]] = agent.id
        self.first_segments: dict[str, tuple[float, float]] = {
            group: (float(score), float(stderr)) for group, (score, stderr) in state.get("first_segments", {}).items()}
        """Per group, the best first segment of a fresh line: (score, standard error); see progress_margin."""
        if "first_segments" not in state:  # a state saved before they were kept: the board's stand in
            for entry in self.board:
                if int(entry.get("generation", 1)) == 0:
                    self._note_first_segment(entry["group"], entry["score"], entry.get("score_stderr", 0.0))
        self.slots = 0
        self.running = 0  # segments training now (kept, not counted, since it is asked twice per event)
        self.stopped: str | None = None
        self.completed_now = completed_before  # segments finished or failed in this invocation (for max_segments)

    # -- the one method that mutates --------------------------------------------------------
    def handle(self, event: Event) -> list[Instruction]:
        """Update the state for `event`; the instructions that carry the decision out.

        After a Stop, finishing segments are still recorded (a budget stop lets running
        segments end), but nothing new is started.
        """
        if not isinstance(event, EVENTS):  # before anything changes: an unknown event is a bug, not a budget
            raise TypeError(f"the tournament has no rule for a {type(event).__name__} event")
        if self.stopped and not isinstance(event, (SegmentFinished, SegmentFailed)):
            return []
        self.counters["events"] += 1
        eid = self.counters["events"]
        rng = random.Random(f"{self.config.run.seed}/{eid}")
        if isinstance(event, SegmentFinished):
            return self._finished(eid, event, rng)
        if isinstance(event, SegmentFailed):
            return self._failed(eid, event, rng)
        if isinstance(event, SegmentRecovered):
            return self._recovered(eid, event)
        if isinstance(event, CheckpointDamaged):
            return self._forget(eid, event.key, event.error)
        if isinstance(event, CapacityChanged):
            return self._capacity(eid, event.slots, rng)
        return self._stop(eid, "budget", cancel=False)  # BudgetReached

    def _finished(self, eid: int, event: SegmentFinished, rng: random.Random) -> list[Instruction]:
        agent, result = self.agents[event.agent], event.result
        self._ended(agent, finished=True)
        self._advance(agent, result)
        self.counters["segments_completed"] += 1
        self.counters["env_steps"] += result.segment_env_steps
        self.counters["failed_in_a_row"] = 0
        self.completed_now += 1
        out = self._rank(eid, result, agent.group)
        if self.stopped:
            return out
        if self._on_target(result):
            return out + self._stop(eid, "target", cancel=True)
        return out + self._after_segment(eid, agent, rng)

    def _recovered(self, eid: int, event: SegmentRecovered) -> list[Instruction]:
        """Record a result an earlier invocation never saw; the agent (if known) continues from it."""
        result = event.result
        agent = self.agents.get(event.agent) if event.agent is not None else None
        # the saved state had the agent training this very segment (`in_flight`), so the result is its newest
        # checkpoint whatever it started from: its own, an adopted entry or fresh networks
        if agent is not None:
            # the state put an agent whose adopting segment was lost back on its own line (__init__); this one was
            # not lost: its hyper-parameters and line are the agent's now
            agent.hparams = dict(result.hparams)
            if result.parent is None or result.parent != agent.checkpoint:
                agent.line_segments = 0
            self._advance(agent, result)
        group = agent.group if agent is not None else self._group_of(result)
        self.counters["segments_completed"] += 1
        self.counters["env_steps"] += result.segment_env_steps
        self.completed_now += int(event.resumed)
        out = self._rank(eid, result, group)
        if not self.stopped and self._on_target(result):
            out += self._stop(eid, "target", cancel=True)
        return out

    def _rank(self, eid: int, result: SegmentResult, group: str) -> list[Instruction]:
        """The updater: enter `result` in the board if it beats the K-th entry (and keep its group's best first
        segment)."""
        if result.generation == 0:
            self._note_first_segment(group, result.score, result.score_stderr)
        before = {e["key"] for e in self.board}
        self.board, rank = update_leaderboard(self.board, result, self.config.tournament.leaderboard_size, group)
        # evicted also when the result does not enter: a board resumed under a smaller leaderboard_size is cut to
        # it, and the store's table (and what retention may delete) must follow
        evicted = sorted(before - {e["key"] for e in self.board})
        promoted = [] if rank is None else [Promote(eid, result.key, rank)]
        return promoted + [Evict(eid, key) for key in evicted]

    def _note_first_segment(self, group: str, score: float, stderr: float) -> None:
        best = self.first_segments.get(group)
        if best is None or score > best[0]:
            self.first_segments[group] = (float(score), float(stderr))

    def _on_target(self, result: SegmentResult) -> bool:
        target = self.config.run.target_return
        return target is not None and result.score >= target

    def _group_of(self, result: SegmentResult) -> str:
        """The group of a result no known agent trained: of its algorithm, and where several groups share that, the
        one whose hyper-parameters it has (but those its agents draw or perturb): filed under another, its networks
        would be adopted by agents built for other ones."""
        groups = [g for g in self.config.groups if g.algorithm == result.algorithm]
        if not groups:
            return result.algorithm
        perturbed = set(self.config.tournament.perturb)

        def differences(group: GroupConfig) -> int:
            return sum(freeze(result.hparams.get(name)) != freeze(value) for name, value in group.hparams.items()
                       if name not in group.search and name not in perturbed)
        return min(groups, key=differences).name  # the first of them on a tie

    def _failed(self, eid: int, event: SegmentFailed, rng: random.Random) -> list[Instruction]:
        agent = self.agents[event.agent]
        self._ended(agent)
        out: list[Instruction] = []
        if event.damaged:
            out += self._forget(eid, event.damaged, event.error)
        self.counters["segments_failed"] += 1
        self.counters["failed_in_a_row"] += 1
        self.completed_now += 1
        if self.stopped:
            return out
        if self.counters["failed_in_a_row"] >= max(3, 2 * self.target_agents()):
            return out + self._stop(eid, "failing", cancel=True)  # every slot failed twice in a row
        return out + self._after_segment(eid, agent, rng)

    def _forget(self, eid: int, key: str, error: str) -> list[Instruction]:
        """A damaged checkpoint is quarantined (kept for inspection, never loaded again), leaves the board, and
        agents built on it start again from scratch."""
        out: list[Instruction] = [Quarantine(eid, key, error)]
        if any(e["key"] == key for e in self.board):
            self.board = [e for e in self.board if e["key"] != key]
            out.append(Evict(eid, key))
        for agent in self.agents.values():
            if agent.checkpoint == key:
                agent.checkpoint, agent.score, agent.score_stderr, agent.generation = None, None, 0.0, 0
        return out

    def _after_segment(self, eid: int, agent: AgentState, rng: random.Random) -> list[Instruction]:
        limit = self.config.run.max_segments
        if limit and self.completed_now >= limit:
            return self._stop(eid, "max_segments", cancel=True)
        idle = [agent] if agent.active else []
        return self._train(eid, idle, rng)

    def _capacity(self, eid: int, slots: int, rng: random.Random) -> list[Instruction]:
        self.slots = slots
        limit = self.config.run.max_segments
        if limit and self.completed_now >= limit and not self.running:
            return self._stop(eid, "max_segments", cancel=False)  # a resumed invocation that had used them up
        target = self.target_agents()
        active = self.active_agents()
        out: list[Instruction] = []
        if len(active) > target:  # shrink: the lowest-ranked go first, running or not
            for agent in sorted(active, key=self._rank_key)[: len(active) - target]:
                agent.active = False
                if agent.running:
                    out.append(Cancel(eid, agent.id, agent.running, "capacity"))
                    self._ended(agent)
        if target > len(active):  # grow: bring back the best retired agents, then new ones, in the groups' weights
            for agent in self._grown(target - len(active), active):
                agent.active = True
        # every active agent without a segment gets one (also one left idle when a cancelled peer freed the limit)
        return out + self._train(eid, [a for a in self.active_agents() if not a.running], rng)

    def _train(self, eid: int, idle: list[AgentState], rng: random.Random) -> list[Instruction]:
        if self.limit_reached():
            return []
        plans = self.strategy(self, idle, rng)
        out: list[Instruction] = []
        for agent_id in sorted(plans):
            if self.limit_reached():
                break
            agent = self.agents[agent_id]
            plan = self._with_config_values(agent.group, plans[agent_id])
            index = self.counters["segments_started"]
            self.counters["segments_started"] += 1
            key = self.key_factory(index)
            if plan.adopted:  # until the child finishes, the agent's checkpoint is still its own line's
                agent.left_line = [agent.hparams, agent.line_segments]
            agent.running, agent.hparams = key, dict(plan.hparams)  # the child's hyper-parameters win
            if plan.adopted or plan.parent is None:
                agent.line_segments = 0  # a new line starts
            self.running += 1
            out.append(self._train_instruction(eid, agent, key, plan, seed=self.config.run.seed * 1_000_003 + index))
        return out

    def _with_config_values(self, group: str, plan: Plan) -> Plan:
        """`plan` with the tunable hyper-parameters the config sets for every agent of `group` (see
        `config_values`): a resumed agent, and an entry it adopts, carry the values of the config that trained
        them, and a value edited between invocations must reach their next segments, not only new agents'."""
        values = config_values(self.config, group)  # a few dozen names a segment: not worth keeping
        if all(plan.hparams.get(name) == value for name, value in values.items()):
            return plan
        return dataclasses.replace(plan, hparams={**plan.hparams, **values})

    def _train_instruction(self, eid: int, agent: AgentState, key: str, plan: Plan, seed: int) -> Train:
        config, group = self.config, self.config.group(agent.group)
        run, segment = config.run, config.segment
        return Train(eid, agent.id, key, agent.group, plan, seed=seed,
                     env_step_budget=group.env_steps or segment.env_steps, algorithm=group.algorithm, env=run.env,
                     env_kwargs=run.env_kwargs, eval_env_kwargs=run.eval_env_kwargs, seconds=segment.seconds,
                     eval_episodes=segment.eval_episodes, device=segment.device, torch_threads=segment.torch_threads,
                     share_replay=config.tournament.replay == "share", actors=_actors_spec(config),
                     learners=_learners_spec(config), graphs_allowed=not config.cluster.threads_share_a_gpu)

    def _stop(self, eid: int, reason: str, cancel: bool) -> list[Instruction]:
        self.stopped = reason
        out: list[Instruction] = []
        if cancel:
            for agent in self.active_agents():
                if agent.running:
                    out.append(Cancel(eid, agent.id, agent.running, reason))
                    self._ended(agent)
        return out + [Stop(eid, reason)]

    @staticmethod
    def _advance(agent: AgentState, result: SegmentResult) -> None:
        """The agent's latest checkpoint is now `result`'s."""
        agent.checkpoint, agent.score, agent.generation = result.key, result.score, result.generation
        agent.score_stderr = result.score_stderr
        agent.segments += 1
        agent.line_segments += 1

    def _ended(self, agent: AgentState, finished: bool = False) -> None:
        """Its segment is over; one that did not finish (failed, cancelled) leaves the agent on its own line."""
        if agent.running:
            agent.running = None
            self.running -= 1
        if agent.left_line is not None:
            if not finished:  # else its checkpoint would train on with a child's hyper-parameters
                agent.hparams, agent.line_segments = agent.left_line
            agent.left_line = None

    # -- queries ------------------------------------------------------------------------------
    def target_agents(self) -> int:
        """Agents that should be training: the pool size, or the cluster's slots, plus the pending extra."""
        per_segment = self.config.slots_per_segment  # its learners and its actors
        return (self.config.tournament.pool_size or self.slots // per_segment) + self.config.tournament.pending

    def active_agents(self) -> list[AgentState]:
        return [a for a in self.agents.values() if a.active]

    def running_agents(self) -> list[AgentState]:
        return [a for a in self.agents.values() if a.running]

    def limit_reached(self) -> bool:
        limit = self.config.run.max_segments
        return bool(limit) and self.completed_now + self.running >= limit

    def best_score(self) -> float | None:
        return self.board[0]["score"] if self.board else None

    def to_state(self) -> dict[str, Any]:
        """What a resumed run needs, as plain JSON."""
        fields = [f.name for f in dataclasses.fields(AgentState)]  # not asdict: its deep copies cost ms per agent
        agents = [{name: getattr(a, name) for name in fields} for a in self.agents.values()]
        first_segments = {group: list(best) for group, best in self.first_segments.items()}
        return {"counters": dict(self.counters), "agents": agents, "first_segments": first_segments}

    def _rank_key(self, agent: AgentState) -> tuple:
        """Lower is worse: unscored agents rank below scored ones, then by score, then newer below older."""
        return (agent.score is not None, agent.score if agent.score is not None else 0.0, -agent.id)

    def _grown(self, count: int, active: list[AgentState]) -> list[AgentState]:
        """`count` agents to make active: each slot goes to the group then furthest below its weight among the
        active agents, and to that group's best retired agent, or to a new one where it has none. Counting the active
        ones, not every agent ever made, is what gives a group added on resume (or weights edited then) its share: a
        resumed run's agents all come back retired, and would otherwise fill the pool with the old groups. (The groups
        are counted once, so a pool of 100,000 grows in seconds: counting per agent took hours.)"""
        counts = Counter(a.group for a in active)
        retired: dict[str, list[AgentState]] = {g.name: [] for g in self.config.groups}
        for agent in sorted((a for a in self.agents.values() if not a.active), key=self._rank_key):
            retired.get(agent.group, []).append(agent)  # worst first: pop() gives the best
        back: list[AgentState] = []
        fresh: list[GroupConfig] = []
        for _ in range(count):
            group = min(self.config.groups, key=lambda g: (counts[g.name] + 1) / g.weight)  # keep the weights
            counts[group.name] += 1
            if retired[group.name]:
                back.append(retired[group.name].pop())
            else:
                fresh.append(group)
        return back + self._new_agents(fresh)

    def _new_agents(self, groups: list[GroupConfig]) -> list[AgentState]:
        """A new agent of each of `groups`, drawn from its prior."""
        first = max(self.agents, default=-1) + 1
        for agent_id, group in enumerate(groups, start=first):
            seeded = random.Random(f"{self.config.run.seed}/agent/{agent_id}")
            self.agents[agent_id] = AgentState(id=agent_id, group=group.name,
                                               hparams=sample_hparams(group.hparams, group.search, seeded))
        return [self.agents[agent_id] for agent_id in range(first, first + len(groups))]
