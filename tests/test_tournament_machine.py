"""The tournament state machine, without a cluster: scripted events in, exact instructions out.

Every assertion compares whole instruction objects (all fields: hyper-parameters, seeds, plans),
so any change in a decision shows up here.
"""

import pytest

from dask_podracer.config import config_from_dict
from dask_podracer.population import (BudgetReached, CapacityChanged, Cancel, CheckpointDamaged, Evict, Promote,
                                      Quarantine, SegmentFailed, SegmentFinished, SegmentRecovered, Stop, Tournament,
                                      Train, segment_spec)
from dask_podracer.population.strategies import Plan
from dask_podracer.train import SegmentResult


class Scripted(Tournament):
    """The machine under test, remembering the last Train of each agent so a test can finish it."""

    def handle(self, event):
        out = super().handle(event)
        assert self.running == len(self.running_agents())  # the kept count never drifts from a scan
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


def result(key, score, parent=None, generation=0, hparams=None, algorithm="sac", stderr=0.0):
    return SegmentResult(key=key, parent=parent, algorithm=algorithm, env="Pendulum-v1", hparams=hparams or {},
                         score=score, segment_env_steps=100, lineage_env_steps=100, train_seconds=1.0, eval_seconds=0.1,
                         generation=generation, device="cpu", metrics={}, score_stderr=stderr)


def finished(machine, agent, score, stderr=0.0):
    train = machine.last_train[agent]
    algorithm = machine.config.group(train.group).algorithm
    return machine.handle(SegmentFinished(agent, result(train.key, score, train.plan.parent, train.plan.generation,
                                                        train.plan.hparams, algorithm, stderr)))


def train(event, agent, index, parent=None, generation=0, hparams=None, adopted=False, load_replay=True,
          group="sac", env_steps=4000, seed=0, key=None, share_replay=False):
    """The Train the machine must emit: segment `index` has key k<index> and seed run.seed * 1_000_003 + index;
    the rest of what its segment needs is the config's (these tests' configs leave [segment] at its defaults)."""
    return Train(event, agent, key or f"k{index}", group, Plan(parent, hparams, generation, load_replay, adopted),
                 seed=seed * 1_000_003 + index, env_step_budget=env_steps,
                 algorithm="ppo" if group.startswith("ppo") else "sac", env="Pendulum-v1", env_kwargs={},
                 eval_env_kwargs={}, seconds=0.0, eval_episodes=10, device="auto", torch_threads=1,
                 share_replay=share_replay)


def perturbed(machine, old_hparams, out_train):
    """The child's actor_lr is the parent's times or over 1.25 (a seeded coin); everything else is the parent's."""
    lr = out_train.plan.hparams["actor_lr"]
    assert lr in (pytest.approx(old_hparams["actor_lr"] * 1.25), pytest.approx(old_hparams["actor_lr"] / 1.25))
    return {**old_hparams, "actor_lr": lr}


def test_tournament_fresh_agents_then_adopt_a_better_entry():
    m = make()
    H = dict(m.config.hparams)
    assert m.handle(CapacityChanged(2)) == [train(1, 0, 0, hparams=H), train(1, 1, 1, hparams=H)]
    assert finished(m, 0, -1000.0) == [Promote(2, "k0", 0), train(2, 0, 2, "k0", 1, H)]
    assert finished(m, 1, -500.0) == [Promote(3, "k1", 0), train(3, 1, 3, "k1", 1, H)]
    out = finished(m, 0, -900.0)  # agent 0 improved but k1 is better: it adopts k1, perturbed
    child = perturbed(m, H, out[-1])
    assert out == [Promote(4, "k2", 1), Evict(4, "k0"), train(4, 0, 4, "k1", 1, child, adopted=True)]
    assert m.agents[0].hparams == child  # the child's rate is the agent's own now, kept when it keeps training
    assert [(e["key"], e["group"], e["score"]) for e in m.board] == [("k1", "sac", -500.0), ("k2", "sac", -900.0)]
    assert finished(m, 0, -400.0) == [Promote(5, "k4", 0), Evict(5, "k2"), train(5, 0, 5, "k4", 2, child)]


