"""Several learners for one agent (`[learners]`, issue 25): gradients averaged with torch.distributed (gloo on the
CPU) before every optimiser step, worked out by hand between two processes; a 2-learner IMPALA segment on a real
LocalCluster of worker processes; and the settings refused before anything is submitted."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
import signal
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.population import run_tournament
from dask_podracer.population.cluster import Slots
from dask_podracer.population.preflight import check_segment_slots
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentError, SegmentSpec
from dask_podracer.train.learners import LearnerGroup
from dask_podracer.train.spec import LearnersSpec

HPARAMS = {"num_envs": 8, "rollout_steps": 20, "learning_rate": 2e-3}


# -- the averaging, worked out by hand: two processes, one linear layer --------------------------------------------
class Toy:
    """An agent as LearnerGroup sees one: a state_dict and an optimiser among its attributes."""

    def __init__(self, init: float) -> None:
        self.net = nn.Linear(2, 1, bias=False)
        nn.init.constant_(self.net.weight, init)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.5)

    def step(self, x: list[float]) -> None:
        """loss = w . x, so the gradient is x."""
        self.optimizer.zero_grad()
        (self.net.weight @ torch.tensor(x)).sum().backward()
        self.optimizer.step()

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])


def _spec() -> SegmentSpec:
    return SegmentSpec(key="toy", store_url="unused", env="CartPole-v1", algorithm="impala", hparams={},
                       learners=LearnersSpec(workers=2, connect_timeout=30.0))


class _SpawnRankOne:
    """A `LearnerLauncher` that starts rank 1 as a spawned process of this machine."""

    host = "127.0.0.1"

    def __init__(self) -> None:
        self.pipe, self.child_end = multiprocessing.Pipe()
        self.process = None

    def start(self, address):
        self.process = multiprocessing.get_context("spawn").Process(target=_rank_one, args=(address, self.child_end))
        self.process.start()


def _rank_one(address, pipe) -> None:
    torch.set_num_threads(1)
    group = LearnerGroup.join(_spec(), 1, address, torch.device("cpu"))
    toy = Toy(init=5.0)  # rank 0's weights must replace these
    group.start_identical(toy)
    pipe.send(toy.net.weight.detach().clone())
    toy.step([3.0, -1.0])
    pipe.send(toy.net.weight.detach().clone())
    pipe.send(group.agree(7, out_of_time=True))
    pipe.send(group.spread(toy))
    pipe.recv()  # rank 0 has checked: die without leaving the group
    os.kill(os.getpid(), signal.SIGKILL)


def test_two_learners_take_the_step_of_their_mean_gradient_and_fail_when_one_dies():
    launcher = _SpawnRankOne()
    group = LearnerGroup.open(_spec(), launcher, torch.device("cpu"))
    try:
        toy = Toy(init=1.0)
        group.start_identical(toy)
        assert torch.equal(launcher.pipe.recv(), torch.ones(1, 2))  # rank 1 starts from rank 0's weights
        toy.step([1.0, 1.0])
        # gradients [1, 1] here and [3, -1] there: both take the step of the mean [2, 0] with lr 0.5
        assert torch.equal(toy.net.weight.detach(), torch.tensor([[0.0, 1.0]]))
        assert torch.equal(launcher.pipe.recv(), toy.net.weight.detach())
        # every rank agrees on the steps of all and on whether any is out of time
        assert group.agree(5, out_of_time=False) == (12, True) == launcher.pipe.recv()
        assert group.spread(toy) == 0.0 == launcher.pipe.recv()
        launcher.pipe.send("die")
        launcher.process.join(timeout=30)
        started = time.monotonic()
        with pytest.raises(SegmentError, match="learner 0 of 2 lost its peers"):
            group.agree(1, out_of_time=False)
        assert time.monotonic() - started < 10  # at once, not after the 30 s timeout
    finally:
        group.close()
        if launcher.process.is_alive():
            launcher.process.kill()


class _Nobody:
    """A launcher whose ranks never start (no slot frees for them)."""

    host = "127.0.0.1"

    def start(self, address):
        pass


def test_learners_that_never_start_fail_the_segment_after_connect_timeout():
    spec = dataclasses.replace(_spec(), learners=LearnersSpec(workers=2, connect_timeout=1.0))
    with pytest.raises(SegmentError, match=r"segment toy: learner 0 of 2 could not join the others within 1s"):
        LearnerGroup.open(spec, _Nobody(), torch.device("cpu"))
    assert not dist.is_initialized()  # nothing left behind for this worker's next segment


# -- settings refused before anything is submitted ------------------------------------------------------------------
def _config(tmp_path, learners: dict, **sections) -> dict:
    return {"run": {"env": "CartPole-v1", "algorithm": "impala", "store": str(tmp_path / "run.zarr"), "budget": "2m",
                    "max_segments": 1, "seed": 3, **sections.pop("run", {})},
            "tournament": {"pool_size": 1, **sections.pop("tournament", {})},
            "segment": {"env_steps": 20_000, "eval_episodes": 10},
            "hparams": HPARAMS, "learners": learners, **sections}


@pytest.mark.parametrize("learners, sections, message", [
    ({"workers": 0}, {}, "learners.workers must be >= 1, got 0"),
    ({"connect_timeout": 0}, {}, "learners.connect_timeout must be > 0"),
    ({"ranks": 2}, {}, "unknown key learners.ranks"),
    ({}, {"run": {"algorithm": "sac"}, "hparams": {}},
     "learners: group 'sac' uses 'sac', which cannot train with several learners (algorithms that can: impala)"),
    ({}, {"actors": {"workers": 2}}, "learners: [learners] with [actors] is not built yet"),
    ({}, {"tournament": {"pending": 1}}, "tournament.pending must be 0 with [learners]"),
    ({}, {"cluster": {"threads_per_worker": 2}}, "cluster.threads_per_worker must be 1 with [learners]"),
    ({}, {"cluster": {"segments_per_gpu": 2, "gpu_sharing": "threads"}}, 'cluster.gpu_sharing must be "processes"'),
])
def test_learner_settings_that_cannot_run_are_refused_in_one_line_naming_the_field(tmp_path, learners, sections,
                                                                                    message):
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        config_from_dict(_config(tmp_path, learners, **sections))
    assert "\n" not in str(error.value)


def test_a_segment_takes_a_slot_per_learner_counted_before_any_submit(tmp_path):
    config = config_from_dict(_config(tmp_path, {"workers": 3}))
    assert config.slots_per_segment == 3
    with pytest.raises(ConfigError, match=r"learners.workers = 3 needs 3 slots per segment \(3 learners\) but the "
                                          r"cluster offers 2 \(CPU\); lower learners.workers or add workers"):
        check_segment_slots(config, Slots({"CPU": 1}, 2))
    config = config_from_dict(_config(tmp_path, {"workers": 2}, tournament={"pool_size": 2}))
    with pytest.raises(ConfigError, match=r"tournament.pool_size = 2 with learners.workers = 2 needs 4 slots"):
        check_segment_slots(config, Slots({"CPU": 1}, 3))
    check_segment_slots(config, Slots({"CPU": 1}, 4))
    check_segment_slots(config, Slots({"CPU": 1}, 0))  # an adaptive cluster, empty yet: left to grow
    assert config_from_dict(_config(tmp_path, {"workers": 1})).slots_per_segment == 1


# -- two learner tasks on a real LocalCluster -----------------------------------------------------------------------
def _initial_score(seed: int) -> float:
    """The score of the segment's own starting policy (rank 0's): the same seed, the same evaluation env."""
    from dask_podracer.agents import make_agent
    from dask_podracer.envs import make_vec_env
    from dask_podracer.train import evaluate

    torch.manual_seed(seed)
    env = make_vec_env("CartPole-v1", 1, device="cpu")
    agent = make_agent("impala", env.single_observation_space, env.single_action_space, HPARAMS)
    return evaluate(agent, make_vec_env("CartPole-v1", 10, device="cpu", seed=1_000_003), seed=1_000_003)


@pytest.mark.slow
def test_two_learner_tasks_keep_identical_parameters_and_learn_cartpole(cpu_client, tmp_path):
    config = config_from_dict(_config(tmp_path, {"workers": 2}))  # the cluster's 2 slots: one per learner
    summary = run_tournament(config, cpu_client)
    assert summary.segments_completed == 1, summary.last_error
    (record,) = PodracerStore(config.store_url).read_history()
    metrics, score = record["metrics"], record["score"]
    assert metrics["learners"] == 2 and metrics["learner_param_spread"] == 0.0  # max |rank 0 - rank 1| of any weight
    # each iteration counts both learners' 8 envs x 20 steps: the budget is spent on both ranks' steps together
    assert record["segment_env_steps"] >= 20_000 and record["segment_env_steps"] % (2 * 8 * 20) == 0
    initial = _initial_score(config.run.seed * 1_000_003)
    assert score > initial + 60, (score, initial, metrics)
