"""Resuming and collecting a store whose tables a killed client left behind: `podracer gc` keeps what the next run
recovers, a recovered segment moves its agent whatever it started from, and a resume counts what the history
recorded after the last run state."""

import numpy as np

from dask_podracer.cli import main
from dask_podracer.config import config_from_dict
from dask_podracer.population import CapacityChanged, SegmentFinished, SegmentRecovered, Tournament
from dask_podracer.population import orchestrator
from dask_podracer.population.orchestrator import _Loop
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentResult


def save(store: PodracerStore, key: str, parent: str | None, score: float, generation: int = 0) -> None:
    """A checkpoint with the attributes a segment writes (what a recovery reads back), and one small array."""
    store.save_checkpoint(key, {"w": np.zeros(3)}, {
        "algorithm": "sac", "env": "Pendulum-v1", "env_kwargs": {}, "hparams": {}, "parent": parent,
        "generation": generation, "seed": 0, "score": score, "env_steps": 100 * (generation + 1),
        "segment_env_steps": 100, "structure": {}})


def agent_state(**fields) -> dict:
    return {"id": 0, "group": "sac", "hparams": {}, "checkpoint": None, "score": None, "running": None,
            "active": True, **fields}


def record(key: str, status: str, wall: float, parent: str | None = None, **fields) -> dict:
    return {"key": key, "agent": 0, "group": "sac", "parent": parent, "status": status, "wall_seconds": wall,
            "score": -300.0 if status == "finished" else None, "segment_env_steps": 100 if status == "finished" else 0,
            "error": "SegmentError: boom" if status == "failed" else None, **fields}


def test_gc_keeps_a_checkpoint_no_history_record_names_yet(tmp_path, capsys):
    # a client killed between a segment's end and its next table write: s1 is published, its agent was training
    # it, and no record names it; the next run records it and continues from it, so gc must leave it
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    save(store, "s000000-aa", None, -500.0)
    save(store, "s000001-bb", "s000000-aa", -400.0, generation=1)
    save(store, "s000002-cc", None, -900.0)  # recorded, held by nothing: the one gc removes
    # a retired agent's s3 -> s4, recorded after the run state was written: the next run moves agent 1 on to s4
    save(store, "s000003-dd", None, -800.0)
    save(store, "s000004-ee", "s000003-dd", -700.0, generation=1)
    store.extend_history([record("s000000-aa", "finished", 1.0), record("s000002-cc", "finished", 2.0, agent=7),
                          record("s000003-dd", "finished", 3.0, agent=1),
                          record("s000004-ee", "finished", 5.0, "s000003-dd", agent=1)])
    store.write_run_state({"finished": False, "wall_seconds": 4.0, "history_records": 3, "machine": {"agents": [
        agent_state(checkpoint="s000000-aa", running="s000001-bb"),
        agent_state(id=1, checkpoint="s000003-dd", running="s000004-ee", active=False)]}})
    assert main(["gc", store.url]) == 0
    assert "removed s000002-cc" in capsys.readouterr().out
    assert store.checkpoint_keys() == ["s000000-aa", "s000001-bb", "s000003-dd", "s000004-ee"]


def sac_config(**run):
    return config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "seed": 0, **run},
                             "tournament": {"leaderboard_size": 2, "fresh_agents": 2, "perturb": ["actor_lr"]}})


def result(key: str, score: float, parent: str | None, generation: int, hparams: dict) -> SegmentResult:
    return SegmentResult(key=key, parent=parent, algorithm="sac", env="Pendulum-v1", hparams=hparams, score=score,
                         segment_env_steps=100, lineage_env_steps=100, train_seconds=1.0, eval_seconds=0.1,
                         generation=generation, device="cpu", metrics={})


