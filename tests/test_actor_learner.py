"""Actor-learner segments (issue 25): a learner task and actor tasks on a real LocalCluster of worker processes,
their lag and reuse bookkeeping, and the settings refused before anything is submitted."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import statistics
import threading
import time

import pytest
import torch

from dask_podracer.agents import algorithm_info, make_agent
from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.envs import make_vec_env
from dask_podracer.population import run_tournament
from dask_podracer.population.actor_tasks import actor_keys_prefix
from dask_podracer.population.task_keys import task_key
from dask_podracer.population.tasks import segment_task
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentSpec, evaluate
from dask_podracer.train.actor_learner import ActorLearner, run_actor
from dask_podracer.train.actor_link import LearnerEndpoint, dumps, new_authkey
from dask_podracer.train.spec import ActorsSpec
from dask_podracer.train.trajectory_book import TrajectoryBook

HPARAMS = {"num_envs": 8, "rollout_steps": 20, "batch_rollouts": 2}


# -- the learner's bookkeeping, without processes -----------------------------------------------
def test_book_drops_what_passed_the_lag_bound_and_trains_each_rollout_at_most_reuse_times():
    book = TrajectoryBook(max_policy_lag=2, reuse=2)
    for name, version in (("a", 0), ("b", 1), ("c", 3)):
        book.add(name, version)
    # learner at version 3: "a" has lag 3 > 2, dropped without ever being trained on
    batch = book.take(2, learner_version=3)
    assert [e.item for e in batch] == ["b", "c"]  # fresh ones, oldest first
    assert book.lag_counts == {2: 1, 0: 1} and book.dropped_stale == 1 and book.dropped_unused == 1
    book.trained(batch)
    book.add("d", 4)
    batch = book.take(2, learner_version=4)  # "b" is now stale (lag 3); fresh "d" first, then "c" again
    assert [e.item for e in batch] == ["d", "c"] and book.lag_counts == {2: 1, 0: 2, 1: 1}
    assert book.dropped_stale == 2 and book.dropped_unused == 1  # "b" had been trained on once
    book.trained(batch)
    assert [(e.item, e.uses) for e in book.waiting] == [("d", 1)]  # "c" was used twice: reuse is spent
    assert book.lag_metrics() == {"policy_lag_median": 0.5, "policy_lag_p95": 2.0, "policy_lag_max": 2.0}


@pytest.mark.parametrize("seed", range(20))
def test_book_lag_metrics_are_the_median_nearest_rank_p95_and_max_of_every_lag_handed_out(seed):
    generator = random.Random(seed)
    book = TrajectoryBook(max_policy_lag=None, reuse=1)
    lags = []
    for version in range(generator.randint(1, 60)):  # batches of 1 to 5, each at its own learner version
        learner_version = version + generator.randint(0, 9)
        for _ in range(generator.randint(1, 5)):
            book.add(None, version)
        lags += [learner_version - version] * len(book.waiting)
        book.trained(book.take(len(book.waiting), learner_version))
    ordered = sorted(lags)
    assert book.lag_metrics() == {"policy_lag_median": float(statistics.median(ordered)),
                                  "policy_lag_p95": float(ordered[math.ceil(0.95 * len(ordered)) - 1]),
                                  "policy_lag_max": float(ordered[-1])}


def test_book_with_reuse_one_hands_out_each_rollout_once():
    book = TrajectoryBook(max_policy_lag=8, reuse=1)
    for version in range(5):
        book.add(version, version)
    taken = []
    while book.available(learner_version=5):
        batch = book.take(2, learner_version=5)
        book.trained(batch)
        taken += [e.item for e in batch]
    assert taken == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="max_policy_lag"):
        TrajectoryBook(max_policy_lag=0, reuse=1)


# -- the bound on rollouts in flight, one actor in a thread against a real endpoint -----------------
def _sent_when_quiet(endpoint, rollouts: int, seconds: float = 5.0) -> int:
    """Wait until `rollouts` rollouts sit in the endpoint's inbox (failing after `seconds`), then a moment more
    for any the actor should not have sent; the rollouts in the inbox."""
    deadline = time.monotonic() + seconds
    while endpoint.inbox.qsize() < rollouts:
        assert time.monotonic() < deadline, f"{endpoint.inbox.qsize()} rollouts arrived, expected {rollouts}"
        time.sleep(0.01)
    time.sleep(0.5)
    return endpoint.inbox.qsize()


def test_an_actor_sends_no_more_than_max_in_flight_rollouts_the_learner_has_not_taken_in():
    spec = SegmentSpec(key="inflight", store_url="unused", env="CartPole-v1", algorithm="impala", hparams=HPARAMS,
                       actors=ActorsSpec(workers=1, max_in_flight=2))
    env = make_vec_env("CartPole-v1", HPARAMS["num_envs"], device="cpu", seed=0)
    agent = make_agent("impala", env.single_observation_space, env.single_action_space, HPARAMS)
    authkey = new_authkey()
    endpoint = LearnerEndpoint("127.0.0.1", authkey, inbox_size=16,
                               first_weights=dumps(("weights", 0, agent.policy_state())))
    report: dict = {}
    actor = threading.Thread(target=lambda: report.update(run_actor(spec, 0, endpoint.address, authkey)), daemon=True)
    actor.start()
    try:
        assert _sent_when_quiet(endpoint, 2) == 2  # the inbox has room for 16: the bound stops the actor at 2
        first = endpoint.inbox.get()
        endpoint.acknowledge(first.actor)  # the learner took one in: the actor may send one more, and only one
        assert _sent_when_quiet(endpoint, 2) == 2
        endpoint.publish(dumps(("weights", 7, agent.policy_state())))  # new weights while it waits...
        for _ in range(2):
            endpoint.acknowledge(endpoint.inbox.get().actor)
        assert _sent_when_quiet(endpoint, 2) == 2
        assert [endpoint.inbox.get().version for _ in range(2)] == [7, 7]  # ...are what it acted with next
    finally:
        endpoint.close(flush_seconds=5.0)
        actor.join(timeout=10)
    assert not actor.is_alive()
    assert report["rollouts_sent"] == 5 and report["rollouts_taken"] == 3


class _ActorThreads:
    """An `ActorLauncher` that runs each actor in a thread of this process."""

    host = "127.0.0.1"

    def __init__(self, spec: SegmentSpec) -> None:
        self.spec, self.threads = spec, []

    def start(self, address, authkey, hang_up) -> None:
        for index in range(self.spec.actors.workers):
            thread = threading.Thread(target=run_actor, args=(self.spec, index, address, authkey), daemon=True)
            thread.start()
            self.threads.append(thread)


def test_an_impala_learner_takes_in_only_the_rollouts_its_next_batch_needs():
    # Draining its whole inbox into the book, a learner its actors outpace kept rollouts that went stale before
    # their turn, dropped them and waited for fresh ones (busy 78-84% of its time, not 95%; docs/actor_learner.md)
    spec = SegmentSpec(key="take", store_url="unused", env="CartPole-v1", algorithm="impala", hparams=HPARAMS,
                       actors=ActorsSpec(workers=1, max_in_flight=0))
    env = make_vec_env("CartPole-v1", HPARAMS["num_envs"], device="cpu", seed=0)
    agent = make_agent("impala", env.single_observation_space, env.single_action_space, HPARAMS)
    launcher = _ActorThreads(spec)
    learner = ActorLearner(agent, spec, launcher)
    try:
        inbox = learner.endpoint.inbox
        deadline = time.monotonic() + 30
        while not inbox.full():  # the actor outpaces a learner that has not started: 4 rollouts wait
            assert time.monotonic() < deadline, f"{inbox.qsize()} of {inbox.maxsize} rollouts arrived"
            time.sleep(0.01)
        _, received, metrics = learner.train_iteration(env, None)
        assert metrics["rollouts_received"] == HPARAMS["batch_rollouts"] == 2  # what one batch needs, no more
        assert received == 2 * HPARAMS["num_envs"] * HPARAMS["rollout_steps"]
        assert metrics["learner_updates"] == 1 and learner.book.waiting == []  # trained on both; none left to age
        assert inbox.qsize() >= 2  # the rest wait in the bounded inbox, pushing back on the actor
    finally:
        learner.finish()
        for thread in launcher.threads:
            thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in launcher.threads)


# -- settings refused before anything is submitted ----------------------------------------------
def _config(tmp_path, actors: dict, **sections) -> dict:
    return {"run": {"env": "CartPole-v1", "algorithm": "impala", "store": str(tmp_path / "run.zarr"),
                    "budget": "2m", "max_segments": 1, **sections.pop("run", {})},
            "tournament": {"pool_size": 1, **sections.pop("tournament", {})},
            "segment": {"env_steps": 20_000, "eval_episodes": 10, **sections.pop("segment", {})},
            "hparams": HPARAMS, "actors": actors, **sections}


@pytest.mark.parametrize("actors, field", [
    ({"workers": 0}, "actors.workers must be >= 1"),
    ({"max_policy_lag": 0}, "actors.max_policy_lag must be >= 1"),
    ({"reuse": 0}, "actors.reuse must be >= 1"),
    ({"max_in_flight": -1}, "actors.max_in_flight must be >= 0"),
    ({"workers": 2, "pending": 1}, "unknown key actors.pending"),
])
def test_actor_settings_that_cannot_run_are_refused_naming_the_field(tmp_path, actors, field):
    with pytest.raises(ConfigError, match=field) as error:
        config_from_dict(_config(tmp_path, actors))
    assert "\n" not in str(error.value)


def test_actors_need_an_algorithm_that_learns_from_them_and_no_pending_learners(tmp_path):
    raw = _config(tmp_path, {"workers": 2}, run={"algorithm": "ppo"})
    raw.pop("hparams")
    with pytest.raises(ConfigError, match="actors: group 'ppo' uses 'ppo', which cannot learn from actor tasks"):
        config_from_dict(raw)
    with pytest.raises(ConfigError, match="tournament.pending must be 0 with"):
        config_from_dict(_config(tmp_path, {"workers": 2}, tournament={"pending": 1}))


def test_more_actors_than_the_cluster_has_slots_is_refused_before_any_submit(cpu_client, tmp_path):
    config = config_from_dict(_config(tmp_path, {"workers": 2}))  # 3 slots per segment; the cluster has 2
    with pytest.raises(ConfigError, match=r"actors.workers = 2 needs 3 slots per segment .* offers 2 \(CPU\)"):
        run_tournament(config, cpu_client)
    assert not PodracerStore.exists(config.store_url)  # nothing submitted, and the bare store removed
    config = config_from_dict(_config(tmp_path, {"workers": 1}, tournament={"pool_size": 2}))
    with pytest.raises(ConfigError, match=r"tournament.pool_size = 2 with actors.workers = 1 needs 4 slots"):
        run_tournament(config, cpu_client)


# -- a learner task and two actor processes --------------------------------------------------
def _initial_score(seed: int) -> float:
    """The score of the segment's own starting policy: the same seed, the same evaluation env."""
    torch.manual_seed(seed)
    env = make_vec_env("CartPole-v1", 1, device="cpu")
    agent = make_agent("impala", env.single_observation_space, env.single_action_space, HPARAMS)
    return evaluate(agent, make_vec_env("CartPole-v1", 10, device="cpu", seed=1_000_003), seed=1_000_003)


