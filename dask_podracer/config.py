"""Run configuration: TOML -> frozen dataclasses, validated before anything is submitted.

Every error is a `ConfigError` whose one-line message names the file and the
field (`tournament.pool_size`, `hparams.actor_lr`, ...), so the CLI can print it
and exit without a traceback and without creating or touching a store.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import random
import re
import tomllib
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dask_podracer.agents import algorithm_info, registered_algorithms
from dask_podracer.agents.actor_learner import WEIGHTS_EVERY_PAST_LAG, learns_from_actors
from dask_podracer.agents.apex import ApexAgent
from dask_podracer.envs import canonical_env_name, registered_envs
from dask_podracer.envs.registry import IMPORT_PATH, unknown_env
from dask_podracer.search import Prior, parse_prior, sample_hparams
from dask_podracer.typed_fields import (ConfigError, coerce, dataclass_from, describe, did_you_mean, field_hints,
                                        require)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    env: str
    """Env name: a registered one such as "Pendulum-v1" (see `dask_podracer.envs.registered_envs()`), a
    gymnasium id as "gym:<id>" (or "gym:<module>:<id>" to import the module that registers it), an mjlab task
    as "mjlab:<task id>" (in a venv of its own, docs/envs.md), or your own VecEnv class or factory, or
    gymnasium Env class, as "<module>:<name>" (docs/envs.md, "Your own environment")."""
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the env's constructor, e.g. `{ vectorization_mode = "async" }` for a gymnasium env
    or your own env's parameters; checkpoints record them with the env's name."""
    eval_env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments that the evaluation env (the one that scores each segment) is built with on top of
    `env_kwargs`, e.g. `{ period = "validation" }` so a trading env scores agents on dates they never train on."""
    algorithm: str | None = None
    """Algorithm name, e.g. "sac" or "ppo"; omit it when the config declares [[groups]]."""
    name: str = "tournament"
    """Name of the run; the default store is runs/<name>.zarr."""
    store: str = ""
    """Store path or URL; empty means runs/<name>.zarr in the current directory."""
    budget: str = "5m"
    """Wall-clock budget of one invocation, e.g. "90s", "10m", "1h30m"."""
    target_return: float | None = None
    """Stop as soon as a segment's evaluation return reaches this."""
    max_segments: int = 0
    """Stop after this many finished segments in one invocation; 0 means no limit."""
    seed: int = 0
    """Seeds the generator and every segment (segment i uses a seed derived from it); 0 to 2**32 - 1."""

    def __post_init__(self) -> None:
        _check_field_types(self, "run")
        known = self.env in registered_envs() or self.env.startswith("gym:") or bool(IMPORT_PATH.fullmatch(self.env))
        if not known:
            raise ConfigError(f"run.env: {unknown_env(self.env)}")
        try:
            object.__setattr__(self, "env", canonical_env_name(self.env))
        except (ValueError, ImportError, TypeError) as e:  # an import path that does not lead to a VecEnv
            raise ConfigError(f"run.env: {e}") from None
        for field in ("env_kwargs", "eval_env_kwargs"):
            _check_kwargs(getattr(self, field), f"run.{field}")
            object.__setattr__(self, field, dict(getattr(self, field)))
        if self.algorithm is not None:
            _check_algorithm(self.algorithm, "run.algorithm")
        check_run_name(self.name, "run.name")
        parse_duration(self.budget, "run.budget")
        # each segment's seed is derived as seed * 1_000_003 + its index: torch's generator takes 64 bits
        require(isinstance(self.seed, int) and 0 <= self.seed < 2**32, "run.seed", "an integer from 0 to 2**32 - 1",
                self.seed)
        require(self.max_segments >= 0, "run.max_segments", ">= 0", self.max_segments)
        if self.target_return is not None:
            require(math.isfinite(self.target_return), "run.target_return", "a finite number", self.target_return)

    @property
    def budget_seconds(self) -> float:
        return parse_duration(self.budget, "run.budget")


