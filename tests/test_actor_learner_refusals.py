"""Actor-learner segments that cannot go on, found by running them: settings that starve the learner, actors that
raise, actors that stall. Each must end its segment soon, in one line saying why."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import torch

from dask_podracer.agents import make_agent
from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.envs import make_vec_env
from dask_podracer.envs.cartpole import CartPoleVecEnv
from dask_podracer.train import SegmentError, SegmentSpec
from dask_podracer.train.actor_learner import ActorLearner, run_actor
from dask_podracer.train.actor_link import dumps, new_authkey
from dask_podracer.train.spec import ActorsSpec

HPARAMS = {"num_envs": 4, "rollout_steps": 10, "batch_rollouts": 1}
ACTOR_ENVS = 3  # the actors' envs: the learner's own (HPARAMS' 4) never fail


class RaisesOnStep(CartPoleVecEnv):
    """CartPole whose actors' copies raise on their 50th step (a bug in an env of one's own)."""

    def step(self, action: torch.Tensor):
        self.calls = getattr(self, "calls", 0) + 1
        if self.num_envs == ACTOR_ENVS and self.calls >= 50:
            raise RuntimeError("env broke on step 50")
        return super().step(action)


RELEASE = threading.Event()


class HangsOnStep(CartPoleVecEnv):
    """CartPole whose actors' copies hang on their 50th step until RELEASE (as a stalled worker: connected, silent)."""

    def step(self, action: torch.Tensor):
        self.calls = getattr(self, "calls", 0) + 1
        if self.num_envs == ACTOR_ENVS and self.calls >= 50:
            RELEASE.wait()
        return super().step(action)