def test_impala_learns_cartpole_from_two_actor_processes_within_its_lag_bound(three_slots, tmp_path):
    # The budget counts transitions received, dropped ones too: 20,000 make at most 62 learner steps of 2 rollouts.
    # About 7 steps' worth of rollouts can queue ahead of the learner (its inbox of 4, each actor's socket buffers),
    # so a bound of 3 dropped a quarter of them when the learner was short of CPU (46 steps, score 102.7 in CI).
    # A bound of 8 dropped 0-10 of the 125: 56-63 steps, loaded or not. After 60 steps the deterministic score still
    # swings between about 130 and 500 from one step to the next (also on-policy, in one process), so the
    # threshold is 60 above the untrained policy's ~10: three times a random policy's ~22, far below that floor.
    max_policy_lag = 8
    config = config_from_dict(_config(tmp_path, {"workers": 2, "max_policy_lag": max_policy_lag}))
    summary = run_tournament(config, three_slots)
    assert summary.segments_completed == 1, summary.last_error
    (record,) = PodracerStore(config.store_url).read_history()
    metrics, score = record["metrics"], record["score"]
    initial = _initial_score(config.run.seed * 1_000_003)
    print("LEARN", score, initial, record["train_seconds"], metrics)
    assert score > initial + 60, (score, initial, metrics)
    assert metrics["actors_joined"] == 2 and metrics["actors_lost"] == 0
    assert 0 <= metrics["policy_lag_median"] <= metrics["policy_lag_p95"] <= metrics["policy_lag_max"] <= max_policy_lag
    assert metrics["transitions_received"] == record["segment_env_steps"] >= 20_000
    assert metrics["socket_bytes_received"] > 20_000 * 4 * 4  # at least the observations came over the socket
    # the steady figures count from the moment both actors had delivered: a part of the segment and of its transitions
    assert 0 < metrics["streaming_seconds"] < record["train_seconds"]
    assert 0 < metrics["streaming_transitions_per_s"] * metrics["streaming_seconds"] < metrics["transitions_received"]
    assert 0 < metrics["streaming_busy_fraction"] <= 1
    # where the learner's time went: disjoint parts of one clock, so they sum to at most the whole
    assert metrics["learner_busy_fraction"] > 0 and metrics["learner_publish_fraction"] > 0
    assert metrics["learner_wait_fraction"] > 0  # it waits for the actors' first rollouts, at least
    parts = ("learner_busy_fraction", "learner_wait_fraction", "learner_publish_fraction")
    assert sum(metrics[name] for name in parts) <= 1.01, metrics
    assert metrics["streaming_busy_fraction"] + metrics["streaming_wait_fraction"] <= 1.01