@dataclasses.dataclass(frozen=True)
class TournamentConfig:
    strategy: str = "tournament"
    """How agents exploit the leaderboard: tournament, pbt (truncation), generational or random (search)."""
    pool_size: int = 0
    """Agents training at once; 0 follows the cluster's slots as it grows and shrinks."""
    pending: int = 0
    """Segments kept waiting beyond the free slots, so an adaptive cluster (`cluster.adapt()`) sees demand."""
    leaderboard_size: int = 8
    """Entries the leaderboard keeps (K): a result enters if it beats the K-th."""
    fresh_agents: int = 2
    """tournament: new agents start from scratch until the leaderboard holds this many entries of their group."""
    selection: str = "tournament"
    """How the tournament picks an entry from the top of the board: tournament or softmax."""
    tournament_size: int = 2
    """Entries drawn per tournament pick; the best of them is chosen."""
    softmax_temperature: float = 1.0
    """Softmax selection: temperature over scores standardised by their spread."""
    select_from_top: int = 4
    """Picks are drawn from this many best entries."""
    adopt_margin: float = 0.0
    """tournament: an agent adopts a picked entry only if its score beats the agent's own latest by more than
    this many of the entry's standard errors (from the spread of its evaluation returns). The board keeps the
    luckiest evaluations, so 0 lets a leader abandon its line (and its hyper-parameters) for a child whose
    score was merely lucky; about 2 keeps a line unless it is clearly beaten."""
    progress_margin: float = 0.0
    """tournament: an agent adopts a picked entry only if the entry also beats every first segment of its group
    (the best score a fresh line had after one segment) by more than this many standard errors (the entry's and
    that first segment's, combined): exploit what a line has learned, not a lucky evaluation of one that has
    learned nothing. 0 turns the check off. The board is the best of many evaluations, so a line that never
    learns can reach about 2 standard errors above the first segments by luck; 3 rarely does."""
    ready: int = 1
    """Segments an agent trains on its line (since it started fresh or adopted) before it may abandon it: by
    adopting an entry (tournament) or copying a peer (pbt, generational). PBT's "ready": a line needs a few
    segments to show what its hyper-parameters can do, and 1 judges them on a single (first) segment."""
    quantile: float = 0.25
    """pbt and generational: the bottom fraction copies an agent from the top fraction."""
    perturb: tuple[str, ...] = ()
    """Hyper-parameters a child changes (must be tunable ones of its algorithm; perturbed or resampled)."""
    perturb_factor: float = 1.25
    """A perturbed number is multiplied by this or divided by it, with equal chance (an int moves by at least 1);
    a categorical one (a bool, a string) moves to another of its options."""
    resample_probability: float = 0.0
    """Chance that a perturbed hyper-parameter is redrawn from its [search] prior instead."""
    replay: str = "copy"
    """What a child takes of its parent's replay buffer: copy (every checkpoint holds its whole buffer),
    share (the same transitions, but each checkpoint stores only those its segment collected and refers to
    its parent's for the rest: storage grows with the steps trained, not with steps times checkpoints), or
    reset (an adopting child starts empty)."""
    retries: int = 0
    """Times Dask re-runs a segment that raised before it is recorded as failed (every exception counts, a
    diverged segment's too). A worker that dies mid-segment is cluster.allowed_failures' business."""

    def __post_init__(self) -> None:
        _check_field_types(self, "tournament")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"tournament.strategy must be one of {list(STRATEGIES)}, got {self.strategy!r}"
                              f"{did_you_mean(self.strategy, list(STRATEGIES))}")
        require(self.pool_size >= 0, "tournament.pool_size", ">= 0", self.pool_size)
        require(self.pending >= 0, "tournament.pending", ">= 0", self.pending)
        require(self.leaderboard_size >= 1, "tournament.leaderboard_size", ">= 1", self.leaderboard_size)
        require(self.fresh_agents >= 1, "tournament.fresh_agents", ">= 1", self.fresh_agents)
        require(self.selection in ("tournament", "softmax"), "tournament.selection", "tournament or softmax",
                self.selection)
        require(self.tournament_size >= 1, "tournament.tournament_size", ">= 1", self.tournament_size)
        require(self.softmax_temperature > 0, "tournament.softmax_temperature", "> 0", self.softmax_temperature)
        require(self.select_from_top >= 1, "tournament.select_from_top", ">= 1", self.select_from_top)
        require(self.adopt_margin >= 0, "tournament.adopt_margin", ">= 0", self.adopt_margin)
        require(self.progress_margin >= 0, "tournament.progress_margin", ">= 0", self.progress_margin)
        require(self.ready >= 1, "tournament.ready", ">= 1", self.ready)
        require(0 < self.quantile <= 0.5, "tournament.quantile", "in (0, 0.5]", self.quantile)
        require(self.perturb_factor >= 1.0, "tournament.perturb_factor", ">= 1", self.perturb_factor)
        require(0 <= self.resample_probability <= 1, "tournament.resample_probability", "in [0, 1]",
                self.resample_probability)
        require(self.replay in ("copy", "share", "reset"), "tournament.replay", "copy, share or reset", self.replay)
        require(self.retries >= 0, "tournament.retries", ">= 0", self.retries)


STRATEGIES = ("tournament", "pbt", "generational", "random")
"""The names `tournament.strategy` accepts, listed once: population/strategies.py implements each, in this order."""


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    """Agents of one algorithm and one hyper-parameter distribution; a population may mix several."""

    name: str
    """Name of the group, shown in the leaderboard."""
    algorithm: str
    """Algorithm of every agent of the group."""
    hparams: Mapping[str, Any]
    """The algorithm's hyper-parameters, every field filled in (defaults included)."""
    search: Mapping[str, Prior] = dataclasses.field(default_factory=dict)
    """Priors that fresh agents draw hyper-parameters from."""
    weight: float = 1.0
    """Share of the agents that belong to this group (relative to the other groups' weights)."""
    env_steps: int = 0
    """Env steps per segment for this group; 0 uses segment.env_steps."""

    def __post_init__(self) -> None:
        # what a group built in Python could get wrong, checked as `_group` checks a file's (its priors are
        # checked there only: a Prior is made by parse_prior, from a file's or a dict's table)
        prefix = f"groups[{self.name!r}]"
        _check_field_types(self, prefix)
        check_run_name(self.name, f"{prefix}.name")  # it names the group's agents, tables and directories
        _check_algorithm(self.algorithm, f"{prefix}.algorithm")
        require(self.weight > 0 and math.isfinite(self.weight), f"{prefix}.weight", "> 0", self.weight)
        require(self.env_steps >= 0, f"{prefix}.env_steps", ">= 0", self.env_steps)
        checked = dataclass_from(algorithm_info(self.algorithm).config_cls, _table(self.hparams, f"{prefix}.hparams"),
                                 f"{prefix}.hparams")
        object.__setattr__(self, "hparams", dataclasses.asdict(checked))  # every field filled in, as `_group`'s
        _check_finite(self.hparams, f"{prefix}.hparams")


@dataclasses.dataclass(frozen=True)
class SegmentConfig:
    env_steps: int = 4000
    """Env steps per segment (summed over envs); 0 means only `seconds` bounds it."""
    seconds: float = 0.0
    """Seconds per segment; 0 means only `env_steps` bounds it."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes after each segment, run as one batch."""
    device: str = "auto"
    """"auto" uses the worker's GPU if it has one, else the CPU; or a torch device such as "cpu"."""
    torch_threads: int = 1
    """CPU threads torch may use inside one segment; without GPUs the embedded cluster then starts one worker per
    this many cores (`cluster.workers = 0`)."""

    def __post_init__(self) -> None:
        _check_field_types(self, "segment")
        require(self.env_steps >= 0, "segment.env_steps", ">= 0", self.env_steps)
        require(self.seconds >= 0, "segment.seconds", ">= 0", self.seconds)
        require(self.env_steps > 0 or self.seconds > 0, "segment.env_steps",
                "> 0 unless segment.seconds is set", self.env_steps)
        require(self.eval_episodes >= 1, "segment.eval_episodes", ">= 1", self.eval_episodes)
        require(self.device == "auto" or bool(re.fullmatch(r"cpu|cuda(:\d+)?|mps", self.device)),
                "segment.device", '"auto", "cpu", "cuda" or "cuda:N"', self.device)
        require(self.torch_threads >= 1, "segment.torch_threads", ">= 1", self.torch_threads)


