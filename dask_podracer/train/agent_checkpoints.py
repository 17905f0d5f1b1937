"""An agent's checkpoints: save one, load one back (to act, or to train on as a segment's parent), and read the
replay rows a checkpoint holds by reference to its ancestors (`tournament.replay = "share"`).

The attributes written are `store.records.CheckpointAttrs`; the arrays are the agent's flattened state dict
(train/state.py). Nothing here trains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import PurePath

import numpy as np
import torch

from dask_podracer.agents import Agent, algorithm_config, make_agent
from dask_podracer.agents.prioritized_replay import DEFAULT_PRIORITY, PRIORITY
from dask_podracer.envs import check_env_named, make_vec_env
from dask_podracer.envs.registry import same_env
from dask_podracer.store import PodracerStore, StoreError
from dask_podracer.store.records import CheckpointAttrs
from dask_podracer.train.spec import SegmentError, SegmentResult, SegmentSpec
from dask_podracer.train.state import flatten_state, unflatten_state


def _check_store(store: object) -> None:
    if not isinstance(store, PodracerStore):  # a URL where the store goes: say so, not "no attribute load_checkpoint"
        given = f" {store!r}" if isinstance(store, (str, PurePath)) else ""
        raise TypeError(f"store must be a PodracerStore (open one with PodracerStore(url)), got "
                        f"{type(store).__name__}{given}")


def result_from_attrs(key: str, attrs: CheckpointAttrs, device: str | None = None) -> SegmentResult:
    """The result of a segment whose checkpoint is saved, read back from its attributes (no tensors loaded)."""
    return SegmentResult(
        key=key, parent=attrs["parent"], algorithm=attrs["algorithm"], env=attrs["env"], hparams=attrs["hparams"],
        score=attrs["score"], segment_env_steps=attrs["segment_env_steps"], lineage_env_steps=attrs["env_steps"],
        train_seconds=0.0, eval_seconds=0.0, generation=attrs["generation"], device=device or "",
        metrics=attrs.get("metrics", {}), score_stderr=attrs.get("score_stderr", 0.0),
        env_kwargs=attrs.get("env_kwargs", {}), eval_env_kwargs=attrs.get("eval_env_kwargs", {}),
    )


def evaluation_env_kwargs(attrs: CheckpointAttrs) -> dict:
    """The keyword arguments of the env a checkpoint's score came from: its env's, and on top of them its
    evaluation env's (`run.eval_env_kwargs`: a trading agent is scored on another period than it trains on).
    A checkpoint written before they were recorded gives only its env's."""
    return {**attrs.get("env_kwargs", {}), **attrs.get("eval_env_kwargs", {})}


def save_agent(store: PodracerStore, key: str, agent: Agent, result: SegmentResult, seed: int,
               replay_base: str | None = None, own_rows: int = 0) -> None:
    """Save `agent` under `key`. With `replay_base`, only the newest `own_rows` replay rows are stored and
    the older ones by reference to that checkpoint's buffer (`"replay_base": {"key", "rows"}`)."""
    _check_store(store)
    _check_result_describes(agent, result)
    if isinstance(own_rows, bool) or not isinstance(own_rows, int) or own_rows < 0:
        raise ValueError(f"own_rows must be an integer >= 0, got {own_rows!r}")
    if replay_base is not None and not store.has_checkpoint(replay_base):
        # the rows it would stand for would be stored nowhere: the checkpoint would load with them missing
        raise ValueError(f"replay_base {replay_base!r} is not a checkpoint of store '{store.url}'")
    state = agent.state_dict()
    extra: dict = {"eval_env_kwargs": result.eval_env_kwargs} if result.eval_env_kwargs else {}
    if replay_base is not None and REPLAY in state:
        replay = state[REPLAY]
        total = _rows(replay)
        own = min(own_rows, total)
        if own < total:  # the oldest rows are the parent's: a reference, not a copy
            state = {**state, REPLAY: {name: rows[total - own:] for name, rows in replay.items()}}
            extra["replay_base"] = {"key": replay_base, "rows": total - own}
    arrays, skeleton = flatten_state(state)
    attrs: CheckpointAttrs = {
        "algorithm": result.algorithm, "env": result.env, "hparams": result.hparams,
        "parent": result.parent, "generation": result.generation, "seed": seed,
        "score": result.score, "score_stderr": result.score_stderr, "env_steps": result.lineage_env_steps,
        "segment_env_steps": result.segment_env_steps, "metrics": result.metrics, "structure": skeleton,
        "env_kwargs": result.env_kwargs, "device": result.device, **extra,
    }
    store.save_checkpoint(key, arrays, attrs)


HOW_IT_RAN = frozenset({"compile"})
"""Hyper-parameters a segment may settle for itself without making another agent: `compile = "auto"` is given to
the agent as "off" where graphs are not captured (train/segment.py), and the result keeps what was asked."""