@pytest.mark.parametrize("margin, adopts", [(0.0, True), (2.0, False)])
def test_a_leader_keeps_its_line_unless_an_entry_beats_it_beyond_the_entrys_noise(margin, adopts):
    m = make(adopt_margin=margin)
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    finished(m, 0, -250.0, stderr=20.0)
    finished(m, 1, -240.0, stderr=20.0)  # agent 1's entry tops the board by 10: within 2 of its errors
    assert m.board[0]["key"] == "k1" and m.board[0]["score_stderr"] == 20.0
    finished(m, 0, -250.0, stderr=20.0)  # agent 0's line again (k2): still 10 behind
    last = m.last_train[0]
    if adopts:
        assert last.plan.parent == "k1" and last.plan.adopted
    else:
        assert last == train(4, 0, 4, "k2", 2, H)  # keeps training its own line
    # far behind, it adopts whatever the margin, however noisy its own score was
    finished(m, 0, -900.0, stderr=300.0)
    assert m.last_train[0].plan.parent == "k1" and m.last_train[0].plan.adopted


def test_a_line_is_judged_only_after_ready_segments():
    m = make(ready=2)
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    assert finished(m, 1, -500.0) == [Promote(2, "k1", 0), train(2, 1, 2, "k1", 1, H)]
    # agent 0's first segment is far behind k1, but one segment does not judge a line: it keeps training
    assert finished(m, 0, -1000.0) == [Promote(3, "k0", 1), train(3, 0, 3, "k0", 1, H)]
    out = finished(m, 0, -1000.0)  # its second: now it adopts k1
    child = perturbed(m, H, out[-1])
    assert out[-1] == train(4, 0, 4, "k1", 1, child, adopted=True)
    assert m.agents[0].line_segments == 0
    # the adopted line starts its own count: its first segment, however bad, is not judged either
    assert finished(m, 0, -1100.0)[-1] == train(5, 0, 5, "k4", 2, child)
    assert m.agents[0].line_segments == 1


def test_ready_one_judges_a_line_on_its_first_segment():
    m = make(ready=1)
    m.handle(CapacityChanged(2))
    finished(m, 1, -500.0)
    out = finished(m, 0, -1000.0)
    assert out[-1].plan.parent == "k1" and out[-1].plan.adopted


def test_an_entry_is_adopted_only_once_it_beats_the_first_segments_by_the_progress_margin():
    m = make(progress_margin=3.0)
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    assert finished(m, 0, -1000.0, stderr=50.0) == [Promote(2, "k0", 0), train(2, 0, 2, "k0", 1, H)]
    # k0 beats agent 1's first segment by 200, but k0 is a first segment itself: nothing learned yet
    assert finished(m, 1, -1200.0, stderr=50.0) == [Promote(3, "k1", 1), train(3, 1, 3, "k1", 1, H)]
    assert m.first_segments == {"sac": (-1000.0, 50.0)}
    # k2 is 150 above the best first segment: under 3 * hypot(50, 50) = 212, so it may be luck
    assert finished(m, 0, -850.0, stderr=50.0) == [Promote(4, "k2", 0), Evict(4, "k1"),
                                                   train(4, 0, 4, "k2", 2, H)]
    assert finished(m, 1, -1300.0, stderr=50.0) == [train(5, 1, 5, "k3", 2, H)]
    # k4 is 300 above: learned, and agent 1 adopts it
    assert finished(m, 0, -700.0, stderr=50.0) == [Promote(6, "k4", 0), Evict(6, "k0"),
                                                   train(6, 0, 6, "k4", 3, H)]
    out = finished(m, 1, -1300.0, stderr=50.0)
    assert out == [train(7, 1, 7, "k4", 3, perturbed(m, H, out[-1]), adopted=True)]


def test_a_new_agent_starts_fresh_while_no_entry_has_learned():
    m = make(progress_margin=3.0, fresh_agents=1)
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(1))
    finished(m, 0, -1000.0, stderr=50.0)
    # the pool grows: the board holds fresh_agents entries, but its only one is a first segment
    assert m.handle(CapacityChanged(2)) == [train(3, 1, 2, hparams=H)]