GPU_SHARING = ("processes", "threads")


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    workers: int = 0
    """Worker processes of the embedded LocalCluster; 0 means one per GPU, or without GPUs one per
    `segment.torch_threads` CPU cores."""
    threads_per_worker: int = 1
    """Threads of each worker process (segments it runs at once is its slot count)."""
    dashboard_address: str = "127.0.0.1:8787"
    """Where the embedded cluster's dashboard listens."""
    capacity_timeout: float = 120.0
    """Seconds a run waits with no worker offering a slot before it stops with an error."""
    resource: str = "auto"
    """What a segment asks of a worker: "GPU", "CPU" (one unit), "none", or "auto" (GPU if some worker
    has one, else CPU if advertised, else one thread). Name it for an adaptive cluster that starts empty."""
    shrink_delay: float = 15.0
    """Seconds the cluster's capacity must stay lower before the pool shrinks and cancels its lowest-ranked
    agents (a worker that died is usually restarted by its nanny within seconds; its segment is rerun)."""
    allowed_failures: int = 3
    """Worker deaths a segment may go through before it is recorded as failed (KilledWorker); Dask reruns it
    from its parent each time. Sets the embedded cluster's scheduler; a remote scheduler keeps its own
    `distributed.scheduler.allowed-failures`."""
    segments_per_gpu: int = 1
    """Segments that share one GPU at once (an H100 is nearly idle under one small agent). How they share it is
    `gpu_sharing`'s choice; on a machine without GPUs it changes nothing (docs/scaling.md, "Several segments per
    GPU")."""
    gpu_sharing: str = "processes"
    """"processes": `segments_per_gpu` worker processes per GPU, each advertising GPU=1 (each its own CUDA context);
    "threads": one worker per GPU advertising GPU=1 with `segments_per_gpu` threads, each segment asking for
    GPU=1/segments_per_gpu (one CUDA context, shared, and the GIL). On a cluster of your own the workers you start
    decide it; "threads" there only sets the share each segment asks for (docs/scaling.md). Threads cannot capture
    CUDA graphs side by side, so there `compile = "auto"` runs eagerly and "on" is refused."""
    mps: bool = False
    """Run NVIDIA's MPS daemon while the embedded cluster runs on GPUs (started before its workers, stopped after,
    unless one was already running), so that processes sharing a GPU run their kernels side by side rather than in
    turns: 8 members on one GPU made 6.4x one member's env steps/s with it, 2.3-2.5x without. Needs the driver's
    `nvidia-cuda-mps-control`; ignored without GPUs; a cluster of your own starts its daemons itself
    (docs/scaling.md)."""

    @property
    def threads_share_a_gpu(self) -> bool:
        """Whether several segments share one GPU as threads of one worker process."""
        return self.gpu_sharing == "threads" and self.segments_per_gpu > 1

    def __post_init__(self) -> None:
        _check_field_types(self, "cluster")
        require(self.resource in ("auto", "GPU", "CPU", "none"), "cluster.resource", '"auto", "GPU", "CPU" or "none"',
                self.resource)
        require(self.capacity_timeout > 0, "cluster.capacity_timeout", "> 0", self.capacity_timeout)
        require(self.shrink_delay >= 0, "cluster.shrink_delay", ">= 0", self.shrink_delay)
        require(self.allowed_failures >= 0, "cluster.allowed_failures", ">= 0", self.allowed_failures)
        require(self.workers >= 0, "cluster.workers", ">= 0", self.workers)
        require(self.threads_per_worker >= 1, "cluster.threads_per_worker", ">= 1", self.threads_per_worker)
        require(self.segments_per_gpu >= 1, "cluster.segments_per_gpu", ">= 1", self.segments_per_gpu)
        require(self.gpu_sharing in GPU_SHARING, "cluster.gpu_sharing", '"processes" or "threads"', self.gpu_sharing)
        require(_is_listen_address(self.dashboard_address), "cluster.dashboard_address",
                '"HOST:PORT", ":PORT" or "PORT", PORT 0-65535 (0: any free port)', self.dashboard_address)


@dataclasses.dataclass(frozen=True)
class ActorsConfig:
    """[actors]: each segment is one learner task plus `workers` actor tasks (docs/actor_learner.md)."""

    workers: int = 2
    """Actor tasks per segment; a segment then takes 1 + workers of the cluster's slots."""
    max_policy_lag: int = 4
    """Rollouts whose policy lag (learner version minus the version that acted) passes this are dropped.
    IMPALA only: an Ape-X (replay) learner keeps every transition, its replay ratio set by hparams.utd_ratio."""
    reuse: int = 1
    """Times the learner may train on one rollout (sample reuse). IMPALA only, as max_policy_lag."""
    weights_every: int = 1
    """The learner sends its policy to the actors after every this many gradient steps."""
    connect_timeout: float = 120.0
    """Seconds a learner may go with no actor connected (waiting for slots, or after losing all), or with actors
    connected and no rollout from any (stalled), before its segment fails; also the longest an actor waits on a
    silent learner, or on a send its learner does not read, before it ends and frees its slot."""
    max_in_flight: int = 2
    """Rollouts an actor may have sent that the learner has not taken in yet: the actor waits for the learner
    before it collects another, so what the learner trains on was acted with recent weights. 0: no bound of
    its own (the socket buffers and the learner's inbox push back, a few kilobytes each way: a learner its
    actors outpace then drops stale rollouts and waits for fresh ones)."""

    def __post_init__(self) -> None:
        _check_field_types(self, "actors")
        require(self.workers >= 1, "actors.workers", ">= 1", self.workers)
        require(self.max_in_flight >= 0, "actors.max_in_flight", ">= 0 (0: no bound)", self.max_in_flight)
        require(self.max_policy_lag >= 1, "actors.max_policy_lag", ">= 1", self.max_policy_lag)
        require(self.reuse >= 1, "actors.reuse", ">= 1", self.reuse)
        require(self.weights_every >= 1, "actors.weights_every", ">= 1", self.weights_every)
        require(self.connect_timeout > 0, "actors.connect_timeout", "> 0", self.connect_timeout)

    @property
    def slots_per_segment(self) -> int:
        return 1 + self.workers


