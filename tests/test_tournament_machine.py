"""The tournament state machine, without a cluster: scripted events in, exact instructions out."""

import pytest

from dask_podracer.config import config_from_dict
from dask_podracer.population import (BudgetReached, CapacityChanged, Cancel, Evict, Promote, SegmentFailed,
                                      SegmentFinished, Stop, Tournament, Train)
from dask_podracer.train import SegmentResult


class Scripted(Tournament):
    """The machine under test, remembering the last Train of each agent so a test can finish it."""

    def handle(self, event):
        out = super().handle(event)
        self.last_train = {**getattr(self, "last_train", {}), **{i.agent: i for i in out if isinstance(i, Train)}}
        return out


def make(strategy="tournament", groups=None, search=None, **tournament):
    data = {"run": {"env": "Pendulum-v1", "seed": 0, "target_return": -150.0},
            "tournament": {"strategy": strategy, "leaderboard_size": 2, "fresh_agents": 2,
                           "perturb": ["actor_lr"], **tournament}}
    if groups:
        data["groups"] = groups
    else:
        data["run"]["algorithm"] = "sac"
        data["search"] = search or {}
    return Scripted(config_from_dict(data), key_factory=lambda i: f"k{i}")


def finished(machine, agent, score):
    train = machine.last_train[agent]
    result = SegmentResult(key=train.key, parent=train.plan.parent, algorithm="sac", env="Pendulum-v1",
                           hparams=train.plan.hparams, score=score, env_steps=100, total_env_steps=100,
                           train_seconds=1.0, eval_seconds=0.1, generation=train.plan.generation, device="cpu",
                           metrics={})
    return machine.handle(SegmentFinished(agent, result))


def shape(instructions):
    """The decision in each instruction, without the hyper-parameter values a perturbation drew."""
    out = []
    for i in instructions:
        if isinstance(i, Train):
            out.append(("train", i.event, i.agent, i.key, i.plan.parent, i.plan.generation, i.plan.adopted))
        elif isinstance(i, Promote):
            out.append(("promote", i.event, i.key, i.rank))
        elif isinstance(i, Evict):
            out.append(("evict", i.event, i.key))
        elif isinstance(i, Cancel):
            out.append(("cancel", i.event, i.agent, i.key))
        elif isinstance(i, Stop):
            out.append(("stop", i.event, i.reason))
    return out


def test_tournament_fresh_agents_then_adopt_a_better_entry():
    m = make()
    assert shape(m.handle(CapacityChanged(2))) == [
        ("train", 1, 0, "k0", None, 0, False), ("train", 1, 1, "k1", None, 0, False)]
    assert shape(finished(m, 0, -1000.0)) == [("promote", 2, "k0", 0), ("train", 2, 0, "k2", "k0", 1, False)]
    assert shape(finished(m, 1, -500.0)) == [("promote", 3, "k1", 0), ("train", 3, 1, "k3", "k1", 1, False)]
    out = finished(m, 0, -900.0)  # agent 0 improved but k1 is better: it adopts k1
    assert shape(out) == [("promote", 4, "k2", 1), ("evict", 4, "k0"), ("train", 4, 0, "k4", "k1", 1, True)]
    lr = out[-1].plan.hparams["actor_lr"]
    assert lr == pytest.approx(1e-3 * 1.25) or lr == pytest.approx(1e-3 / 1.25)
    # the perturbed rate is the agent's own now: it stays when the agent keeps training
    assert m.agents[0].hparams["actor_lr"] == lr
    assert m.board[0]["group"] == "sac" and [e["key"] for e in m.board] == ["k1", "k2"]


def test_target_stops_and_cancels_the_others():
    m = make()
    m.handle(CapacityChanged(2))
    assert shape(finished(m, 1, -120.0)) == [("promote", 2, "k1", 0), ("cancel", 2, 0, "k0"), ("stop", 2, "target")]
    assert m.handle(CapacityChanged(4)) == []  # a stopped machine starts nothing


def test_capacity_shrinks_lowest_ranked_first_and_grows_back():
    m = make()
    m.handle(CapacityChanged(3))
    finished(m, 0, -800.0)
    finished(m, 1, -300.0)  # agents 0, 1 run again (k3, k4); agent 2 still runs k2 and has no score
    assert shape(m.handle(CapacityChanged(1))) == [("cancel", 4, 2, "k2"), ("cancel", 4, 0, "k3")]
    assert [a.id for a in m.active_agents()] == [1]
    out = m.handle(CapacityChanged(3))  # the retired agent with a score comes back first, then the other
    assert [(i.agent, i.plan.parent) for i in out] == [(0, "k1"), (2, "k1")]
    assert all(i.plan.adopted for i in out)


