"""Resuming a store with a config edited between invocations: what the edit changes, and what it must not lose."""

import numpy as np
import pytest

from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.population import CapacityChanged, SegmentFinished, Tournament, run_tournament
from dask_podracer.population.preflight import check_store_fits
from dask_podracer.population.tournament import Train
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentResult

BASE = {
    "run": {"env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "max_segments": 4, "seed": 1},
    "tournament": {"pool_size": 2, "leaderboard_size": 3, "fresh_agents": 2, "perturb": ["actor_lr"]},
    "segment": {"env_steps": 200, "eval_episodes": 2},
    "hparams": {"hidden": [32, 32], "num_envs": 2, "learning_starts": 100, "batch_size": 64},
}


def config(store: str = "", hparams: dict | None = None, max_segments: int = 0, **tournament):
    return config_from_dict({**BASE, "run": {**BASE["run"], "store": store, "max_segments": max_segments},
                             "tournament": {**BASE["tournament"], **tournament},
                             "hparams": {**BASE["hparams"], **(hparams or {})}})


def result_of(train: Train, score: float) -> SegmentResult:
    return SegmentResult(key=train.key, parent=train.plan.parent, algorithm="sac", env="Pendulum-v1",
                         hparams=train.plan.hparams, score=score, segment_env_steps=200, lineage_env_steps=200,
                         train_seconds=1.0, eval_seconds=0.1, generation=train.plan.generation, device="cpu",
                         metrics={})


def trains(instructions: list) -> list[Train]:
    return [i for i in instructions if isinstance(i, Train)]


def first_invocation() -> Tournament:
    """Two agents, four finished segments: both agents have checkpoints and the board holds three entries."""
    machine = Tournament(config(), key_factory=lambda i: f"k{i}")
    pending = trains(machine.handle(CapacityChanged(2)))
    for score in (-900.0, -800.0, -700.0, -600.0):
        train = pending.pop(0)
        pending += trains(machine.handle(SegmentFinished(train.agent, result_of(train, score))))
    return machine


@pytest.mark.parametrize("strategy", ["tournament", "pbt", "random"])
def test_a_tunable_hyper_parameter_edited_between_invocations_reaches_every_next_segment(strategy):
    # the user stops the run, edits gamma and tau (set by the config for every agent: neither searched nor
    # perturbed) and resumes: the resumed agents, and any entry they adopt, were trained with the old values,
    # which every next segment kept (the edit reached only agents a larger pool would create)
    before = first_invocation()
    assert all(e["hparams"]["gamma"] == 0.99 for e in before.board)
    edited = config(hparams={"gamma": 0.95, "tau": 0.02}, strategy=strategy)
    again = Tournament(edited, before.board, before.to_state(), key_factory=lambda i: f"r{i}")
    resumed = trains(again.handle(CapacityChanged(2)))
    pending = list(resumed)
    for score in (-500.0, -400.0, -300.0, -200.0):  # on to adoptions of the old entries
        train = pending.pop(0)
        started = trains(again.handle(SegmentFinished(train.agent, result_of(train, score))))
        pending += started
        resumed += started
    assert len(resumed) >= 4 and any(t.plan.parent for t in resumed)
    assert [(t.plan.hparams["gamma"], t.plan.hparams["tau"]) for t in resumed] == [(0.95, 0.02)] * len(resumed)
    assert all(a.hparams["gamma"] == 0.95 for a in again.agents.values())  # and the run state says so


def test_a_searched_or_perturbed_hyper_parameter_stays_each_agents_own_on_resume():
    before = first_invocation()
    own = {a.id: a.hparams["actor_lr"] for a in before.agents.values()}
    edited = config(hparams={"actor_lr": 0.5})  # actor_lr is perturbed: the config's value is only a start
    again = Tournament(edited, before.board, before.to_state(), key_factory=lambda i: f"r{i}")
    for train in trains(again.handle(CapacityChanged(2))):
        assert train.plan.hparams["actor_lr"] != 0.5
        if not train.plan.adopted:
            assert train.plan.hparams["actor_lr"] == own[train.agent]


@pytest.mark.slow
def test_a_real_run_resumed_with_an_edited_gamma_trains_with_it_and_keeps_its_records(cpu_client, tmp_path):
    store_path = str(tmp_path / "t.zarr")
    run_tournament(config(store_path, max_segments=4), cpu_client)
    store = PodracerStore(store_path)
    board, history = store.read_leaderboard(), store.read_history()
    summary = run_tournament(config(store_path, hparams={"gamma": 0.9}, max_segments=4), cpu_client)
    assert summary.stop_reason == "max_segments" and summary.segments_failed == 0
    after = store.read_history()
    assert after[:len(history)] == history  # nothing recorded is lost
    assert [r["hparams"]["gamma"] for r in after[len(history):]] == [0.9] * 4
    kept = {e["key"] for e in store.read_leaderboard()}
    assert all(e["key"] in kept or e["score"] < min(x["score"] for x in store.read_leaderboard()) for e in board)


def trading_config(store: str, period: str):
    return config_from_dict({
        "run": {"env": "StockTrading-v0", "env_kwargs": {"market": "synthetic", "episode_days": 20},
                "eval_env_kwargs": {"period": period}, "algorithm": "sac", "max_segments": 2, "seed": 1,
                "store": store},
        "segment": {"env_steps": 100, "eval_episodes": 1},
        "hparams": {"hidden": [16], "num_envs": 2, "learning_starts": 50, "batch_size": 32},
    })


def entry_scored_on(store: PodracerStore, period: str) -> None:
    """A checkpoint scored on `period`'s dates, on the board, as a store written before the run state said what the
    board was scored with holds it."""
    store.save_checkpoint("s000000-aa", {"w": np.zeros(3)}, {
        "algorithm": "sac", "env": "StockTrading-v0", "env_kwargs": {"market": "synthetic", "episode_days": 20},
        "eval_env_kwargs": {"period": period}, "hparams": {}, "parent": None, "generation": 0, "seed": 0,
        "score": 1.0, "env_steps": 100, "segment_env_steps": 100, "structure": {}})
    store.write_leaderboard([{"key": "s000000-aa", "group": "sac", "score": 1.0, "env_steps": 100, "algorithm": "sac",
                              "env": "StockTrading-v0", "env_kwargs": {"market": "synthetic", "episode_days": 20},
                              "parent": None, "generation": 0, "hparams": {"hidden": [16]}}])


def test_a_board_scored_on_other_eval_env_kwargs_is_not_resumed_even_from_an_older_store(tmp_path):
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    entry_scored_on(store, "validation")
    with pytest.raises(ConfigError, match=r"scored with run.eval_env_kwargs \{'period': 'validation'\}, and "
                                          r"run.eval_env_kwargs is \{'period': 'train'\}"):
        check_store_fits(trading_config(store.url, "train"))
    check_store_fits(trading_config(store.url, "validation"))


@pytest.mark.slow
def test_a_run_resumed_with_other_eval_env_kwargs_is_refused_before_anything_is_written(cpu_client, tmp_path):
    # before: the run went on and ranked results scored on the training dates (2.4, 0.9 here) among entries scored
    # on the validation dates (3.4, 3.1), adopting by comparisons of the two
    store_path = str(tmp_path / "s.zarr")
    run_tournament(trading_config(store_path, "validation"), cpu_client)
    store = PodracerStore(store_path)
    board, history, state = store.read_leaderboard(), store.read_history(), store.read_run_state()
    assert state["eval_env_kwargs"] == {"period": "validation"}
    with pytest.raises(ConfigError, match=r"run.eval_env_kwargs is \{'period': 'train'\}: their scores could not"):
        run_tournament(trading_config(store_path, "train"), cpu_client)
    assert (store.read_leaderboard(), store.read_history(), store.read_run_state()) == (board, history, state)
    assert run_tournament(trading_config(store_path, "validation"), cpu_client).segments_completed == 2


def two_groups(weights: tuple[float, float] = (1.0, 1.0), pool_size: int = 2):
    td3 = {"hidden": [16, 16], "num_envs": 2, "learning_starts": 100, "batch_size": 64}
    return config_from_dict({**{k: v for k, v in BASE.items() if k != "hparams"},
                             "run": {**BASE["run"], "algorithm": None, "max_segments": 0},
                             "tournament": {**BASE["tournament"], "pool_size": pool_size},
                             "groups": [{"name": "sac", "algorithm": "sac", "hparams": BASE["hparams"],
                                         "weight": weights[0]},
                                        {"name": "td3", "algorithm": "td3", "hparams": td3, "weight": weights[1]}]})


def test_a_group_added_on_resume_gets_its_share_of_the_pool():
    # before: the pool of 2 filled with the two resumed sac agents, and the new td3 group never trained, silently
    before = first_invocation()
    again = Tournament(two_groups(), before.board, before.to_state(), key_factory=lambda i: f"r{i}")
    started = trains(again.handle(CapacityChanged(2)))
    best = max(before.agents.values(), key=lambda a: a.score)
    assert sorted((t.group, t.agent) for t in started) == [("sac", best.id), ("td3", 2)]
    retired = next(a for a in again.agents.values() if a.group == "sac" and a.id != best.id)
    assert not retired.active and retired.checkpoint == before.agents[retired.id].checkpoint  # kept, may come back
    assert again.board == before.board


def test_weights_edited_on_resume_set_which_agents_train():
    machine = Tournament(two_groups(pool_size=4), key_factory=lambda i: f"k{i}")
    pending = trains(machine.handle(CapacityChanged(4)))
    assert sorted(t.group for t in pending) == ["sac", "sac", "td3", "td3"]
    for score, train in zip((-900.0, -800.0, -700.0, -600.0), list(pending)):
        machine.handle(SegmentFinished(train.agent, result_of(train, score)))
    again = Tournament(two_groups((3.0, 1.0), pool_size=4), machine.board, machine.to_state(),
                       key_factory=lambda i: f"r{i}")
    started = trains(again.handle(CapacityChanged(4)))
    assert sorted(t.group for t in started) == ["sac", "sac", "sac", "td3"]
    assert len(again.agents) == 5 and sum(a.active for a in again.agents.values()) == 4


def dqn_config(store: str, eps_start: list[float], eps_end: float):
    return config_from_dict({
        "run": {"env": "CartPole-v1", "algorithm": "dqn", "store": store, "budget": "3m", "max_segments": 2, "seed": 1},
        "tournament": {"pool_size": 2, "leaderboard_size": 2, "fresh_agents": 2},
        "search": {"eps_start": {"uniform": eps_start}},
        "segment": {"env_steps": 256, "eval_episodes": 1},
        "hparams": {"hidden": [16], "num_envs": 2, "learning_starts": 64, "batch_size": 32, "eps_end": eps_end}})


@pytest.mark.slow
def test_a_config_value_that_contradicts_an_agents_own_drawn_value_is_refused_on_resume(cpu_client, tmp_path):
    # the agents drew eps_start in [0.05, 0.08]; the edit moves the prior to [0.1, 0.2] and sets eps_end = 0.09 for
    # every agent, which is right for new agents and passes the config's checks, but each stored agent would train
    # with eps_end above its own eps_start: every one of their segments failed, after the cluster started
    path = str(tmp_path / "s.zarr")
    run_tournament(dqn_config(path, [0.05, 0.08], 0.01), cpu_client)
    store = PodracerStore(path)
    kept = store.read_leaderboard(), store.read_history(), store.read_run_state()
    with pytest.raises(ConfigError, match=r"holds 'dqn' agent \d, which cannot train with this config's "
                                          r"hparams.eps_end = 0.09 \(set for every agent; .*\): eps_end must be <= "
                                          r"eps_start \(= 0.0\d+\), got 0.09; resume it with the config"):
        run_tournament(dqn_config(path, [0.1, 0.2], 0.09), cpu_client)
    assert (store.read_leaderboard(), store.read_history(), store.read_run_state()) == kept
    # an edit every stored agent can take resumes
    resumed = run_tournament(dqn_config(path, [0.1, 0.2], 0.04), cpu_client)
    assert (resumed.segments_completed, resumed.segments_failed) == (2, 0)