@dataclasses.dataclass(frozen=True)
class LearnersConfig:
    """[learners]: each segment is `workers` learner tasks that train one agent, averaging gradients every step
    (docs/actor_learner.md, "Several learners")."""

    workers: int = 2
    """Learner tasks per segment, each stepping its own envs; a segment then takes this many of the cluster's slots.
    1 is a plain one-task segment."""
    connect_timeout: float = 120.0
    """Seconds the learners may take to meet (waiting for slots included), and the longest any step may wait for
    the slowest learner, before the segment fails."""

    def __post_init__(self) -> None:
        _check_field_types(self, "learners")
        require(self.workers >= 1, "learners.workers", ">= 1", self.workers)
        require(self.connect_timeout > 0, "learners.connect_timeout", "> 0", self.connect_timeout)


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    keep_per_agent: int = 2
    """Checkpoints each live agent keeps: its newest ones (at least 1, the one it trains on from). An older one
    is deleted once nothing else holds it: the leaderboard, a segment in flight (its parent), a retired
    agent (its latest), a kept checkpoint's shared replay rows, or a pin (docs/store-format.md, "Retention").
    Its history record, and so its place in the lineage, stays."""
    retention: bool = True
    """false keeps every checkpoint: the store then grows with every segment."""

    def __post_init__(self) -> None:
        _check_field_types(self, "store")
        require(self.keep_per_agent >= 1, "store.keep_per_agent",
                ">= 1 (an agent trains on from its newest checkpoint; store.retention = false keeps all)",
                self.keep_per_agent)


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    tensorboard: str = ""
    """A directory to write TensorBoard event files to as the run goes (one run per agent); empty writes none.
    The client writes them from the history, never a worker. Needs the `tensorboard` extra."""
    mlflow: str = ""
    """An MLflow tracking URI (a local `mlruns` directory or a server) to log the same to; empty logs nothing.
    Needs the `mlflow` extra."""

    def __post_init__(self) -> None:
        _check_field_types(self, "logging")


@dataclasses.dataclass(frozen=True)
class Config:
    run: RunConfig
    tournament: TournamentConfig
    segment: SegmentConfig
    cluster: ClusterConfig
    groups: tuple[GroupConfig, ...]
    """The population's groups: one from run.algorithm + [hparams] + [search], or the [[groups]] tables."""
    source: str = "<config>"
    """Where the config came from, for messages."""
    settings: tuple[str, ...] = ()
    """The `--set SECTION.KEY=VALUE` changes made to the file's values, in order; the run state records them."""
    file: str | None = None
    """The absolute path of the file it was read from (None: built in Python). The run state records it, so that
    `podracer status` names the file from any directory (`source` is the path as given, relative or not)."""
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)
    """Retention of the store's checkpoints ([store]); where the store is, is run.store."""
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    """Where finished segments are logged besides the store ([logging]): TensorBoard, MLflow."""
    actors: ActorsConfig | None = None
    """[actors]: segments of a learner task and actor tasks; None (no [actors] section): one task each."""
    learners: LearnersConfig | None = None
    """[learners]: segments of several learner tasks averaging gradients; None (no [learners] section): one."""

    def __post_init__(self) -> None:
        """A config built or changed in Python (`dataclasses.replace`) is held to what one read from a file is,
        as far as its sections go together; each section checks its own fields."""
        for name, cls in (*_SECTIONS.items(), ("actors", ActorsConfig | None), ("learners", LearnersConfig | None)):
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"{name} must be a {_class_names(cls)}, got {type(getattr(self, name)).__name__}")
        groups = self.groups
        require(isinstance(groups, tuple) and len(groups) > 0 and all(isinstance(g, GroupConfig) for g in groups),
                "groups", "a non-empty tuple of GroupConfig", groups)
        names = [g.name for g in groups]
        require(len(set(names)) == len(names), "groups", "named differently", names)
        if self.run.algorithm is not None and (len(groups) != 1 or groups[0].algorithm != self.run.algorithm):
            raise ConfigError(f"run.algorithm is {self.run.algorithm!r} and the config's groups train "
                              f"{', '.join(repr(g.algorithm) for g in groups)}: to change the algorithm, build the "
                              f"config again (its hyper-parameters change with it)")
        for group in groups:
            tunable = algorithm_info(group.algorithm).tunable
            bad = [p for p in self.tournament.perturb if p not in tunable]
            if bad:
                raise ConfigError(f"tournament.perturb: {bad[0]!r} is not a tunable hyper-parameter of "
                                  f"{group.algorithm} (tunable: {', '.join(tunable)})")
            redrawn = self.tournament.resample_probability > 0
            stuck = [p for p in self.tournament.perturb if isinstance(group.hparams.get(p), float)
                     and group.hparams[p] == 0 and not (p in group.search and redrawn)]
            if stuck:  # ppo's ent_coef is 0.0 by default: `perturb = ["ent_coef"]` changed nothing, silently
                where = f"group {group.name!r}'s hparams" if len(groups) > 1 else "hparams"
                raise ConfigError(f"tournament.perturb: {stuck[0]!r} is 0.0 in {where}, and multiplying by "
                                  f"perturb_factor never moves 0: give it another value, or a [search] prior with "
                                  f"tournament.resample_probability > 0")

    @property
    def slots_per_segment(self) -> int:
        """The cluster slots one segment takes at once: its learners, and its actors."""
        if self.actors is not None:
            return self.actors.slots_per_segment
        return self.learners.workers if self.learners is not None else 1

    @property
    def hparams(self) -> Mapping[str, Any]:
        """The first group's hyper-parameters (the only group's, in a single-algorithm config)."""
        return self.groups[0].hparams

    def group(self, name: str) -> GroupConfig:
        return next(g for g in self.groups if g.name == name)

    @property
    def store_url(self) -> str:
        return self.run.store or str(Path("runs") / f"{self.run.name}.zarr")

    def with_logging(self, **fields: str) -> Config:
        """A copy whose [logging] has these fields changed, e.g. `with_logging(tensorboard="tb")`."""
        _check_field_names(LoggingConfig, fields, "logging")
        return dataclasses.replace(self, logging=dataclasses.replace(self.logging, **fields))

    def replace(self, **fields: Any) -> Config:
        """A copy with some run fields changed, e.g. `replace(store=..., budget="90s")`, re-validated."""
        _check_field_names(RunConfig, fields, "run")
        try:
            return dataclasses.replace(self, run=dataclasses.replace(self.run, **fields))
        except ValueError as e:
            raise ConfigError(f"{self.source}: {e}") from None