def test_a_recovered_segment_that_adopted_an_entry_moves_its_agent_on():
    m = Tournament(sac_config(), key_factory=lambda i: f"k{i}")
    trains = {t.agent: t for t in m.handle(CapacityChanged(2))}
    for agent, score in ((0, -1000.0), (1, -500.0), (0, -900.0)):
        t = trains[agent]
        out = m.handle(SegmentFinished(agent, result(t.key, score, t.plan.parent, t.plan.generation, t.plan.hparams)))
        trains.update({i.agent: i for i in out if hasattr(i, "plan")})
    adopting = trains[0]
    assert adopting.plan.adopted and adopting.plan.parent == "k1" and m.agents[0].checkpoint == "k2"
    # the client dies while agent 0 trains k4 from agent 1's k1; the next run finds k4 published
    again = Tournament(m.config, m.board, m.to_state(), key_factory=lambda i: f"k{i}")
    again.handle(SegmentRecovered(0, result(adopting.key, -300.0, "k1", adopting.plan.generation,
                                            adopting.plan.hparams), resumed=True))
    assert again.agents[0].checkpoint == adopting.key and again.agents[0].score == -300.0
    assert again.agents[0].hparams == adopting.plan.hparams  # the checkpoint it continues matches its hparams


def resume_loop(store: PodracerStore, **run) -> _Loop:
    """The loop of a run resuming `store`, through its recovery (no cluster needed for that part)."""
    loop = _Loop(sac_config(store=store.url, **run), None, store, None, None, lambda spec: None, 1.0)
    loop._recover()
    return loop


def test_a_resume_counts_what_the_history_recorded_after_the_last_run_state(tmp_path, monkeypatch):
    monkeypatch.setattr(orchestrator, "as_completed", lambda **kwargs: None)  # the loop's queue needs a client
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    save(store, "s000000-aa", None, -500.0)
    save(store, "s000001-bb", "s000000-aa", -400.0, generation=1)
    save(store, "s000002-cc", "s000001-bb", -300.0, generation=2)
    counters = {"events": 3, "segments_started": 2, "segments_completed": 1, "segments_failed": 0, "env_steps": 100}
    # the state was written with one record in the history and agent 0 training s1; the client then wrote three
    # more records (s1, s2 from s1, a failure) and was killed before its next state write
    store.extend_history([record("s000000-aa", "finished", 10.0),
                          record("s000001-bb", "finished", 12.0, "s000000-aa"),
                          record("s000002-cc", "finished", 14.0, "s000001-bb"),
                          record("s000003-dd", "failed", 16.0, "s000002-cc")])
    store.write_leaderboard([])
    state = {"finished": False, "stop_reason": None, "wall_seconds": 10.0, "invocations": 1, "history_records": 1,
             "leg": {"budget_spent": 10.0, "segments": 1},
             "machine": {"counters": counters, "agents": [agent_state(checkpoint="s000000-aa", score=-500.0,
                                                                      running="s000001-bb", segments=1)]}}
    store.write_run_state(state)
    loop = resume_loop(store, max_segments=10)
    assert loop.machine.completed_now == 4  # max_segments counts all four of the leg's segments
    assert loop.spent_before == 16.0 and loop.wall_offset == 16.0  # its budget and run time go on from the last
    assert loop.machine.agents[0].checkpoint == "s000002-cc"  # the agent continues from its newest checkpoint
    counted = loop.machine.counters
    assert (counted["segments_completed"], counted["segments_failed"], counted["env_steps"]) == (3, 1, 300)
    assert loop.recovered == 0 and loop.unwritten_history == []  # recorded once already: never again
    assert [e["key"] for e in loop.machine.board] == ["s000002-cc", "s000001-bb"]

    # a state written before it recorded its history's length: the records of a later run time are the missed ones
    store.write_run_state({k: v for k, v in state.items() if k != "history_records"})
    loop = resume_loop(store, max_segments=10)
    assert loop.machine.completed_now == 4 and loop.spent_before == 16.0
    assert loop.machine.agents[0].checkpoint == "s000002-cc"

    # a finished invocation: nothing was missed, and a fresh leg starts
    store.write_run_state({**state, "finished": True, "history_records": 4, "wall_seconds": 17.0,
                           "machine": {"counters": {**counters, "segments_completed": 3, "segments_failed": 1},
                                       "agents": [agent_state(checkpoint="s000002-cc", segments=3)]}})
    loop = resume_loop(store)
    assert loop.machine.completed_now == 0 and loop.spent_before == 0.0 and loop.wall_offset == 17.0
    assert loop.machine.counters["segments_completed"] == 3
