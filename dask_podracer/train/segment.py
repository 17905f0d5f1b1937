"""One training segment: load (or start) an agent, train it on a budget, evaluate, save.

`run_segment` is a plain function of plain data. It knows nothing of Dask, so a
segment runs the same in a test, in a notebook, or as a task on a worker. Saving and
loading the agent is `agent_checkpoints.py`'s.
"""

from __future__ import annotations

import math
import time

import torch

from dask_podracer.agents import algorithm_info, finish_training, make_agent
from dask_podracer.envs import make_vec_env
from dask_podracer.store import PodracerStore
from dask_podracer.train.actor_learner import ActorLauncher, ActorLearner
from dask_podracer.train.agent_checkpoints import load_parent, result_from_attrs, save_agent
from dask_podracer.train.evaluate import episode_scores
from dask_podracer.train.host_memory import restore_malloc_thresholds
from dask_podracer.train.spec import SegmentError, SegmentResult, SegmentSpec


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def run_segment(spec: SegmentSpec, actors: ActorLauncher | None = None) -> SegmentResult:
    """Train `spec.algorithm` on `spec.env` from `spec.parent` (or fresh) and save under `spec.key`. With
    `spec.actors`, this process is the learner and `actors` starts the actor processes (train/actor_learner.py)."""
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
        lineage_steps, replay_lost = load_parent(agent, store, spec, device)
    if spec.actors is not None:
        agent = ActorLearner(agent, spec, actors)

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
    scores = episode_scores(agent, eval_env, seed=spec.eval_seed)
    score = float(scores.mean())
    # the standard error of that mean: how far apart two scores must be before they say something
    score_stderr = float(scores.std(correction=0)) / math.sqrt(scores.numel())
    eval_seconds = time.perf_counter() - started - train_seconds
    if replay_lost:
        metrics = {**metrics, "replay_rows_lost": float(replay_lost)}
    bad = [k for k, v in {"score": score, **metrics}.items() if not math.isfinite(v)]
    if bad:
        raise SegmentError(f"segment {spec.key}: non-finite {', '.join(bad)}; checkpoint not saved")

    result = SegmentResult(
        key=spec.key, parent=spec.parent, algorithm=spec.algorithm, env=spec.env, hparams=dict(spec.hparams),
        score=score, segment_env_steps=steps, lineage_env_steps=lineage_steps + steps, train_seconds=train_seconds,
        eval_seconds=eval_seconds, generation=spec.generation, device=str(device), metrics=metrics,
        score_stderr=score_stderr, env_kwargs=dict(spec.env_kwargs),
    )
    # one replay row per env step: the newest `steps` rows are this segment's own
    save_agent(store, spec.key, agent, result, seed=spec.seed,
               replay_base=spec.parent if spec.share_replay and spec.load_replay else None, own_rows=steps)
    return result


def _budget_spent(spec: SegmentSpec, steps: int, seconds: float) -> bool:
    return (spec.env_step_budget > 0 and steps >= spec.env_step_budget) or (spec.seconds > 0 and seconds >= spec.seconds)