_SECTIONS = {"run": RunConfig, "tournament": TournamentConfig, "segment": SegmentConfig, "cluster": ClusterConfig,
             "store": StoreConfig, "logging": LoggingConfig}


def load_config(path: str | Path, settings: Sequence[str] = ()) -> Config:
    """Read and validate a TOML config file, with `settings` ("hparams.gamma=0.97", ...) changed first."""
    if not isinstance(path, (str, Path)):
        raise ConfigError(f"a config is read from a path, got {describe(path)}")
    if isinstance(settings, str) or not all(isinstance(text, str) for text in settings):
        raise ConfigError(f"settings must be a list of 'SECTION.KEY=VALUE' strings, got {describe(settings)}")
    path = Path(path)
    try:
        # utf-8-sig: a byte-order mark (Windows' Notepad writes one) is dropped, not "Invalid statement" at 1:1
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise ConfigError(f"cannot read config {str(path)!r}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot read config {str(path)!r}: not UTF-8 text (byte {e.start}), as TOML must be") \
            from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    source = str(path) if not settings else f"{path} with --set"
    config = config_from_dict(apply_settings(data, settings), source=source, default_name=path.stem)
    return dataclasses.replace(config, settings=tuple(settings), file=str(path.resolve()))


def parse_setting(text: str) -> tuple[tuple[str, ...], Any]:
    """`"hparams.hidden=[64, 64]"` -> (("hparams", "hidden"), [64, 64]).

    The value is a TOML value; one that is not (`run.env=MujocoAnt-v5`) is taken as the string it is, so
    names need no shell-quoted quotes. Types are checked later, with the rest of the config.
    """
    key, sep, value = text.partition("=")
    key = re.sub(r"\[(\d+)\]", r".\1", key)  # groups[1].hparams.gamma, as config errors name it
    path = tuple(part.strip() for part in key.split("."))
    if not sep or not all(path):
        raise ConfigError(f"--set {text}: expected SECTION.KEY=VALUE, e.g. hparams.gamma=0.97")
    try:
        return path, tomllib.loads(f"value = {value}")["value"]
    except tomllib.TOMLDecodeError:
        return path, value.strip()


def apply_settings(data: Mapping[str, Any], settings: Sequence[str]) -> dict[str, Any]:
    """A copy of the parsed TOML with each "SECTION.KEY=VALUE" set, tables made as needed; a number or a group's
    name picks one of a list of tables (`groups.0.hparams.actor_lr=3e-4`, `groups[0]...`, `groups.sac...`). The
    result is validated as a file is."""
    out = copy.deepcopy(dict(data))
    for text in settings:
        path, value = parse_setting(text)
        if path[0] == "groups" and len(path) > 1 and "groups" not in out:  # a table made here would mislead later
            raise ConfigError(f"--set {text}: this config declares no [[groups]]; its one group's settings are "
                              f"hparams.KEY=... and search.KEY=...")
        node: Any = out
        for depth, part in enumerate(path[:-1]):
            where = ".".join(path[:depth + 1])
            if isinstance(node, list):
                node = _list_item(node, part, f"--set {text}: {'.'.join(path[:depth])}")
            else:
                node = node.setdefault(part, {})
            if not isinstance(node, (dict, list)):
                raise ConfigError(f"--set {text}: {where} is {describe(node)}, not a table")
        if not isinstance(node, dict):
            where = ".".join(path[:-1])
            raise ConfigError(f"--set {text}: {where} is a list; set it whole ({where}=[...]) or a key of one of "
                              f"its tables ({where}.0.KEY=...)")
        node[path[-1]] = value
    return out


def config_from_dict(data: Mapping[str, Any], source: str = "<config>", default_name: str = "tournament") -> Config:
    """Validate a nested mapping (the parsed TOML) into a `Config`."""
    try:
        return _build(data, source, default_name)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def _check_keys_in_their_section(raw: Mapping[str, Any], section: str, run: Any) -> None:
    """A key that is another section's (`max_segments` under [tournament], `gamma` under [segment]) is named with
    the section it belongs in; a plain "unknown key" with the section's own fields left the user to search."""
    own = {f.name for f in dataclasses.fields(_SECTIONS[section])}
    algorithm = run.get("algorithm", RunConfig.algorithm) if isinstance(run, Mapping) else None
    hparams = _hparam_names(algorithm)
    for key in raw:
        if key in own:
            continue
        owners = _sections_with(key)
        if owners:
            raise ConfigError(f"unknown key {section}.{key}: it is a key of [{owners[0]}], not of [{section}]")
        if key in hparams:
            raise ConfigError(f"unknown key {section}.{key}: it is a hyper-parameter of {algorithm}, set in "
                              f"[hparams], not in [{section}]")