PENDULUM = {"num_envs": 8, "rollout_steps": 20, "batch_rollouts": 2, "learning_rate": 1e-3, "gamma": 0.95,
            "reward_scale": 0.1, "ent_coef": 0.0}  # workflows/configs/impala_pendulum.toml's; bound_coef its default


@pytest.mark.slow
def test_impala_learns_pendulum_from_two_actor_processes(three_slots, tmp_path):
    # A Gaussian policy under policy lag needs the bounds loss on its mean (agents/impala.py, test_impala_bounds.py).
    # One segment of 600,000 transitions on the shared 2-core machine, 2026-11-27 (`podracer train`, these settings):
    # with it, run.seed 0-3 scored -139, -139, -139, -143 (16-19 s of training at load 3-5; policy lag median 1,
    # p95 3); with bound_coef = 0, seeds 0-2 scored -837, -345, -359. The untrained policy scores -1059 on these
    # evaluation episodes. This test's call took 22 s after this module's other tests (its workers warm), and run
    # alone 42 s at load 3-4 (30 s training) and 76 s at load 5-9 (56 s).
    config = config_from_dict(_config(tmp_path, {"workers": 2, "max_policy_lag": 4},
                                      run={"env": "Pendulum-v1", "budget": "5m"}, segment={"env_steps": 600_000},
                                      hparams=PENDULUM))
    summary = run_tournament(config, three_slots)
    assert summary.segments_completed == 1, summary.last_error
    (record,) = PodracerStore(config.store_url).read_history()
    metrics, score = record["metrics"], record["score"]
    print("LEARN", score, record["train_seconds"], metrics)
    assert score > -400, (score, metrics)
    assert metrics["actors_joined"] == 2 and metrics["policy_lag_max"] >= 1  # the rollouts did come from older policies