def test_failures_in_a_row_stop_the_run():
    m = make()
    m.handle(CapacityChanged(1))
    outs = [m.handle(SegmentFailed(0, m.agents[0].running, "boom")) for _ in range(3)]
    assert shape(outs[0]) == [("train", 2, 0, "k1", None, 0, False)]
    assert shape(outs[2]) == [("stop", 4, "failing")]


def test_budget_stop_still_records_what_finishes():
    m = make()
    m.handle(CapacityChanged(2))
    assert shape(m.handle(BudgetReached())) == [("stop", 2, "budget")]
    assert shape(finished(m, 0, -700.0)) == [("promote", 3, "k0", 0)]  # recorded; nothing new started


def test_max_segments_counts_this_invocation():
    m = Scripted(config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "max_segments": 3}}),
                 key_factory=lambda i: f"k{i}")
    assert len(m.handle(CapacityChanged(2))) == 2
    assert [type(i) for i in finished(m, 0, -900.0)] == [Promote, Train]
    assert [type(i) for i in finished(m, 1, -800.0)] == [Promote]  # 3 started: no fourth
    assert shape(finished(m, 0, -700.0))[-1] == ("stop", 4, "max_segments")


def test_pbt_bottom_quantile_copies_the_top():
    m = make("pbt", quantile=0.25, replay="reset")
    m.handle(CapacityChanged(4))
    for agent, score in [(0, -900.0), (1, -300.0), (2, -600.0)]:
        finished(m, agent, score)  # each keeps training: not yet in a scored bottom quantile
    out = finished(m, 3, -1000.0)  # agent 3 is the worst of four: it copies the best, agent 1
    train = out[-1]
    assert (train.agent, train.plan.parent, train.plan.adopted, train.plan.load_replay) == (3, "k1", True, False)
    assert m.agents[1].checkpoint == "k1" and m.agents[1].running == "k5"


def test_generational_waits_for_the_whole_generation():
    m2 = make("generational", quantile=0.5)
    m2.handle(CapacityChanged(2))
    assert not any(isinstance(i, Train) for i in finished(m2, 0, -900.0))  # the barrier holds
    out = [i for i in finished(m2, 1, -400.0) if isinstance(i, Train)]
    assert [(i.agent, i.plan.parent, i.plan.adopted) for i in out] == [(0, "k1", True), (1, "k1", False)]


def test_random_search_never_adopts_and_draws_from_the_prior():
    m = make("random", search={"actor_lr": {"log_uniform": [1e-4, 1e-2]}, "hidden": {"choice": [[32, 32], [64, 64]]}})
    first = m.handle(CapacityChanged(3))
    lrs = [i.plan.hparams["actor_lr"] for i in first]
    assert len(set(lrs)) == 3 and all(1e-4 <= lr <= 1e-2 for lr in lrs)
    assert all(tuple(i.plan.hparams["hidden"]) in {(32, 32), (64, 64)} for i in first)
    finished(m, 1, -200.0)
    out = finished(m, 0, -1500.0)
    assert [(i.agent, i.plan.parent, i.plan.adopted) for i in out if isinstance(i, Train)] == [(0, "k0", False)]


def test_mixed_groups_share_the_board_but_adopt_only_their_own_kind():
    m = make(groups=[{"algorithm": "sac", "hparams": {"hidden": [32, 32]}},
                     {"name": "ppo-small", "algorithm": "ppo", "env_steps": 4096}], fresh_agents=1, perturb=[])
    out = m.handle(CapacityChanged(4))
    assert [(i.agent, i.group, i.env_steps) for i in out] == [
        (0, "sac", 4000), (1, "ppo-small", 4096), (2, "sac", 4000), (3, "ppo-small", 4096)]
    finished(m, 1, -300.0)
    out = finished(m, 0, -900.0)  # the board's best is a PPO entry: a SAC agent cannot adopt it
    assert [(i.agent, i.plan.parent) for i in out if isinstance(i, Train)] == [(0, "k0")]


def test_a_resumed_machine_continues_its_agents():
    m = make()
    m.handle(CapacityChanged(2))
    finished(m, 0, -800.0)
    finished(m, 1, -600.0)
    again = Scripted(m.config, m.board, m.to_state(), key_factory=lambda i: f"r{i}")
    assert again.counters["segments_started"] == 4 and again.counters["segments_completed"] == 2
    out = again.handle(CapacityChanged(2))
    assert sorted(i.agent for i in out) == [0, 1] and {i.key for i in out} == {"r4", "r5"}
    assert all(i.plan.parent in {"k0", "k1"} for i in out)