def _hparam_names(algorithm: Any) -> set[str]:
    """The hyper-parameters of `algorithm` (none for a value that names no registered algorithm: refused later)."""
    if algorithm not in registered_algorithms():
        return set()
    return {f.name for f in dataclasses.fields(algorithm_info(algorithm).config_cls)}


def _sections_with(key: str) -> list[str]:
    """The sections that have a key `key` ([run], [segment], ...)."""
    return [name for name, cls in _SECTIONS.items() if key in {f.name for f in dataclasses.fields(cls)}]


def _key_outside_sections(key: str) -> str:
    """Say where a key written above every [section] line belongs (TOML puts it at the top level)."""
    owners = _sections_with(key)
    if owners:
        return f"key {key!r} is outside any section: it belongs in [{owners[0]}] (write it below a [{owners[0]}] line)"
    return (f"key {key!r} is outside any section: every key belongs below a [section] line ([run], [tournament], "
            f"[segment], [hparams], ...)")


def _build(data: Mapping[str, Any], source: str, default_name: str) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError(f"a config is a table of sections (run, tournament, ...), got {describe(data)}")
    unknown = sorted(set(data) - set(_SECTIONS) - {"hparams", "search", "groups", "actors", "learners"})
    if unknown:
        known = [*_SECTIONS, "hparams", "search", "groups", "actors", "learners"]
        if not isinstance(data[unknown[0]], (Mapping, list)):
            raise ConfigError(_key_outside_sections(unknown[0]))
        raise ConfigError(f"unknown section {unknown[0]!r}{did_you_mean(unknown[0], known)} (known: "
                          f"{', '.join(known)})")
    sections = {}
    for name, cls in _SECTIONS.items():
        raw = _table(data.get(name, {}), name)
        _check_keys_in_their_section(raw, name, data.get("run", {}))
        if name == "run":
            raw = {"name": default_name, **raw}
        sections[name] = dataclass_from(cls, raw, name)
    run = sections["run"]
    if "groups" in data:
        raw_groups = data["groups"]
        if not isinstance(raw_groups, list) or not raw_groups:
            raise ConfigError(f"groups must be a non-empty list of tables ([[groups]]), got {describe(raw_groups)}")
        for single in ("hparams", "search"):
            if single in data:
                raise ConfigError(f"[{single}] belongs inside each [[groups]] table when [[groups]] are declared")
        if run.algorithm is not None:
            raise ConfigError("run.algorithm must be left out when [[groups]] are declared")
        groups = tuple(_group(_table(g, f"groups[{i}]"), f"groups[{i}]") for i, g in enumerate(raw_groups))
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise ConfigError(f"groups: names must differ, got {names}")
    else:
        if run.algorithm is None:
            raise ConfigError("missing key run.algorithm (or declare [[groups]])")
        single = {"algorithm": run.algorithm, "hparams": data.get("hparams", {}), "search": data.get("search", {})}
        groups = (_group(single, ""),)
    _check_gpu_threads(groups, sections["cluster"], sections["segment"], "groups" in data)
    if "actors" in data and "learners" in data:  # before either section's own checks, which would mislead
        raise ConfigError("learners: [learners] with [actors] is not built yet (several learners each with actors); "
                          "keep one of the two")
    return Config(**sections, groups=groups, source=source, actors=_actors(data, groups),
                  learners=_learners(data, groups, sections["cluster"]))


def _check_gpu_threads(groups: tuple[GroupConfig, ...], cluster: ClusterConfig, segment: SegmentConfig,
                       grouped: bool) -> None:
    """Segments that share a GPU as threads of one process cannot capture CUDA graphs: a capture puts the
    process's one CUDA random-number generator in capture mode, and another thread's draw then fails the segment
    ("Offset increment outside graph capture", seen on an H100, docs/benchmarks.md). "auto" runs eagerly there
    (`SegmentSpec.graphs_allowed`); an explicit "on" is refused before any work."""
    if not cluster.threads_share_a_gpu or segment.device == "cpu":
        return
    for i, group in enumerate(groups):
        if group.hparams.get("compile", "off") == "on":
            prefix = f"groups[{i}].hparams" if grouped else "hparams"
            raise ConfigError(f'{prefix}.compile must be "auto" or "off" with cluster.gpu_sharing = "threads" and '
                              f'segments_per_gpu > 1 (threads of one process cannot capture CUDA graphs side by '
                              f'side); or use gpu_sharing = "processes", got {group.hparams.get("compile")!r}')


def _actors(data: Mapping[str, Any], groups: tuple[GroupConfig, ...]) -> ActorsConfig | None:
    """[actors], when the config has one: every group's algorithm must be able to learn from actor tasks."""
    if "actors" not in data:
        return None
    actors = dataclass_from(ActorsConfig, _table(data["actors"], "actors"), "actors")
    pending = _table(data.get("tournament", {}), "tournament").get("pending", 0)
    # a waiting learner could take the slot its running peers' actors wait for
    require(pending == 0, "tournament.pending", "0 with [actors]", pending)
    for i, group in enumerate(groups):
        if not learns_from_actors(group.algorithm):
            able = [a for a in registered_algorithms() if learns_from_actors(a)]
            raise ConfigError(f"actors: group {group.name!r} uses {group.algorithm!r}, which cannot learn from "
                              f"actor tasks (algorithms that can: {', '.join(able)}); remove [actors] or change it")
        replays = issubclass(algorithm_info(group.algorithm).factory, ApexAgent)  # keeps every rollout, at any lag
        if not replays and actors.weights_every > actors.max_policy_lag + 1:
            raise ConfigError(WEIGHTS_EVERY_PAST_LAG.format(limit=actors.max_policy_lag + 1,
                                                            weights_every=actors.weights_every))
        # each actor's returns would interleave in the learner's one running statistic of discounted returns
        prefix = f"groups[{i}].hparams" if "groups" in data else "hparams"
        if group.hparams.get("normalize_rewards"):
            raise ConfigError(f"{prefix}.normalize_rewards must be false with [actors] (the actors' returns would "
                              f"interleave in the learner's statistics)")
        if replays:  # each actor's chunk enters the learner's replay whole
            chunk = group.hparams["num_envs"] * group.hparams["apex_send_steps"]
            require(group.hparams["buffer_size"] >= chunk, f"{prefix}.buffer_size",
                    f">= num_envs * apex_send_steps (= {chunk}) with [actors]", group.hparams["buffer_size"])
    return actors