class _ActorThreads:
    """An `ActorLauncher` running each actor in a thread of this process, with envs of `ACTOR_ENVS`."""

    host = "127.0.0.1"

    def __init__(self, spec: SegmentSpec) -> None:
        self.spec = dataclasses.replace(spec, hparams={**spec.hparams, "num_envs": ACTOR_ENVS})
        self.threads: list[threading.Thread] = []

    def start(self, address, authkey, hang_up) -> None:
        for index in range(self.spec.actors.workers):
            thread = threading.Thread(target=self._run, args=(index, address, authkey), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _run(self, index, address, authkey) -> None:
        try:
            run_actor(self.spec, index, address, authkey)
        except RuntimeError:  # the env's own error: the learner must hear of it
            pass


def _learner(env_name: str, actors: ActorsSpec) -> tuple[ActorLearner, _ActorThreads, object]:
    torch.manual_seed(0)
    spec = SegmentSpec(key="refusal", store_url="unused", env=env_name, algorithm="impala", hparams=HPARAMS,
                       actors=actors)
    env = make_vec_env(env_name, HPARAMS["num_envs"], device="cpu", seed=0)
    agent = make_agent("impala", env.single_observation_space, env.single_action_space, HPARAMS)
    launcher = _ActorThreads(spec)
    return ActorLearner(agent, spec, launcher), launcher, env


def _until_it_fails(learner: ActorLearner, env, seconds: float) -> tuple[SegmentError | None, float]:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            learner.train_iteration(env, None)
        except SegmentError as error:
            return error, time.monotonic() - started
    return None, time.monotonic() - started


def _config(tmp_path, algorithm: str, actors: dict) -> dict:
    return {"run": {"env": "CartPole-v1", "algorithm": algorithm, "store": str(tmp_path / "run.zarr"),
                    "budget": "2m", "max_segments": 1},
            "tournament": {"pool_size": 1}, "segment": {"env_steps": 20_000}, "actors": actors}


def test_weights_sent_less_often_than_the_lag_bound_allows_are_refused_for_impala(tmp_path):
    # weights_every = 4, max_policy_lag = 2: the learner made 3 steps on the first weights' rollouts, then dropped
    # every rollout for the rest of the segment (12,743 of 12,746 in 57 s, 3 updates), never reaching its 4th step
    actors = {"workers": 2, "weights_every": 4, "max_policy_lag": 2}
    with pytest.raises(ConfigError, match=r"actors.weights_every must be <= max_policy_lag \+ 1 \(= 3\)") as error:
        config_from_dict(_config(tmp_path, "impala", actors))
    assert "\n" not in str(error.value)
    config_from_dict(_config(tmp_path, "impala", {**actors, "weights_every": 3}))  # it can send after its 3rd step
    config_from_dict(_config(tmp_path, "dqn", actors))  # an Ape-X learner drops nothing for its lag
    with pytest.raises(ValueError, match="actors.weights_every must be <="):  # from Python, run_segment's learner
        _learner("CartPole-v1", ActorsSpec(workers=1, weights_every=4, max_policy_lag=2))


def test_actors_that_all_raise_fail_the_segment_at_once_naming_their_error():
    # before: the learner waited connect_timeout (120 s by default) and said "no actor connected", not why
    learner, launcher, env = _learner("test_actor_learner_refusals:RaisesOnStep",
                                      ActorsSpec(workers=2, connect_timeout=60.0))
    try:
        error, seconds = _until_it_fails(learner, env, 30.0)
        metrics = learner.metrics()
    finally:
        learner.finish()
    assert error is not None and seconds < 30.0
    assert "every actor failed (2 of 2, the last: actor " in str(error)
    assert "RuntimeError: env broke on step 50" in str(error)
    assert metrics["actors_failed"] == 2.0
    for thread in launcher.threads:
        thread.join(timeout=10)


def test_actors_connected_but_silent_fail_the_segment_after_connect_timeout():
    # a stalled actor (SIGSTOP, a hung env) keeps its socket open: before, the learner waited forever
    RELEASE.clear()
    learner, launcher, env = _learner("test_actor_learner_refusals:HangsOnStep",
                                      ActorsSpec(workers=2, connect_timeout=3.0))
    try:
        error, seconds = _until_it_fails(learner, env, 20.0)
    finally:
        RELEASE.set()
        learner.finish()
    assert error is not None, "the learner waited on silent actors for 20 s"
    assert "no rollout from its 2 connected actors for" in str(error) and "stalled" in str(error)
    for thread in launcher.threads:
        thread.join(timeout=10)


def test_an_ape_x_chunk_larger_than_the_replay_buffer_is_refused(tmp_path):
    # before: the config passed (one task adds num_envs rows at a time), and every segment's learner failed on the
    # actors' first chunk: "a batch of 160 transitions does not fit a replay buffer of 100"
    raw = _config(tmp_path, "dqn", {"workers": 1})
    raw["hparams"] = {"num_envs": 8, "apex_send_steps": 20, "buffer_size": 100, "batch_size": 32, "learning_starts": 50}
    with pytest.raises(ConfigError, match=r"hparams.buffer_size must be >= num_envs \* apex_send_steps \(= 160\) "
                                          r"with \[actors\], got 100"):
        config_from_dict(raw)
    config_from_dict({k: v for k, v in raw.items() if k != "actors"})  # one task adds 8 rows at a time: fine
    env = make_vec_env("CartPole-v1", 8, device="cpu", seed=0)
    agent = make_agent("dqn", env.single_observation_space, env.single_action_space, raw["hparams"])
    with pytest.raises(ValueError, match=r"buffer_size must be >= num_envs \* apex_send_steps \(= 160\)"):
        agent.learner_feed()  # from Python (run_segment), before any actor starts


def actor_of_a_silent_learner(hparams: dict, max_in_flight: int, wait: float) -> tuple[dict, float, bool]:
    """One real actor whose learner sends its first weights, then never reads nor writes again (its worker stopped:
    SIGSTOP keeps the socket open), with `connect_timeout` 2 s: the actor's report, the seconds it lasted after those
    weights (up to `wait`), and whether it still runs then."""
    from multiprocessing.connection import Listener

    spec = SegmentSpec(key="stalled-learner", store_url="unused", env="CartPole-v1", algorithm="impala",
                       hparams=hparams, actors=ActorsSpec(workers=1, max_in_flight=max_in_flight, connect_timeout=2.0))
    env = make_vec_env("CartPole-v1", hparams["num_envs"], device="cpu", seed=0)
    agent = make_agent("impala", env.single_observation_space, env.single_action_space, hparams)
    authkey = new_authkey()
    with Listener(("127.0.0.1", 0), authkey=authkey) as listener:
        report: dict = {}
        actor = threading.Thread(target=lambda: report.update(run_actor(spec, 0, listener.address, authkey)),
                                 daemon=True)
        actor.start()
        with listener.accept() as conn:
            conn.send_bytes(dumps(("weights", 0, agent.policy_state())))
            started = time.monotonic()
            actor.join(timeout=wait)
            return report, time.monotonic() - started, actor.is_alive()


def test_an_actor_whose_learner_stalls_frees_its_slot_after_connect_timeout():
    # before, an actor waiting for its learner to take its rollouts in (max_in_flight) waited for ever, holding the
    # slot a rerun of the segment would need
    report, _, running = actor_of_a_silent_learner(HPARAMS, max_in_flight=2, wait=20)
    assert not running, "the actor still waits on a learner silent for 20 s"
    assert report["rollouts_sent"] == 2


def test_an_unbounded_actor_whose_learner_stalls_frees_its_slot_after_connect_timeout():
    # with max_in_flight = 0 the actor never waits for the learner's count: once a stalled learner's socket buffers
    # were full it blocked in send_bytes for ever, holding its slot
    report, lasted, running = actor_of_a_silent_learner({**HPARAMS, "rollout_steps": 100}, max_in_flight=0, wait=30)
    assert not running, "the actor still sends to a learner silent for 30 s"
    assert lasted >= 2.0  # it gave the learner connect_timeout to take a rollout in
    assert report["rollouts_sent"] >= 2  # it sent until the buffers were full (8 here)