def test_an_actor_killed_mid_segment_costs_its_rollouts_not_the_segment(three_slots, tmp_path):
    client = three_slots
    store = PodracerStore(str(tmp_path / "kill.zarr"), create=True)
    hparams = dataclasses.asdict(algorithm_info("impala").config_cls(**HPARAMS))
    spec = SegmentSpec(key="killed-actor", store_url=store.url, env="CartPole-v1", algorithm="impala",
                       hparams=hparams, env_step_budget=10**9, seconds=8.0, eval_episodes=2,
                       actors=ActorsSpec(workers=2, connect_timeout=30.0))
    future = client.submit(segment_task, spec, key=task_key(spec.key), resources={"CPU": 1}, pure=False)
    victim = _worker_running(client, actor_keys_prefix(spec.key), timeout=60.0)
    time.sleep(2.0)  # mid-segment: rollouts are flowing
    os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)  # its nanny starts a new one
    result = future.result(timeout=90)
    assert result.metrics["actors_lost"] >= 1
    assert result.metrics["learner_updates"] > 0 and store.has_checkpoint(spec.key)


def _worker_running(client, prefix: str, timeout: float) -> str:
    """The worker running a task whose key starts with `prefix` (the first found)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        where = client.run_on_scheduler(_processing_on, prefix)
        if where:
            return where
        time.sleep(0.2)
    raise AssertionError(f"no task {prefix}* ever started")


def _processing_on(prefix: str, dask_scheduler=None) -> str | None:
    for key, task in dask_scheduler.tasks.items():
        if isinstance(key, str) and key.startswith(prefix) and task.processing_on is not None:
            return task.processing_on.address
    return None