def _learners(data: Mapping[str, Any], groups: tuple[GroupConfig, ...], cluster: ClusterConfig) -> LearnersConfig | None:
    """[learners], when the config has one: every group's algorithm must keep in step on several learners, each
    learner needs a worker process of its own (torch.distributed has one process group per process), and the
    learners of a segment must all run at once."""
    if "learners" not in data:
        return None
    learners = dataclass_from(LearnersConfig, _table(data["learners"], "learners"), "learners")
    pending = _table(data.get("tournament", {}), "tournament").get("pending", 0)
    require(pending == 0, "tournament.pending", "0 with [learners]", pending)  # as with [actors]
    require(cluster.threads_per_worker == 1, "cluster.threads_per_worker", "1 with [learners]",
            cluster.threads_per_worker)
    if cluster.threads_share_a_gpu:
        raise ConfigError('cluster.gpu_sharing must be "processes" with [learners] (a learner needs a worker process '
                          'of its own)')
    for i, group in enumerate(groups):
        if not algorithm_info(group.algorithm).data_parallel:
            able = [a for a in registered_algorithms() if algorithm_info(a).data_parallel]
            raise ConfigError(f"learners: group {group.name!r} uses {group.algorithm!r}, which cannot train with "
                              f"several learners (algorithms that can: {', '.join(able)}); remove [learners] or "
                              f"change it")
        # "auto" is taken as "off" by each learner (train/segment.py); "on" asked for what cannot be
        prefix = f"groups[{i}].hparams" if "groups" in data else "hparams"
        require(group.hparams.get("compile", "off") != "on", f"{prefix}.compile",
                '"auto" or "off" with [learners] (a captured update cannot average gradients inside its graph)',
                group.hparams.get("compile"))
    return learners


_GROUP_KEYS = ("name", "algorithm", "weight", "env_steps", "hparams", "search")


def _group(raw: Mapping[str, Any], prefix: str) -> GroupConfig:
    """One group: its algorithm's hyper-parameters validated, its priors parsed."""
    dot = f"{prefix}." if prefix else ""
    algorithm = raw.get("algorithm")
    hparam_names = _hparam_names(algorithm)
    for key in raw:
        if key in _GROUP_KEYS:
            continue
        if key in hparam_names:
            raise ConfigError(f"unknown key {dot}{key}: it is a hyper-parameter of {algorithm}; set it in a "
                              f"[groups.hparams] table below this [[groups]] line")
        owners = _sections_with(key)
        if owners:
            raise ConfigError(f"unknown key {dot}{key}: it is a key of [{owners[0]}], which all groups share")
        raise ConfigError(f"unknown key {dot}{key}{did_you_mean(key, _GROUP_KEYS)} (known: "
                          f"{', '.join(_GROUP_KEYS)})")
    if "algorithm" not in raw:
        raise ConfigError(f"missing key {dot}algorithm")
    algorithm = coerce(raw["algorithm"], str, f"{dot}algorithm")
    _check_algorithm(algorithm, f"{dot}algorithm")
    info = algorithm_info(algorithm)
    hparams = dataclasses.asdict(dataclass_from(info.config_cls, _table(raw.get("hparams", {}), f"{dot}hparams"),
                                                f"{dot}hparams"))
    _check_finite(hparams, f"{dot}hparams")
    hints = typing.get_type_hints(info.config_cls)
    search: dict[str, Prior] = {}
    edge_values: dict[str, list[Any]] = {}
    for key, prior in _table(raw.get("search", {}), f"{dot}search").items():
        if key not in hparams:
            raise ConfigError(f"unknown key {dot}search.{key}: not a hyper-parameter of {algorithm}"
                              f"{did_you_mean(key, list(hparams))}")
        try:
            search[key] = parse_prior(prior, f"{dot}search.{key}")
        except ValueError as e:
            raise ConfigError(str(e) if str(e).startswith(f"{dot}search") else f"{dot}search.{key}: {e}") from None
        for edge in search[key].edges(hparams[key]):  # what any agent may draw, not only one seeded draw
            try:
                value = coerce(edge, hints[key], key)
                _check_finite({key: value}, f"{dot}hparams")
                info.config_cls(**{**hparams, key: value})
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{dot}search.{key}: its prior can draw {edge!r}, and "
                                  f"{str(e).removeprefix(f'{dot}hparams.')}") from None
            edge_values.setdefault(key, []).append(value)
        try:  # and one draw, as sampling makes it
            info.config_cls(**sample_hparams(hparams, {key: search[key]}, random.Random(0)))
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{dot}search.{key}: {e}") from None
    _check_priors_together(info.config_cls, hparams, edge_values, f"{dot}search")
    weight = coerce(raw.get("weight", 1.0), float, f"{dot}weight")
    require(weight > 0, f"{dot}weight", "> 0", weight)
    env_steps = coerce(raw.get("env_steps", 0), int, f"{dot}env_steps")
    require(env_steps >= 0, f"{dot}env_steps", ">= 0", env_steps)
    name = coerce(raw.get("name", algorithm), str, f"{dot}name")
    check_run_name(name, f"{dot}name")  # it names the group's agents, tables and directories
    return GroupConfig(name=name, algorithm=algorithm, hparams=hparams, search=search, weight=weight,
                       env_steps=env_steps)


INFINITY_TURNS_OFF = frozenset({"rho_bar", "c_bar", "max_grad_norm", "target_noise_clip"})
"""Hyper-parameters that may be inf: each is a clip or truncation that infinity turns off. Any other inf (a learning
rate, a coefficient, a ratio) makes every segment fail after its cluster has started."""