def test_the_first_segments_survive_a_resume_and_an_old_state_falls_back_to_the_board():
    m = make(progress_margin=3.0)
    m.handle(CapacityChanged(2))
    finished(m, 0, -1000.0, stderr=50.0)
    finished(m, 1, -1200.0, stderr=40.0)
    again = Scripted(m.config, m.board, m.to_state(), key_factory=lambda i: f"k{i}")
    assert again.first_segments == {"sac": (-1000.0, 50.0)}
    state = {k: v for k, v in m.to_state().items() if k != "first_segments"}  # saved by an older version
    assert Scripted(m.config, m.board, state).first_segments == {"sac": (-1000.0, 50.0)}


def test_pbt_leaves_a_line_alone_until_it_is_ready():
    m = make("pbt", quantile=0.25, ready=2)
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(4))
    for agent, score in [(0, -900.0), (1, -300.0), (2, -600.0)]:
        finished(m, agent, score)
    assert finished(m, 3, -1000.0) == [train(5, 3, 7, "k3", 1, H)]  # the worst, but after one segment only
    out = finished(m, 3, -1000.0)
    assert out[-1].plan.parent == "k1" and out[-1].plan.adopted


def softmax_picks(temperature, draws=30):
    """Parents the worst agent adopts, over `draws` segments, when the top two entries score -200 and -1000."""
    m = make(selection="softmax", softmax_temperature=temperature, select_from_top=2, leaderboard_size=4)
    m.handle(CapacityChanged(3))
    finished(m, 0, -1000.0)
    finished(m, 1, -200.0)
    return m, [finished(m, 2, -1500.0 - i)[-1].plan.parent for i in range(draws)]


def test_softmax_selection_follows_the_scores():
    _, picks = softmax_picks(0.05)
    assert set(picks) == {"k1"}  # a cold softmax over standardised scores takes the best
    _, picks = softmax_picks(100.0)
    assert {"k0", "k1"} == set(picks)  # a hot one picks both
    m = make(selection="softmax", softmax_temperature=0.05, select_from_top=2, leaderboard_size=4)
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(3))
    finished(m, 0, -1000.0)
    finished(m, 1, -200.0)
    out = finished(m, 2, -1500.0)
    assert out == [Promote(4, "k2", 2), train(4, 2, 5, "k1", 1, perturbed(m, H, out[-1]), adopted=True)]


def test_target_stops_and_cancels_the_others():
    m = make()
    m.handle(CapacityChanged(2))
    assert finished(m, 1, -120.0) == [Promote(2, "k1", 0), Cancel(2, 0, "k0", "target"), Stop(2, "target")]
    assert m.handle(CapacityChanged(4)) == []  # a stopped machine starts nothing


def test_capacity_shrinks_lowest_ranked_first_and_grows_back():
    m = make()
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(3))
    finished(m, 0, -800.0)
    finished(m, 1, -300.0)  # agents 0, 1 run again (k3, k4); agent 2 still runs k2 and has no score
    assert m.handle(CapacityChanged(1)) == [Cancel(4, 2, "k2", "capacity"), Cancel(4, 0, "k3", "capacity")]
    assert [a.id for a in m.active_agents()] == [1]
    out = m.handle(CapacityChanged(3))  # the retired agent with a score comes back first, then the other
    assert out == [train(5, 0, 5, "k1", 1, perturbed(m, H, out[0]), adopted=True),
                   train(5, 2, 6, "k1", 1, perturbed(m, H, out[1]), adopted=True)]


def test_failures_in_a_row_stop_the_run():
    m = make()
    H = dict(m.config.hparams)
    assert m.handle(CapacityChanged(1)) == [train(1, 0, 0, hparams=H)]
    assert m.handle(SegmentFailed(0, "k0", "boom")) == [train(2, 0, 1, hparams=H)]
    assert m.handle(SegmentFailed(0, "k1", "boom")) == [train(3, 0, 2, hparams=H)]
    assert m.handle(SegmentFailed(0, "k2", "boom")) == [Stop(4, "failing")]
    assert m.counters["segments_failed"] == 3


def test_a_quarantined_parent_is_evicted_and_its_agents_start_again():
    m = make()
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    finished(m, 0, -700.0)  # k0 on the board; agent 0 trains on from it (k2)
    finished(m, 1, -900.0)  # k1 on the board; agent 1 adopts k0 (better), as k3
    out = m.handle(SegmentFailed(0, "k2", "ChecksumError: k0", damaged="k0"))
    # k0 is quarantined and leaves the board; agent 0 (whose checkpoint was k0) starts fresh: the board has 1
    # entry < fresh_agents
    assert out == [Quarantine(4, "k0", "ChecksumError: k0"), Evict(4, "k0"), train(4, 0, 4, hparams=H)]
    assert [e["key"] for e in m.board] == ["k1"] and m.agents[0].checkpoint is None


