"""One training segment: load (or start) an agent, train it on a budget, evaluate, save.

`run_segment` is a plain function of plain data. It knows nothing of Dask, so a
segment runs the same in a test, in a notebook, or as a task on a worker. Saving and
loading the agent is `agent_checkpoints.py`'s. With several learners (`[learners]`,
`learners.py`), `run_segment` is rank 0 and `run_learner` each of the others.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from dask_podracer.agents import Agent, algorithm_info, finish_training, make_agent
from dask_podracer.agents.captured import use_capture
from dask_podracer.envs import VecEnv, make_vec_env
from dask_podracer.envs.devices import resolve_device, usable_device  # noqa: F401 - train's API too
from dask_podracer.envs.graphed import graph_steps
from dask_podracer.store import PodracerStore
from dask_podracer.train.actor_learner import ActorLauncher, ActorLearner
from dask_podracer.train.agent_checkpoints import load_parent, result_from_attrs, save_agent
from dask_podracer.train.evaluate import episode_scores
from dask_podracer.train.host_memory import restore_malloc_thresholds
from dask_podracer.train.learners import LearnerGroup, LearnerLauncher, rank_seed
from dask_podracer.train.spec import SegmentError, SegmentResult, SegmentSpec


def run_segment(spec: SegmentSpec, actors: ActorLauncher | None = None,
                learners: LearnerLauncher | None = None) -> SegmentResult:
    """Train `spec.algorithm` on `spec.env` from `spec.parent` (or fresh) and save under `spec.key`. With
    `spec.actors`, this process is the learner and `actors` starts the actor processes (train/actor_learner.py); with
    `spec.learners`, it is rank 0 of several learners and `learners` starts the others (train/learners.py)."""
    device = _prepare(spec, spec.seed)
    store = PodracerStore(spec.store_url)
    if store.has_checkpoint(spec.key):  # Dask ran this segment again (its worker died after saving)
        # verified, as every checkpoint whose score is trusted: a damaged one raises ChecksumError naming
        # its key, a quarantined one CheckpointNotFound, and neither reaches the leaderboard
        saved = store.load_checkpoint(spec.key)
        return result_from_attrs(spec.key, saved.attrs, device=str(device))

    env, agent = _build(spec, device, spec.seed)
    lineage_steps = replay_lost = 0
    if spec.parent is not None:
        lineage_steps, replay_lost = load_parent(agent, store, spec, device)
    if spec.actors is not None:
        agent = ActorLearner(agent, spec, actors)

    group = None
    if spec.learners is not None:
        if learners is None:
            raise ValueError("a segment with several learners needs a launcher to start them")
        group = LearnerGroup.open(spec, learners, device)
    try:
        if group is not None:
            group.start_identical(agent)
        steps, metrics, train_seconds = _train(agent, env, spec, spec.seed, group)
        if group is not None:
            spread = group.spread(agent)
            if spread != 0.0:
                raise SegmentError(f"segment {spec.key}: the learners' states (parameters, optimiser, normaliser "
                                   f"statistics) differ by up to {spread:.3g}; checkpoint not saved")
            metrics = {**metrics, "learners": float(group.size), "learner_param_spread": spread}
    finally:
        if group is not None:
            group.close()

    evaluated = time.perf_counter()
    eval_env = make_vec_env(spec.env, spec.eval_episodes, device=device, seed=spec.eval_seed,
                            **{**spec.env_kwargs, **spec.eval_env_kwargs})
    if _captures(spec, device):
        eval_env = graph_steps(eval_env)
    scores = episode_scores(agent, eval_env, seed=spec.eval_seed)
    score = float(scores.mean())
    # the standard error of that mean: how far apart two scores must be before they say something
    score_stderr = float(scores.std(correction=0)) / math.sqrt(scores.numel())
    eval_seconds = time.perf_counter() - evaluated
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
        eval_env_kwargs=dict(spec.eval_env_kwargs),
    )
    # one replay row per env step: the newest `steps` rows are this segment's own
    save_agent(store, spec.key, agent, result, seed=spec.seed,
               replay_base=spec.parent if spec.share_replay and spec.load_replay else None, own_rows=steps)
    return result


def run_learner(spec: SegmentSpec, rank: int, address: tuple[str, int]) -> dict[str, float]:
    """Learner `rank` (1 to K-1) of `spec`'s segment: train in lockstep with rank 0, on its own envs, from rank 0's
    weights; evaluate and save nothing. Returns what it did, small: the env steps of all learners, its seconds, and
    how far the learners' parameters spread at the end (0.0: identical)."""
    seed = rank_seed(spec, rank)
    device = _prepare(spec, seed)
    env, agent = _build(spec, device, seed)
    group = LearnerGroup.join(spec, rank, address, device)
    try:
        group.start_identical(agent)
        steps, _, seconds = _train(agent, env, spec, seed, group)
        spread = group.spread(agent)
    finally:
        group.close()
    return {"rank": float(rank), "segment_env_steps": float(steps), "train_seconds": seconds,
            "learner_param_spread": spread}