PRIORS_CHECKED_TOGETHER = (2, 3)
"""How many priors at a time `_check_priors_together` draws at their edges: a rule between two hyper-parameters
(`eps_end <= eps_start`) or three (`num_minibatches` within `num_envs * rollout_steps`)."""


def _check_priors_together(config_cls: type, hparams: Mapping[str, Any], edge_values: Mapping[str, Sequence[Any]],
                           prefix: str) -> None:
    """Refuse priors that pass one by one and can draw values that fail together: each pair and each triple of
    priors at every combination of their edges (a rule between hyper-parameters is monotone in each, so the corners
    are where it breaks first). Agents drawing such values failed every one of their segments (17 in 100 with
    `eps_start = {uniform = [0.05, 1.0]}` and `eps_end = {uniform = [0.01, 0.5]}`)."""
    keys = sorted(edge_values)
    for size in PRIORS_CHECKED_TOGETHER:
        for names in itertools.combinations(keys, size):
            for values in itertools.product(*(edge_values[name] for name in names)):
                drawn = dict(zip(names, values))
                try:
                    config_cls(**{**hparams, **drawn})
                except (ValueError, TypeError) as e:
                    together = ", ".join(f"{name} = {value!r}" for name, value in drawn.items())
                    raise ConfigError(f"{prefix}: the priors of {', '.join(names)} can draw {together} together, "
                                      f"and {e}; narrow their ranges so that they "
                                      f"cannot") from None


def _check_finite(hparams: Mapping[str, Any], prefix: str) -> None:
    for name, value in hparams.items():
        numbers = value if isinstance(value, (list, tuple)) else (value,)
        finite = all(math.isfinite(v) for v in numbers if isinstance(v, float))
        require(finite or name in INFINITY_TURNS_OFF, f"{prefix}.{name}", "a finite number", value)


def _check_field_types(section: Any, prefix: str) -> None:
    """Each field of a config section against its type, as `coerce` checks a file's values, with the same
    conversions (an int where a number goes, a list where a tuple does): a section built in Python, or changed
    with `dataclasses.replace`, is held to what a file is before its own checks compare values."""
    hints = field_hints(type(section))
    for field in dataclasses.fields(section):
        value = coerce(getattr(section, field.name), hints[field.name], f"{prefix}.{field.name}")
        object.__setattr__(section, field.name, value)


def _check_field_names(cls: type, fields: Mapping[str, Any], prefix: str) -> None:
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = [name for name in fields if name not in known]
    if unknown:
        raise ConfigError(f"unknown key {prefix}.{unknown[0]}{did_you_mean(unknown[0], known)} (known: "
                          f"{', '.join(known)})")


def _check_algorithm(name: str, field: str) -> None:
    if name not in registered_algorithms():
        raise ConfigError(f"{field} must be one of {registered_algorithms()}, got {name!r}"
                          f"{did_you_mean(name, registered_algorithms())}")


def _class_names(cls: Any) -> str:
    return " or ".join("None" if c is type(None) else c.__name__ for c in typing.get_args(cls) or (cls,))


def _table(raw: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{name} must be a table, got {type(raw).__name__}")
    return raw


def _list_item(items: list, part: str, where: str) -> Any:
    """The item of a TOML list that `part` names: its number, or for [[groups]] its name (its algorithm when it has
    none, as a group is named)."""
    if part.isdigit() and int(part) < len(items):
        return items[int(part)]
    names = [t.get("name", t.get("algorithm")) if isinstance(t, dict) else None for t in items]
    if part in names:
        return items[names.index(part)]
    named = f" or {', '.join(map(str, names))}" if all(isinstance(n, str) for n in names) else ""
    raise ConfigError(f"{where} has tables 0 to {len(items) - 1}{named}, not {part!r}")


def _check_kwargs(kwargs: Any, field: str) -> None:
    require(isinstance(kwargs, Mapping) and all(isinstance(k, str) for k in kwargs), field,
            "a table of keyword arguments", kwargs)
    try:  # checkpoints record them as JSON: a TOML date would fail every segment's save, after training
        json.dumps(kwargs, allow_nan=False)
    except (TypeError, ValueError):
        require(False, field, "strings, numbers, booleans, lists and tables (checkpoints keep them as JSON)", kwargs)


def check_run_name(name: str, field: str) -> None:
    """A run's name names directories (TensorBoard's, the dashboard's): one plain path component, never '..'."""
    plain = isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", name) is not None and name.strip(".") != ""
    require(plain, field, "ASCII letters, digits, '_', '.', '-' (not only dots)", name)


_LISTEN_ADDRESS = re.compile(r"(?:[^\s:,]*:)?(\d{1,5})")


def _is_listen_address(text: str) -> bool:
    """Whether Dask's dashboard can listen at `text` as written: a port, with a host name or address before it."""
    match = _LISTEN_ADDRESS.fullmatch(text) if isinstance(text, str) else None
    return match is not None and int(match.group(1)) <= 65535


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(text: str | float, field: str = "duration") -> float:
    """Seconds in "90s", "10m", "1h30m", "45" (plain seconds); a ConfigError otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        s = str(text).strip()
        match = _DURATION.fullmatch(s)
        if s and re.fullmatch(r"\d+(\.\d+)?", s):
            seconds = float(s)
        elif s and match and any(match.groups()):
            h, m, sec = (float(g) if g else 0.0 for g in match.groups())
            seconds = 3600 * h + 60 * m + sec
        elif s.startswith("-") and _is_duration(s[1:]):
            seconds = -1.0  # refused below as not positive, which is what is wrong with it
        else:
            raise ConfigError(f"{field} must be a duration such as 90s, 10m or 1h30m, got {text!r}")
    if not seconds > 0 or not math.isfinite(seconds):
        raise ConfigError(f"{field} must be a positive duration, got {text!r}")
    return seconds


def _is_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except ConfigError:
        return False
    return True
