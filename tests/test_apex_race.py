"""benchmarks/apex_race.py's pure helpers: the race's configs, the order of its runs, time to target from a curve."""

import importlib.util
import tomllib
from pathlib import Path

import pytest

from dask_podracer.config import config_from_dict

_SPEC = importlib.util.spec_from_file_location("apex_race", Path(__file__).parents[1] / "benchmarks/apex_race.py")
race = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(race)
APEX = tomllib.loads(race.APEX_CONFIG.read_text())


def test_apex_setup_is_the_shipped_config_with_seed_store_budget_and_a_local_dashboard():
    config = config_from_dict(race.race_config(APEX, "apex", 2, "/tmp/r.zarr", "4m"))
    shipped = config_from_dict(APEX)
    assert (config.run.seed, config.run.store, config.run.budget) == (2, "/tmp/r.zarr", "4m")
    assert config.run.target_return == 475.0
    assert config.cluster.dashboard_address == "127.0.0.1:0"
    assert config.actors == shipped.actors and config.actors.workers == 2
    assert dict(config.hparams) == dict(shipped.hparams)
    assert config.segment == shipped.segment and config.tournament == shipped.tournament
    assert config.cluster.workers == 3


@pytest.mark.parametrize("setup, processes", [("dqn-3", 3), ("dqn-1", 1)])
def test_dqn_setups_share_the_apex_hparams_but_explore_on_their_own_schedule(setup, processes):
    config = config_from_dict(race.race_config(APEX, setup, 0, "/tmp/r.zarr", "4m"))
    apex = config_from_dict(APEX)
    assert config.actors is None
    assert (config.tournament.pool_size, config.cluster.workers) == (processes, processes)
    assert config.segment == apex.segment and config.tournament.perturb == apex.tournament.perturb
    shared = {k: v for k, v in APEX["hparams"].items() if not k.startswith("apex_")}
    assert shared and all(config.hparams[k] == apex.hparams[k] for k in shared)
    assert {k: config.hparams[k] for k in race.DQN_EXPLORATION} == race.DQN_EXPLORATION
    assert "apex_epsilon" not in race.race_config(APEX, setup, 0, "/tmp/r.zarr", "4m")["hparams"]
    assert "actors" in APEX  # the caller's dict is not changed


def test_a_given_exploration_schedule_replaces_one_task_dqns_and_leaves_apex_alone():
    schedule = {"eps_start": 0.1, "eps_end": 0.01, "exploration_steps": 5000}
    dqn = config_from_dict(race.race_config(APEX, "dqn-1", 0, "/tmp/r.zarr", "4m", schedule))
    assert {k: dqn.hparams[k] for k in schedule} == schedule
    apex = race.race_config(APEX, "apex", 0, "/tmp/r.zarr", "4m", schedule)
    assert not set(schedule) & set(apex["hparams"]) and apex["hparams"] == APEX["hparams"]


def test_unknown_setup_is_refused():
    with pytest.raises(ValueError, match="unknown setup 'dqn-7'"):
        race.race_config(APEX, "dqn-7", 0, "/tmp/r.zarr", "4m")


def test_seconds_to_target_is_the_first_curve_entry_at_or_above_it():
    curve = [{"wall_seconds": 10.0, "env_steps": 100, "best_score": None},
             {"wall_seconds": 20.0, "env_steps": 200, "best_score": 300.0},
             {"wall_seconds": 30.5, "env_steps": 300, "best_score": 475.0},
             {"wall_seconds": 40.0, "env_steps": 400, "best_score": 500.0}]
    assert race.seconds_to_target(curve, 475.0) == (30.5, 300)
    assert race.seconds_to_target(curve[:2], 475.0) is None
    assert race.seconds_to_target([], 475.0) is None


def test_runs_alternate_setups_within_each_seed():
    assert race.race_order(["apex", "dqn-3"], [0, 1]) == [("apex", 0), ("dqn-3", 0), ("apex", 1), ("dqn-3", 1)]


def test_segment_figures_keep_score_seconds_and_the_metrics_a_segment_has():
    record = {"score": 123.456, "train_seconds": 18.04, "metrics": {"learner_busy_fraction": 0.91234, "loss": 1.0}}
    assert race.segment_figures(record) == {"score": 123.5, "train_seconds": 18.0, "learner_busy_fraction": 0.912}