def _prepare(spec: SegmentSpec, seed: int) -> torch.device:
    """Set this process up for a segment: torch's threads, glibc's malloc thresholds, the seed; its device."""
    torch.set_num_threads(max(1, spec.torch_threads))
    restore_malloc_thresholds()  # a Dask nanny's worker: see host_memory.py
    torch.manual_seed(seed)
    return resolve_device(spec.device)


def _build(spec: SegmentSpec, device: torch.device, seed: int) -> tuple[VecEnv, Agent]:
    config_cls = algorithm_info(spec.algorithm).config_cls
    hparams = dict(spec.hparams)
    if not _may_capture(spec) and "compile" in {f.name for f in dataclasses.fields(config_cls)}:
        hparams["compile"] = "off"  # what "auto" means here; an explicit "on" is refused by the config
    env = make_vec_env(spec.env, config_cls(**hparams).num_envs, device=device, seed=seed, **spec.env_kwargs)
    if _captures(spec, device):
        env = graph_steps(env)  # a torch env's step as one CUDA graph, as the agent's update (envs/graphed.py)
    agent = make_agent(spec.algorithm, env.single_observation_space, env.single_action_space, hparams, device)
    return env, agent


def _may_capture(spec: SegmentSpec) -> bool:
    """Whether this segment may capture graphs at all: not with several learners (a captured update cannot average
    gradients inside its graph, learners.py), nor as one of the threads sharing a GPU (`spec.graphs_allowed`)."""
    return spec.learners is None and spec.graphs_allowed


def _captures(spec: SegmentSpec, device: torch.device) -> bool:
    """Whether this segment replays graphs: it may, and its agent's `compile` setting ("auto" where the algorithm
    has none) resolves to capture on `device`."""
    return _may_capture(spec) and use_capture(str(spec.hparams.get("compile", "auto")), device)


def _train(agent: Any, env: VecEnv, spec: SegmentSpec, seed: int,
           group: LearnerGroup | None) -> tuple[int, dict[str, float], float]:
    """Train until the budget is spent: (env steps, the last iteration's metrics, seconds). With several learners,
    the steps are all learners' and every learner stops after the same iteration."""
    started = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    steps, metrics, spent = 0, {}, False
    while not spent:
        obs, n, iteration_metrics = agent.train_iteration(env, obs)
        metrics = iteration_metrics or metrics
        out_of_time = spec.seconds > 0 and time.perf_counter() - started >= spec.seconds
        if group is not None:
            n, out_of_time = group.agree(n, out_of_time)
        steps += n
        spent = out_of_time or (spec.env_step_budget > 0 and steps >= spec.env_step_budget)
    finish_training(agent)
    return steps, metrics, time.perf_counter() - started
