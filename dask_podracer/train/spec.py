"""The plain data a training segment is given and gives back: small, picklable, no tensors."""

from __future__ import annotations

import dataclasses
import math
from typing import Any


class SegmentError(RuntimeError):
    """The segment ran but its outcome must not enter the leaderboard (e.g. a NaN score)."""


@dataclasses.dataclass(frozen=True)
class ActorsSpec:
    """How an actor-learner segment spreads over tasks (`[actors]`): this task learns, `workers` others act."""

    workers: int
    """Actor tasks, each rolling out in its own VecEnv and sending trajectories to the learner."""
    max_policy_lag: int = 4
    """A trajectory whose policy lag (learner version minus behaviour version) passes this is dropped (IMPALA; an
    Ape-X replay learner keeps every transition)."""
    reuse: int = 1
    """Times the learner may train on one trajectory (IMPALA; an Ape-X learner's replay ratio is its utd_ratio)."""
    weights_every: int = 1
    """The learner sends its policy to the actors after every this many gradient steps."""
    connect_timeout: float = 120.0
    """Seconds the learner waits with no actor connected (at the start, or after all were lost), or with actors
    connected and no rollout from any (stalled), before it fails; the longest an actor waits on a silent learner,
    or on a send its learner does not read."""
    max_in_flight: int = 2
    """Rollouts an actor may have sent that the learner has not yet taken in; it waits for the learner before it
    collects another. 0: no bound of its own (the socket buffers and the learner's inbox push back)."""

    def __post_init__(self) -> None:
        for name in ("workers", "max_policy_lag", "reuse", "weights_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"actors.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.max_in_flight < 0:
            raise ValueError(f"actors.max_in_flight must be >= 0, got {self.max_in_flight!r}")


@dataclasses.dataclass(frozen=True)
class LearnersSpec:
    """How many learners train one segment's agent together, averaging gradients every step (`[learners]`)."""

    workers: int
    """Learner tasks, this one (rank 0) included; each steps its own envs (`train/learners.py`)."""
    connect_timeout: float = 120.0
    """Seconds the learners may take to meet (waiting for slots included), and the longest any collective may wait."""

    def __post_init__(self) -> None:
        if self.workers < 2:
            raise ValueError(f"learners.workers must be >= 2 in a spec (one learner is a plain segment), got "
                             f"{self.workers!r}")
        if self.connect_timeout <= 0:
            raise ValueError(f"learners.connect_timeout must be > 0, got {self.connect_timeout!r}")


@dataclasses.dataclass(frozen=True)
class SegmentSpec:
    """Everything one segment needs; a segment is a pure function of this."""

    key: str
    """Checkpoint key this segment writes (fresh for every segment)."""
    store_url: str
    """Where checkpoints live; the worker reads its parent and writes its result there."""
    env: str
    """Env name for `make_vec_env`."""
    algorithm: str
    """Algorithm name, e.g. "sac" or "ppo"."""
    hparams: dict[str, Any]
    """The algorithm's hyper-parameters for this segment (they win over the parent's)."""
    parent: str | None = None
    """Checkpoint key to start from; None starts a fresh agent."""
    seed: int = 0
    """Seeds networks, exploration and the training env."""
    env_step_budget: int = 10_000
    """Train until this many env steps (summed over envs); 0 means no step limit (`segment.env_steps`)."""
    seconds: float = 0.0
    """Train until this many seconds have passed; 0 means no time limit."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes, run as one batch of envs."""
    eval_seed: int = 1_000_003
    """Seed of the evaluation env, the same for every segment so scores compare."""
    device: str = "auto"
    """"auto" (the GPU if there is one, else the CPU), or a torch device string."""
    torch_threads: int = 1
    """CPU threads torch may use in this segment (one per Dask worker slot)."""
    generation: int = 0
    """Number of segments in this agent's lineage before this one."""
    load_replay: bool = True
    """Take the parent's replay buffer along (False: start with an empty one)."""
    share_replay: bool = False
    """Save only the transitions this segment collected, with a reference to the parent's for the rest
    (`tournament.replay = "share"`): a lineage then stores each transition once, not in every checkpoint."""
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the env's constructor (`run.env_kwargs`)."""
    eval_env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments the evaluation env is built with on top of `env_kwargs` (`run.eval_env_kwargs`)."""
    actors: ActorsSpec | None = None
    """None: one task trains. Set: this task is the learner of actor tasks (`train/actor_learner.py`)."""
    learners: LearnersSpec | None = None
    """None: one learner. Set: this task is rank 0 of several learners averaging gradients (`train/learners.py`)."""
    graphs_allowed: bool = True
    """False where segments share a GPU as threads of one worker (`cluster.gpu_sharing = "threads"`): a CUDA graph
    capture in one thread fails another thread's random draws, so `compile = "auto"` runs eagerly there."""

    def __post_init__(self) -> None:
        # what the tournament never builds, a caller of run_segment might: NaN seconds never end a segment
        if isinstance(self.env_step_budget, bool) or not isinstance(self.env_step_budget, int) \
                or self.env_step_budget < 0:
            raise ValueError(f"env_step_budget must be an integer >= 0, got {self.env_step_budget!r}")
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) \
                or not 0 <= self.seconds < math.inf:
            raise ValueError(f"seconds must be a finite number >= 0, got {self.seconds!r}")
        if isinstance(self.eval_episodes, bool) or not isinstance(self.eval_episodes, int) or self.eval_episodes < 1:
            raise ValueError(f"eval_episodes must be an integer >= 1, got {self.eval_episodes!r}")
        if not isinstance(self.hparams, dict):
            raise ValueError(f"hparams must be a dict, got {type(self.hparams).__name__}")
        if self.env_step_budget <= 0 and self.seconds <= 0:
            raise ValueError("a segment needs a budget: env_step_budget > 0 or seconds > 0")
        if self.actors is not None and self.learners is not None:
            raise ValueError("a segment has either actors or several learners, not both (not built yet)")


@dataclasses.dataclass(frozen=True)
class SegmentResult:
    """What a finished segment reports; the checkpoint itself stays in the store."""

    key: str
    parent: str | None
    algorithm: str
    env: str
    hparams: dict[str, Any]
    score: float
    """Mean score of the evaluation episodes: each one's return, or the env's own `info["episode_score"]`."""
    segment_env_steps: int
    """Env steps this segment trained for."""
    lineage_env_steps: int
    """Env steps of the whole lineage, parent's included."""
    train_seconds: float
    eval_seconds: float
    generation: int
    device: str
    metrics: dict[str, float]
    """The learner's last metrics (losses, entropy, ...)."""
    score_stderr: float = 0.0
    """Standard error of `score`: the evaluation returns' standard deviation over the square root of their
    number (0 for results from before it was recorded)."""
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments the env was built with."""
    eval_env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments the evaluation env was built with on top of `env_kwargs`: the score's env."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