def test_budget_stop_still_records_what_finishes():
    m = make()
    m.handle(CapacityChanged(2))
    assert m.handle(BudgetReached()) == [Stop(2, "budget")]
    assert finished(m, 0, -700.0) == [Promote(3, "k0", 0)]  # recorded; nothing new started


def test_max_segments_counts_this_invocation():
    m = Scripted(config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "max_segments": 3}}),
                 key_factory=lambda i: f"k{i}")
    H = dict(m.config.hparams)
    assert m.handle(CapacityChanged(2)) == [train(1, 0, 0, hparams=H), train(1, 1, 1, hparams=H)]
    assert finished(m, 0, -900.0) == [Promote(2, "k0", 0), train(2, 0, 2, "k0", 1, H)]
    assert finished(m, 1, -800.0) == [Promote(3, "k1", 0)]  # 3 started: no fourth
    assert finished(m, 0, -700.0) == [Promote(4, "k2", 0), Stop(4, "max_segments")]


def test_a_resumed_invocation_counts_the_segments_it_already_ran():
    config = config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "max_segments": 3}})
    m = Scripted(config, completed_before=2, key_factory=lambda i: f"k{i}")
    assert m.handle(CapacityChanged(2)) == [train(1, 0, 0, hparams=dict(config.hparams))]  # one left of three
    used_up = Scripted(config, completed_before=3, key_factory=lambda i: f"k{i}")
    assert used_up.handle(CapacityChanged(2)) == [Stop(1, "max_segments")]  # none left: stop, do not wait


def test_pbt_bottom_quantile_copies_the_top():
    m = make("pbt", quantile=0.25, replay="reset")
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(4))
    assert finished(m, 0, -900.0) == [Promote(2, "k0", 0), train(2, 0, 4, "k0", 1, H)]  # alone: keeps training
    assert finished(m, 1, -300.0) == [Promote(3, "k1", 0), train(3, 1, 5, "k1", 1, H)]
    assert finished(m, 2, -600.0) == [Promote(4, "k2", 1), Evict(4, "k0"), train(4, 2, 6, "k2", 1, H)]
    out = finished(m, 3, -1000.0)  # agent 3 is the worst of four: it copies the best (agent 1), buffer reset
    assert out == [train(5, 3, 7, "k1", 1, perturbed(m, H, out[0]), adopted=True, load_replay=False)]


def test_pbt_with_a_shared_replay_loads_the_donors_buffer():
    m = make("pbt", quantile=0.25, replay="share")
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(4))
    for agent, score in [(0, -900.0), (1, -300.0), (2, -600.0)]:
        finished(m, agent, score)
    out = finished(m, 3, -1000.0)
    assert out == [train(5, 3, 7, "k1", 1, perturbed(m, H, out[0]), adopted=True, load_replay=True,
                         share_replay=True)]


def test_generational_waits_for_the_whole_generation():
    m = make("generational", quantile=0.5)
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    assert finished(m, 0, -900.0) == [Promote(2, "k0", 0)]  # the barrier holds: nothing starts
    out = finished(m, 1, -400.0)
    assert out == [Promote(3, "k1", 0), train(3, 0, 2, "k1", 1, perturbed(m, H, out[1]), adopted=True),
                   train(3, 1, 3, "k1", 1, H)]


def test_random_search_never_adopts_and_draws_from_the_prior():
    m = make("random", search={"actor_lr": {"log_uniform": [1e-4, 1e-2]}, "hidden": {"choice": [[32, 32], [64, 64]]}})
    first = m.handle(CapacityChanged(3))
    drawn = [i.plan.hparams for i in first]
    assert first == [train(1, a, a, hparams=drawn[a]) for a in range(3)]
    assert len({h["actor_lr"] for h in drawn}) == 3 and all(1e-4 <= h["actor_lr"] <= 1e-2 for h in drawn)
    assert all(tuple(h["hidden"]) in {(32, 32), (64, 64)} for h in drawn)
    again = make("random", search={"actor_lr": {"log_uniform": [1e-4, 1e-2]},
                                   "hidden": {"choice": [[32, 32], [64, 64]]}})
    assert again.handle(CapacityChanged(3)) == first  # the same seed draws the same agents
    finished(m, 1, -200.0)
    assert finished(m, 0, -1500.0) == [Promote(3, "k0", 1), train(3, 0, 4, "k0", 1, drawn[0])]