def _check_result_describes(agent: Agent, result: SegmentResult) -> None:
    """A ValueError, before anything is written, when `result`'s algorithm or hyper-parameters are not `agent`'s:
    its checkpoint is rebuilt from them (`load_agent`, a child segment), so a PPO `algorithm` saved with a SAC
    agent's tensors was stored and failed only when loaded. The agent's own `algorithm` and `config` are compared,
    not its class: an actor-learner segment saves a wrapper of its IMPALA agent."""
    algorithm = getattr(agent, "algorithm", result.algorithm)
    if algorithm != result.algorithm:
        raise ValueError(f"result.algorithm is {result.algorithm!r} but the agent is a {algorithm!r} agent: its "
                         f"checkpoint would not load")
    config = getattr(agent, "config", None)
    if config is None or not dataclasses.is_dataclass(config):
        return
    try:
        described = algorithm_config(algorithm, result.hparams, "result.hparams")
    except (ValueError, TypeError) as e:
        raise ValueError(f"result.hparams do not describe the agent: {e}") from None
    differ = [f.name for f in dataclasses.fields(config)
              if f.name not in HOW_IT_RAN and getattr(config, f.name) != getattr(described, f.name)]
    if differ:
        name = differ[0]
        raise ValueError(f"result.hparams do not describe the agent: {name} is {getattr(described, name)!r} there "
                         f"and {getattr(config, name)!r} in the agent"
                         f"{f' ({len(differ) - 1} more differ)' if len(differ) > 1 else ''}: its checkpoint would "
                         f"load as another agent")


def load_agent(store: PodracerStore, key: str, device: str | torch.device = "cpu",
               hparams: dict | None = None, replay: bool = True, env: str | None = None) -> Agent:
    """Rebuild the agent saved under `key` (with its own hyper-parameters unless `hparams` is given).

    `replay=False` leaves its replay buffer empty: enough to act, and a shared buffer's ancestors
    (`tournament.replay = "share"`) are then not read at all. `env` is the env you expect it to be
    trained on: a checkpoint on another is refused, and one whose env is imported by path
    ("my_envs:Arm") loads only when you name it here, since building it runs that module
    (UnnamedEnvError otherwise; registered envs and plain gymnasium ids need no name)."""
    _check_store(store)
    checkpoint = store.load_checkpoint(key)
    attrs = checkpoint.attrs
    check_env_named(attrs["env"], env, f"checkpoint '{key}' of store '{store.url}'")
    env = make_vec_env(attrs["env"], 1, device=device, **attrs.get("env_kwargs", {}))
    agent = make_agent(attrs["algorithm"], env.single_observation_space, env.single_action_space,
                       attrs["hparams"] if hparams is None else hparams, device)
    state = unflatten_state(attrs["structure"], checkpoint.arrays, device)
    if replay:
        _complete_replay(store, attrs, state, device)
    else:
        state.pop(REPLAY, None)
    try:
        agent.load_state_dict(state)
    except RuntimeError as e:  # torch's "Error(s) in loading state_dict", a line per tensor: name the first
        if hparams is None:
            raise
        mismatch = next((line.strip() for line in str(e).splitlines() if "mismatch" in line or "Missing" in line),
                        str(e).splitlines()[0])
        own = {name: attrs["hparams"].get(name) for name in hparams}
        raise ValueError(f"checkpoint '{key}' does not fit the networks hparams {hparams} build ({mismatch}); it "
                         f"was saved with {own}") from None
    return agent


def load_parent(agent: Agent, store: PodracerStore, spec: SegmentSpec, device: torch.device) -> tuple[int, int]:
    """Load the parent into `agent`; its lineage's env steps, and replay rows its buffer should have had but
    could not be read (a shared ancestor that is damaged or gone)."""
    checkpoint = store.load_checkpoint(spec.parent)
    attrs = checkpoint.attrs
    if attrs["algorithm"] != spec.algorithm or attrs["env"] != spec.env:
        raise SegmentError(f"segment {spec.key}: parent {spec.parent} is {attrs['algorithm']} on {attrs['env']}, "
                           f"not {spec.algorithm} on {spec.env}")
    if not same_env(attrs.get("env_kwargs", {}), spec.env_kwargs):
        raise SegmentError(f"segment {spec.key}: parent {spec.parent} trained on {attrs['env']} with env_kwargs "
                           f"{attrs.get('env_kwargs', {})}, not {spec.env_kwargs}")
    state = unflatten_state(attrs["structure"], checkpoint.arrays, device)
    lost = 0
    if not spec.load_replay:
        state.pop(REPLAY, None)
    else:
        lost = _complete_replay(store, attrs, state, device)
    try:
        agent.load_state_dict(state)
    except ValueError as e:  # e.g. a parent trained with the other observation normalisation
        raise SegmentError(f"segment {spec.key}: cannot continue parent {spec.parent}: {e}") from e
    return int(attrs["env_steps"]), lost


