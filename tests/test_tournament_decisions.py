"""The tournament's decisions over what a segment starts from, checked on the state machine (no cluster): what an
agent keeps when a segment it started fails or is cancelled, what a donor passes on."""

import math

import pytest
from test_tournament_machine import finished, make, result

from dask_podracer.population import CapacityChanged, Evict, SegmentFailed, SegmentRecovered, Tournament, Train
from dask_podracer.population.strategies import Plan
from dask_podracer.population.updater import leaderboard_entry


def _ratio(child: dict, parent: dict) -> float:
    return child["actor_lr"] / parent["actor_lr"]


def _adopting_agent():
    """Agent 0 trained k0 (-1000) then k2 (-900) with the config's hparams H; k1 (-500, agent 1) is better, so
    agent 0 now trains k4: k1's checkpoint with a perturbed actor_lr."""
    m = make()
    H = dict(m.config.hparams)
    m.handle(CapacityChanged(2))
    finished(m, 0, -1000.0)
    finished(m, 1, -500.0)
    finished(m, 0, -900.0)
    adopting = m.last_train[0]
    assert adopting.plan.parent == "k1" and adopting.plan.adopted and adopting.plan.hparams != H
    assert m.agents[0].checkpoint == "k2"
    return m, H, adopting


def test_an_agent_whose_adopting_segment_fails_is_back_on_its_own_line():
    m, H, adopting = _adopting_agent()
    out = m.handle(SegmentFailed(0, adopting.key, "boom"))
    again = [i for i in out if isinstance(i, Train)][0]
    # its line is judged again, as before it adopted: it adopts k1 afresh, perturbed from k1's own rate. Before, it
    # kept training its own k2 with the failed child's rate (a perturbation of k1's) and a line count of 0
    assert again.plan.parent == "k1" and again.plan.adopted
    assert _ratio(again.plan.hparams, H) in (pytest.approx(1.25), pytest.approx(0.8))


def test_an_agent_whose_adopting_segment_is_cancelled_keeps_its_checkpoints_hyper_parameters():
    m, H, adopting = _adopting_agent()
    m.handle(CapacityChanged(1))  # agent 0 ranks lowest (-900): its adopting segment is cancelled
    agent = m.agents[0]
    assert not agent.active and agent.running is None and agent.checkpoint == "k2"
    assert agent.hparams == H and agent.line_segments == 2  # k2's, as the state a resumed run reads says
    assert m.to_state()["agents"][0]["hparams"] == H


def test_a_pbt_donor_training_a_child_passes_on_its_checkpoints_hyper_parameters():
    m = make("pbt", search={"actor_lr": {"log_uniform": [1e-5, 1e-1]}})
    m.handle(CapacityChanged(2))
    H0, H1 = dict(m.agents[0].hparams), dict(m.agents[1].hparams)
    assert not math.isclose(H0["actor_lr"], H1["actor_lr"])
    finished(m, 0, -300.0)
    finished(m, 1, -400.0)  # the bottom one: agent 1 adopts k0
    assert m.last_train[1].plan.parent == "k0" and m.last_train[1].plan.adopted
    finished(m, 0, -1000.0)  # now agent 0 is the bottom one, and agent 1 (still on k1, -400) the donor
    child = m.last_train[0]
    assert child.plan.parent == "k1" and child.plan.adopted
    # k1 was trained with H1; before, the child perturbed agent 1's running child (a perturbation of H0)
    assert _ratio(child.plan.hparams, H1) in (pytest.approx(1.25), pytest.approx(0.8))


def test_a_resumed_agent_whose_adopting_segment_was_lost_is_back_on_its_own_line():
    m, H, adopting = _adopting_agent()
    state = m.to_state()
    lost = Tournament(m.config, board=m.board, state=state)
    assert lost.agents[0].hparams == H and lost.agents[0].line_segments == 2 and lost.agents[0].checkpoint == "k2"
    # the same segment recovered (it finished after the state was written): the agent is on the adopted line now
    found = Tournament(m.config, board=m.board, state=state)
    found.handle(SegmentRecovered(0, result(adopting.key, -450.0, "k1", 1, adopting.plan.hparams)))
    agent = found.agents[0]
    assert (agent.checkpoint, agent.hparams, agent.line_segments) == (adopting.key, adopting.plan.hparams, 1)
    assert agent.left_line is None


def test_a_child_that_finishes_keeps_its_hyper_parameters_and_starts_its_line():
    m, H, adopting = _adopting_agent()
    out = finished(m, 0, -450.0)
    assert out[-1].plan == Plan(adopting.key, adopting.plan.hparams, 2)  # keeps training the child's line
    assert m.agents[0].line_segments == 1 and m.agents[0].left_line is None


def test_a_recovered_result_of_no_known_agent_is_filed_under_the_group_it_was_trained_in():
    # two groups of one algorithm: a result that no saved agent names was filed under the first, so that group's
    # agents adopted networks of the other's widths (and a later resume refused the store for that entry)
    wide = {"name": "wide", "algorithm": "sac", "hparams": {"hidden": [32, 32]}}
    m = make(groups=[{"algorithm": "sac"}, wide], perturb=[], fresh_agents=1)
    m.handle(CapacityChanged(2))
    assert [(a.group, a.hparams["hidden"]) for a in m.agents.values()] == [("sac", (128, 128)), ("wide", (32, 32))]
    stored = {**m.agents[1].hparams, "hidden": [32, 32]}  # as a checkpoint's attributes hold it: a JSON list
    m.handle(SegmentRecovered(None, result("old", -500.0, None, 0, stored)))
    assert [(e["key"], e["group"]) for e in m.board] == [("old", "wide")]
    out = finished(m, 0, -900.0)  # the sac agent: nothing of its group to adopt
    assert out[-1].plan.parent == "k0" and out[-1].plan.hparams["hidden"] == (128, 128)


def test_a_board_resumed_under_a_smaller_leaderboard_size_evicts_what_it_cuts():
    # the machine cut the board to K without an Evict when the result did not enter, so the store's table was not
    # rewritten and still listed entries whose checkpoints retention (which reads the machine's board) may delete
    board = [leaderboard_entry(result(f"e{i}", -200.0 - i), "sac") for i in range(4)]
    m = make(leaderboard_size=2, perturb=[])
    m = type(m)(m.config, board=board, key_factory=m.key_factory)
    m.handle(CapacityChanged(1))
    out = finished(m, 0, -900.0)
    assert out[:2] == [Evict(2, "e2"), Evict(2, "e3")] and [e["key"] for e in m.board] == ["e0", "e1"]


def test_perturbing_a_float_that_is_zero_is_refused_unless_a_prior_redraws_it():
    # ppo's ent_coef is 0.0 by default, and a factor never moves 0: `perturb = ["ent_coef"]` changed nothing
    from dask_podracer.config import ConfigError, config_from_dict

    base = {"run": {"env": "Pendulum-v1", "algorithm": "ppo"}, "tournament": {"perturb": ["ent_coef"]}}
    with pytest.raises(ConfigError, match=r"tournament.perturb: 'ent_coef' is 0.0 in hparams, and multiplying by "
                                          r"perturb_factor never moves 0"):
        config_from_dict(base)
    config_from_dict({**base, "hparams": {"ent_coef": 0.01}})
    config_from_dict({**base, "tournament": {"perturb": ["ent_coef"], "resample_probability": 0.25},
                      "search": {"ent_coef": {"log_uniform": [1e-4, 1e-2]}}})