def test_children_resample_from_the_prior_when_asked():
    m = make(search={"actor_lr": {"log_uniform": [1e-5, 1e-4]}}, resample_probability=1.0)
    m.handle(CapacityChanged(2))
    finished(m, 0, -1000.0)
    finished(m, 1, -500.0)
    out = finished(m, 0, -900.0)  # adopts k1 and redraws actor_lr from its prior (always, at probability 1)
    lr = out[-1].plan.hparams["actor_lr"]
    assert 1e-5 <= lr <= 1e-4 and out[-1].plan.adopted and out[-1].plan.parent == "k1"


def test_mixed_groups_share_the_board_but_adopt_only_their_own_kind():
    m = make(groups=[{"algorithm": "sac", "hparams": {"hidden": [32, 32]}},
                     {"name": "ppo-small", "algorithm": "ppo", "env_steps": 4096}], fresh_agents=1, perturb=[])
    sac, ppo = (dict(g.hparams) for g in m.config.groups)
    assert m.handle(CapacityChanged(4)) == [
        train(1, 0, 0, hparams=sac), train(1, 1, 1, hparams=ppo, group="ppo-small", env_steps=4096),
        train(1, 2, 2, hparams=sac), train(1, 3, 3, hparams=ppo, group="ppo-small", env_steps=4096)]
    assert finished(m, 1, -300.0) == [Promote(2, "k1", 0),
                                      train(2, 1, 4, "k1", 1, ppo, group="ppo-small", env_steps=4096)]
    # the board's best is a PPO entry: a SAC agent cannot adopt it, and keeps training its own
    assert finished(m, 0, -900.0) == [Promote(3, "k0", 1), train(3, 0, 5, "k0", 1, sac)]
    assert [e["group"] for e in m.board] == ["ppo-small", "sac"]


def test_a_resumed_machine_continues_its_agents():
    m = make()
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    finished(m, 0, -800.0)
    finished(m, 1, -600.0)  # agent 0 runs k2, agent 1 runs k3 when the state is saved
    again = Scripted(m.config, m.board, m.to_state(), key_factory=lambda i: f"k{i}")
    assert again.counters["segments_started"] == 4 and again.counters["segments_completed"] == 2
    assert again.in_flight == {"k2": 0, "k3": 1}
    out = again.handle(CapacityChanged(2))  # agent 1 comes back first (better ranked), agent 0 adopts its k1
    assert out == [train(4, 0, 4, "k1", 1, perturbed(again, H, out[0]), adopted=True), train(4, 1, 5, "k1", 1, H)]


def test_a_recovered_segment_is_ranked_and_continued_from():
    m = make()
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    finished(m, 0, -800.0)  # agent 0 trains k2 from k0 when the client dies
    again = Scripted(m.config, m.board, m.to_state(), key_factory=lambda i: f"k{i}")
    # k2 finished after the last write: found in the store, it is ranked and agent 0 continues from it
    assert again.handle(SegmentRecovered(0, result("k2", -400.0, "k0", 1, H), resumed=True)) == [Promote(3, "k2", 0)]
    assert again.agents[0].checkpoint == "k2" and again.completed_now == 1
    # a stray checkpoint nobody knew of (its submit was never saved) is ranked, but moves no agent; it
    # reached the target, so the run stops
    assert again.handle(SegmentRecovered(None, result("k9", -100.0))) == [
        Promote(4, "k9", 0), Evict(4, "k0"), Stop(4, "target")]
    assert again.agents[1].checkpoint is None and again.completed_now == 1