REPLAY = "replay"
"""The state-dict entry of an agent's replay buffer: a dict of tensors with one row per transition."""


def _rows(replay: dict) -> int:
    return int(next(iter(replay.values())).shape[0]) if replay else 0


def _complete_replay(store: PodracerStore, attrs: dict, state: dict, device: str | torch.device) -> int:
    """Prepend the rows a checkpoint holds by reference (`replay_base`) to its own; the rows that could
    not be read. A damaged or quarantined ancestor costs its transitions, never the load: a replay
    buffer only speeds learning up."""
    base = attrs.get("replay_base")
    if not base or REPLAY not in state:
        return 0
    older, lost = read_shared_replay(store, base["key"], int(base["rows"]))
    if older:
        count = len(next(iter(older.values())))
        state[REPLAY] = {name: torch.cat([_column(older, name, count, rows), rows])
                         for name, rows in state[REPLAY].items()}
    return lost


OPTIONAL_REPLAY_COLUMNS = {PRIORITY: DEFAULT_PRIORITY}
"""Replay columns a buffer may lack (a prioritised buffer's priorities), and the value rows saved without them
take: a shared lineage may switch `prioritized` on or off between segments."""


def _column(older: dict[str, np.ndarray], name: str, count: int, like: torch.Tensor) -> torch.Tensor:
    if name in older:
        return torch.from_numpy(older[name]).to(device=like.device, dtype=like.dtype)
    return torch.full((count, *like.shape[1:]), OPTIONAL_REPLAY_COLUMNS[name], dtype=like.dtype, device=like.device)


def read_shared_replay(store: PodracerStore, key: str, rows: int) -> tuple[dict[str, np.ndarray], int]:
    """The newest `rows` rows of checkpoint `key`'s whole replay buffer, oldest first, following its
    `replay_base` references; and how many of those rows could not be read."""
    pieces: list[dict[str, np.ndarray]] = []
    prefix = f"{REPLAY}."
    while rows > 0 and key is not None:
        try:
            checkpoint = store.load_checkpoint(key)  # verifies this ancestor's checksum
        except StoreError:
            break
        own = {name[len(prefix):]: array for name, array in checkpoint.arrays.items() if name.startswith(prefix)}
        count = int(next(iter(own.values())).shape[0]) if own else 0
        take = min(count, rows)
        if take:
            pieces.append({name: array[count - take:] for name, array in own.items()})
        rows -= take
        base = checkpoint.attrs.get("replay_base")
        key = base["key"] if base and rows > 0 else None
    if not pieces:
        return {}, rows
    for piece in pieces:  # an ancestor saved before `prioritized` was switched on: its rows take the default
        count = len(next(iter(piece.values())))
        for name, value in OPTIONAL_REPLAY_COLUMNS.items():
            if name not in piece and any(name in other for other in pieces):
                piece[name] = np.full(count, value, dtype=next(o[name] for o in pieces if name in o).dtype)
    names = set.intersection(*(set(piece) for piece in pieces))  # and a column only some pieces have, dropped
    return {name: np.concatenate([piece[name] for piece in reversed(pieces)]) for name in sorted(names)}, rows


def replay_sources(store: PodracerStore, key: str,
                   layout: Callable[[str], tuple[int, str | None, int]] | None = None) -> list[str]:
    """The checkpoints whose replay rows checkpoint `key`'s buffer reads by reference (`replay_base`, with
    `tournament.replay = "share"`), nearest first: what must outlive it. The rows are counted as
    `read_shared_replay` takes them, so an ancestor past the buffer's size is not one of them. `layout` is
    `replay_layout`, or a cache of it (a checkpoint's layout never changes)."""
    _check_store(store)
    layout = layout or (lambda k: replay_layout(store, k))
    sources: list[str] = []
    _, base, rows = layout(key)
    while base is not None and rows > 0:
        try:
            own, next_base, _ = layout(base)
        except StoreError:  # damaged or gone: its rows are lost to the load, and nothing past it is read
            break
        sources.append(base)
        rows -= min(own, rows)
        base = next_base
    return sources


def replay_layout(store: PodracerStore, key: str) -> tuple[int, str | None, int]:
    """A checkpoint's replay rows: how many it stores itself, and the checkpoint it refers to for how many more
    (None, 0 without a reference); from metadata alone."""
    _check_store(store)
    base = store.checkpoint_attrs(key).get("replay_base")
    own_names = [name for name in store.array_names(key) if name.startswith(f"{REPLAY}.")]
    own = store.array_shape(key, own_names[0])[0] if own_names else 0
    return own, (base["key"] if base else None), (int(base["rows"]) if base else 0)
