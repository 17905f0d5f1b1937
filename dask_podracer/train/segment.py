"""One training segment: load (or start) an agent, train it on a budget, evaluate, save.

`run_segment` is a plain function of plain data. It knows nothing of Dask, so a
segment runs the same in a test, in a notebook, or as a task on a worker.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from dask_podracer.agents import Agent, algorithm_info, finish_training, make_agent
from dask_podracer.envs import check_env_named, make_vec_env
from dask_podracer.envs.registry import same_env
from dask_podracer.store import PodracerStore, StoreError
from dask_podracer.train.evaluate import episode_returns
from dask_podracer.train.host_memory import restore_malloc_thresholds
from dask_podracer.train.spec import SegmentResult, SegmentSpec
from dask_podracer.train.state import flatten_state, unflatten_state


class SegmentError(RuntimeError):
    """The segment ran but its outcome must not enter the leaderboard (e.g. a NaN score)."""


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def run_segment(spec: SegmentSpec) -> SegmentResult:
    """Train `spec.algorithm` on `spec.env` from `spec.parent` (or fresh) and save under `spec.key`."""
    torch.set_num_threads(max(1, spec.torch_threads))
    restore_malloc_thresholds()  # a Dask nanny's worker: see host_memory.py
    device = resolve_device(spec.device)
    torch.manual_seed(spec.seed)
    store = PodracerStore(spec.store_url)
    if store.has_checkpoint(spec.key):  # Dask ran this segment again (its worker died after saving)
        # verified, as every checkpoint whose score is trusted: a damaged one raises ChecksumError naming
        # its key, a quarantined one CheckpointNotFound, and neither reaches the leaderboard
        saved = store.load_checkpoint(spec.key)
        return result_from_attrs(spec.key, saved.attrs, device=str(device))

    hparams = algorithm_info(spec.algorithm).config_cls(**spec.hparams)
    env = make_vec_env(spec.env, hparams.num_envs, device=device, seed=spec.seed, **spec.env_kwargs)
    agent = make_agent(spec.algorithm, env.single_observation_space, env.single_action_space, spec.hparams, device)
    lineage_steps = replay_lost = 0
    if spec.parent is not None:
        lineage_steps, replay_lost = _load_parent(agent, store, spec, device)

    started = time.perf_counter()
    obs, _ = env.reset(seed=spec.seed)
    steps, metrics = 0, {}
    while not _budget_spent(spec, steps, time.perf_counter() - started):
        obs, n, iteration_metrics = agent.train_iteration(env, obs)
        steps += n
        metrics = iteration_metrics or metrics
    finish_training(agent)
    train_seconds = time.perf_counter() - started

    eval_env = make_vec_env(spec.env, spec.eval_episodes, device=device, seed=spec.eval_seed,
                            **{**spec.env_kwargs, **spec.eval_env_kwargs})
    returns = episode_returns(agent, eval_env, seed=spec.eval_seed)
    score = float(returns.mean())
    # the standard error of that mean: how far apart two scores must be before they say something
    score_stderr = float(returns.std(correction=0)) / math.sqrt(returns.numel())
    eval_seconds = time.perf_counter() - started - train_seconds
    if replay_lost:
        metrics = {**metrics, "replay_rows_lost": float(replay_lost)}
    bad = [k for k, v in {"score": score, **metrics}.items() if not math.isfinite(v)]
    if bad:
        raise SegmentError(f"segment {spec.key}: non-finite {', '.join(bad)}; checkpoint not saved")

    result = SegmentResult(
        key=spec.key, parent=spec.parent, algorithm=spec.algorithm, env=spec.env, hparams=dict(spec.hparams),
        score=score, env_steps=steps, total_env_steps=lineage_steps + steps, train_seconds=train_seconds,
        eval_seconds=eval_seconds, generation=spec.generation, device=str(device), metrics=metrics,
        score_stderr=score_stderr, env_kwargs=dict(spec.env_kwargs),
    )
    # one replay row per env step: the newest `steps` rows are this segment's own
    save_agent(store, spec.key, agent, result, seed=spec.seed,
               replay_base=spec.parent if spec.share_replay and spec.load_replay else None, own_rows=steps)
    return result


def result_from_attrs(key: str, attrs: dict, device: str | None = None) -> SegmentResult:
    """The result of a segment whose checkpoint is saved, read back from its attributes (no tensors loaded)."""
    return SegmentResult(
        key=key, parent=attrs["parent"], algorithm=attrs["algorithm"], env=attrs["env"], hparams=attrs["hparams"],
        score=attrs["score"], env_steps=attrs["segment_env_steps"], total_env_steps=attrs["env_steps"],
        train_seconds=0.0, eval_seconds=0.0, generation=attrs["generation"], device=device or "",
        metrics=attrs.get("metrics", {}), score_stderr=attrs.get("score_stderr", 0.0),
        env_kwargs=attrs.get("env_kwargs", {}),
    )


def save_agent(store: PodracerStore, key: str, agent: Agent, result: SegmentResult, seed: int,
               replay_base: str | None = None, own_rows: int = 0) -> None:
    """Save `agent` under `key`. With `replay_base`, only the newest `own_rows` replay rows are stored and
    the older ones by reference to that checkpoint's buffer (`"replay_base": {"key", "rows"}`)."""
    state = agent.state_dict()
    extra: dict = {}
    if replay_base is not None and REPLAY in state:
        replay = state[REPLAY]
        total = _rows(replay)
        own = min(own_rows, total)
        if own < total:  # the oldest rows are the parent's: a reference, not a copy
            state = {**state, REPLAY: {name: rows[total - own:] for name, rows in replay.items()}}
            extra["replay_base"] = {"key": replay_base, "rows": total - own}
    arrays, skeleton = flatten_state(state)
    attrs = {
        "algorithm": result.algorithm, "env": result.env, "hparams": result.hparams,
        "parent": result.parent, "generation": result.generation, "seed": seed,
        "score": result.score, "score_stderr": result.score_stderr, "env_steps": result.total_env_steps,
        "segment_env_steps": result.env_steps, "metrics": result.metrics, "structure": skeleton,
        "env_kwargs": result.env_kwargs, "device": result.device, **extra,
    }
    store.save_checkpoint(key, arrays, attrs)