def test_the_updater_enters_a_key_once_and_keeps_the_board_ranked():
    from dask_podracer.population.updater import update_leaderboard

    board, rank = update_leaderboard([], result("a", -500.0), size=2)
    assert rank == 0 and [e["key"] for e in board] == ["a"]
    again, rank = update_leaderboard(board, result("a", -100.0), size=2)  # the same segment, run twice by Dask
    assert rank is None and again == board
    board, rank = update_leaderboard(board, result("b", -300.0), size=2)
    assert rank == 0 and [e["key"] for e in board] == ["b", "a"]
    full, rank = update_leaderboard(board, result("c", -500.0), size=2)  # a tie with the K-th does not enter
    assert rank is None and full == board
    board, rank = update_leaderboard(board, result("d", -400.0), size=2)
    assert rank == 1 and [(e["key"], e["score"]) for e in board] == [("b", -300.0), ("d", -400.0)]


def test_a_child_can_change_its_ensembles_size_and_combination():
    m = make(perturb=["num_critics", "target_combine"])
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    finished(m, 0, -1000.0)
    finished(m, 1, -500.0)
    child = finished(m, 0, -900.0)[-1].plan  # agent 0 adopts k1 and explores both
    assert child.parent == "k1" and child.adopted
    assert child.hparams["num_critics"] in (H["num_critics"] - 1, H["num_critics"] + 1)
    assert child.hparams["target_combine"] != H["target_combine"]
    assert child.hparams["target_combine"] in ("min", "mean", "redq", "weighted")


def test_an_event_the_machine_has_no_rule_for_raises_and_changes_nothing():
    machine = make()
    machine.handle(CapacityChanged(2))
    before = machine.to_state()

    class Unknown:
        pass

    with pytest.raises(TypeError, match="the tournament has no rule for a Unknown event"):
        machine.handle(Unknown())
    assert machine.to_state() == before and not machine.stopped  # not taken for a BudgetReached


def test_a_checkpoint_damaged_on_resume_is_quarantined_by_the_machine():
    m = make()
    m.handle(CapacityChanged(2))
    finished(m, 0, -700.0)
    assert m.handle(CheckpointDamaged("k0", "ChecksumError: k0")) == [Quarantine(3, "k0", "ChecksumError: k0"),
                                                                     Evict(3, "k0")]
    assert m.board == [] and m.agents[0].checkpoint is None


def test_the_spec_is_built_from_the_instruction_alone():
    m = make(replay="share")
    m.config = m.config.replace(env_kwargs={"g": 4.0}, eval_env_kwargs={"g": 9.0})
    out = m.handle(CapacityChanged(1))
    spec = segment_spec(out[0], "runs/x.zarr", seconds_left=30.0)
    assert (spec.key, spec.algorithm, spec.env, spec.env_kwargs, spec.eval_env_kwargs) == (
        "k0", "sac", "Pendulum-v1", {"g": 4.0}, {"g": 9.0})
    assert spec.share_replay and spec.env_step_budget == 4000 and spec.store_url == "runs/x.zarr"
    assert spec.seconds == 30.0  # no segment.seconds: the run's budget left caps it
    assert segment_spec(out[0], "s", seconds_left=0.0).seconds == 1.0  # never 0, which would mean no limit
    capped = make(replay="share")
    capped.config = config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac"},
                                      "segment": {"seconds": 20.0, "env_steps": 0}})
    first = capped.handle(CapacityChanged(1))[0]
    assert segment_spec(first, "s", 300.0).seconds == 20.0 and segment_spec(first, "s", 5.0).seconds == 5.0


def test_a_large_pool_starts_in_the_groups_weights():
    # the agents of a pool are made in one pass (counting the groups for each new agent grew with the square
    # of the pool: 29 s for 30,000 agents); the groups' weights and the agents' order are as they were
    wide = {"name": "wide", "algorithm": "sac", "weight": 3.0, "hparams": {"hidden": [32, 32]}}
    m = make(groups=[{"algorithm": "sac"}, wide], pool_size=4000, perturb=[])
    out = m.handle(CapacityChanged(2))
    assert [i.agent for i in out] == list(range(4000)) and [i.key for i in out] == [f"k{i}" for i in range(4000)]
    assert [i.group for i in out[:8]] == ["wide", "wide", "sac", "wide", "wide", "wide", "sac", "wide"]
    assert sum(i.group == "sac" for i in out) == 1000 and sum(i.group == "wide" for i in out) == 3000