def load_agent(store: PodracerStore, key: str, device: str | torch.device = "cpu",
               hparams: dict | None = None, replay: bool = True, env: str | None = None) -> Agent:
    """Rebuild the agent saved under `key` (with its own hyper-parameters unless `hparams` is given).

    `replay=False` leaves its replay buffer empty: enough to act, and a shared buffer's ancestors
    (`tournament.replay = "share"`) are then not read at all. `env` is the env you expect it to be
    trained on: a checkpoint on another is refused, and one whose env is imported by path
    ("my_envs:Arm") loads only when you name it here, since building it runs that module
    (UnnamedEnvError otherwise; registered envs and plain gymnasium ids need no name)."""
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
    agent.load_state_dict(state)
    return agent


def _load_parent(agent: Agent, store: PodracerStore, spec: SegmentSpec, device: torch.device) -> tuple[int, int]:
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
        state[REPLAY] = {name: torch.cat([torch.from_numpy(older[name]).to(device=device, dtype=rows.dtype), rows])
                         for name, rows in state[REPLAY].items()}
    return lost


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
    names = pieces[0].keys()
    return {name: np.concatenate([piece[name] for piece in reversed(pieces)]) for name in names}, rows


def replay_sources(store: PodracerStore, key: str,
                   layout: Callable[[str], tuple[int, str | None, int]] | None = None) -> list[str]:
    """The checkpoints whose replay rows checkpoint `key`'s buffer reads by reference (`replay_base`, with
    `tournament.replay = "share"`), nearest first: what must outlive it. The rows are counted as
    `read_shared_replay` takes them, so an ancestor past the buffer's size is not one of them. `layout` is
    `replay_layout`, or a cache of it (a checkpoint's layout never changes)."""
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
    base = store.checkpoint_attrs(key).get("replay_base")
    own_names = [name for name in store.array_names(key) if name.startswith(f"{REPLAY}.")]
    own = store.array_shape(key, own_names[0])[0] if own_names else 0
    return own, (base["key"] if base else None), (int(base["rows"]) if base else 0)


def _budget_spent(spec: SegmentSpec, steps: int, seconds: float) -> bool:
    return (spec.env_steps > 0 and steps >= spec.env_steps) or (spec.seconds > 0 and seconds >= spec.seconds)
