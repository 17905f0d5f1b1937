"""A store from elsewhere: reading it imports no module it names, and every trusted checkpoint is verified.

The hostile store here was made as anyone could make one: a real checkpoint re-saved (with a valid checksum)
under an env that names a module of its own, `podracer_hostile_probe:factory`. That module lies beside the
store, importable, and records its own import in a file: every reader is run where it could import it, and
the test shows it did not, and that the reader either worked or refused in one line naming the module.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from dask_podracer.config import config_from_dict
from dask_podracer.dashboard.page import render_page
from dask_podracer.dashboard.snapshot import Snapshot
from dask_podracer.envs import StoredEnvRefused
from dask_podracer.population import run_tournament
from dask_podracer.population.monitor import PodracerPage
from dask_podracer.population.updater import leaderboard_entry
from dask_podracer.store import CheckpointNotFound, ChecksumError, PodracerStore
from dask_podracer.train import SegmentSpec, load_agent, result_from_attrs, run_segment
from helpers import segment_that_damages_its_checkpoint_then_dies, segment_that_fails_after_saving

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"
PODRACER = str(Path(sys.executable).with_name("podracer"))
HOSTILE_ENV = "podracer_hostile_probe:factory"
PROBE = '''"""Records its own import (the file IMPORTED beside it): a store must never import this unasked."""
from pathlib import Path

Path(__file__).with_name("IMPORTED").write_text("imported")


def factory(num_envs, device="cpu", seed=None):
    from dask_podracer.envs import PendulumVecEnv

    return PendulumVecEnv(num_envs=num_envs, device=device, seed=seed)
'''
HPARAMS = {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32, "buffer_size": 500}


def write_probe(folder: Path) -> Path:
    (folder / "podracer_hostile_probe.py").write_text(PROBE)
    return folder / "IMPORTED"


def spec(store: PodracerStore, key: str, **changes) -> SegmentSpec:
    fields = dict(key=key, store_url=store.url, env="Pendulum-v1", algorithm="sac", hparams=HPARAMS, seed=1,
                  env_step_budget=100, eval_episodes=2)
    return SegmentSpec(**{**fields, **changes})


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """A folder holding the probe module, `hostile.zarr` (its one entry and record on the probe's env) and
    `champion/` (an exported Pendulum champion whose card names the probe's Env class)."""
    folder = tmp_path_factory.mktemp("hostile")
    write_probe(folder)
    store = PodracerStore(folder / "hostile.zarr", create=True)
    run_segment(spec(store, "honest"))
    honest = store.load_checkpoint("honest")
    attrs = {**honest.attrs, "env": HOSTILE_ENV}
    store.save_checkpoint("hostile", honest.arrays, attrs)  # published with a checksum that matches
    result = result_from_attrs("hostile", attrs)
    store.write_leaderboard([leaderboard_entry(result)])
    store.append_history({"key": "hostile", "agent": 0, "group": "sac", "parent": None, "adopted": None,
                          "generation": 0, "hparams": attrs["hparams"], "status": "finished",
                          "score": result.score, "rank": 0, "segment_env_steps": 100, "lineage_env_steps": 100,
                          "run_env_steps": 100, "wall_seconds": 1.0, "train_seconds": 1.0, "metrics": {},
                          "device": "cpu", "error": None})
    store.write_run_state({"env": HOSTILE_ENV, "env_kwargs": {}, "invocations": 1, "finished": True})

    exported = run([sys.executable, str(WORKFLOWS / "export_champion.py"), store.url, "champion", "--key",
                    "honest", "--episodes", "2"], folder)
    assert exported.returncode == 0, exported.stderr
    card = json.loads((folder / "champion" / "card.json").read_text())
    card["env"] = "podracer_hostile_probe:ReachOne"
    card["gymnasium_evaluation"]["entry_point"] = card["gymnasium_evaluation"]["env_id"] = card["env"]
    (folder / "champion" / "card.json").write_text(json.dumps(card))
    assert not (folder / "IMPORTED").exists()
    return folder


def run(command: list[str], folder: Path) -> subprocess.CompletedProcess:
    """`command` run from `folder`, where the probe module is importable (cwd and PYTHONPATH), as a user would."""
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": path})


READERS_THAT_NEED_NO_ENV = {
    "leaderboard": [PODRACER, "leaderboard", "hostile.zarr"],
    "lineage": [PODRACER, "lineage", "hostile.zarr", "hostile"],
    "plot": [PODRACER, "plot", "hostile.zarr", "--out", "curves.html"],
}
READERS_THAT_BUILD_THE_ENV = {
    "export_champion": [sys.executable, str(WORKFLOWS / "export_champion.py"), "hostile.zarr", "out"],
    "evaluate_top": [sys.executable, str(WORKFLOWS / "evaluate_top.py"), "hostile.zarr", "--episodes", "2"],
    "replay_champion": [sys.executable, str(WORKFLOWS / "replay_champion.py"), "champion"],
}


@pytest.mark.parametrize("name", sorted(READERS_THAT_NEED_NO_ENV))
def test_readers_that_need_no_env_work_on_a_hostile_store_and_import_nothing(hostile, name):
    done = run(READERS_THAT_NEED_NO_ENV[name], hostile)
    assert done.returncode == 0, done.stderr
    assert not (hostile / "IMPORTED").exists()


@pytest.mark.parametrize("name", sorted(READERS_THAT_BUILD_THE_ENV))
def test_readers_that_build_the_env_refuse_in_one_line_naming_the_module_and_how_to_allow_it(hostile, name):
    done = run(READERS_THAT_BUILD_THE_ENV[name], hostile)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"{name}: error: ") and "would import module 'podracer_hostile_probe'" in line
    assert "run again with --env podracer_hostile_probe:" in line or "--env podracer_hostile_probe:" in line
    assert not (hostile / "IMPORTED").exists()


def test_resuming_a_hostile_store_is_refused_in_one_line_before_anything_runs(hostile):
    config = hostile / "pendulum.toml"
    config.write_text('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nmax_segments = 1\n'
                      '[cluster]\nworkers = 1\ndashboard_address = "127.0.0.1:0"\n')
    done = run([PODRACER, "train", str(config), "--store", "hostile.zarr"], hostile)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("podracer: error: ") and f"holds a tournament on '{HOSTILE_ENV}'" in line
    assert not (hostile / "IMPORTED").exists()
    assert len(PodracerStore(hostile / "hostile.zarr").read_history()) == 1  # nothing stored was touched


def test_the_dashboard_page_reads_a_hostile_store_and_imports_nothing(hostile, monkeypatch):
    monkeypatch.syspath_prepend(str(hostile))
    page = PodracerPage(str(hostile / "hostile.zarr"))
    tables = page.read_tables()
    assert tables.error is None and [e["key"] for e in tables.board] == ["hostile"]
    html = render_page(Snapshot(page.store_url, tables.board, tables.history, [], tables.error))
    assert "hostile" in html
    assert "podracer_hostile_probe" not in sys.modules and not (hostile / "IMPORTED").exists()


def test_load_agent_refuses_the_stores_env_unless_it_is_named(hostile, monkeypatch, tmp_path):
    store = PodracerStore(hostile / "hostile.zarr")
    monkeypatch.syspath_prepend(str(hostile))
    with pytest.raises(StoredEnvRefused, match=r"checkpoint 'hostile' of store '.*' is trained on env "
                                               r"'podracer_hostile_probe:factory', which would import module "
                                               r"'podracer_hostile_probe'; .* env='podracer_hostile_probe:factory'"):
        load_agent(store, "hostile")
    with pytest.raises(StoredEnvRefused, match=r"is trained on env 'podracer_hostile_probe:factory', not on "
                                               r"'Pendulum-v1'"):
        load_agent(store, "hostile", env="Pendulum-v1")
    assert "podracer_hostile_probe" not in sys.modules and not (hostile / "IMPORTED").exists()
    assert load_agent(store, "honest") is not None  # a built-in env needs no name

    # named, it is imported: the probe really would have recorded an import (in a folder of its own)
    imported = write_probe(tmp_path)
    code = ("from dask_podracer.store import PodracerStore\nfrom dask_podracer.train import load_agent\n"
            f"load_agent(PodracerStore({store.url!r}), 'hostile', env={HOSTILE_ENV!r})\n")
    done = run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    assert imported.exists()


def test_export_with_the_env_named_exports_the_champion(hostile, tmp_path):
    shutil.copy(hostile / "podracer_hostile_probe.py", tmp_path)
    done = run([sys.executable, str(WORKFLOWS / "export_champion.py"), str(hostile / "hostile.zarr"), "out",
                "--episodes", "2", "--env", HOSTILE_ENV], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "card.json").read_text())["env"] == HOSTILE_ENV
    assert (tmp_path / "IMPORTED").exists() and not (hostile / "IMPORTED").exists()


# -- checksums on every path that trusts a checkpoint ---------------------------------------------------------

def damage_score(store: PodracerStore, key: str, score: float = 0.0) -> None:
    """Rewrite the score a published checkpoint records (as a bad disk or a hand could), leaving its checksum."""
    meta = Path(store.url) / "checkpoints" / key / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["attrs"]["score"] = score
    meta.write_text(json.dumps(doc))


def test_a_rerun_segment_never_reports_its_checkpoint_unverified(tmp_path):
    """Dask runs a segment again when its worker died after saving: the saved checkpoint is the result, and
    only once it passes its checksum and is not quarantined."""
    store = PodracerStore(tmp_path / "rerun.zarr", create=True)
    first = run_segment(spec(store, "a"))
    assert run_segment(spec(store, "a")).score == first.score  # an intact one is the result, not trained again
    damage_score(store, "a")
    with pytest.raises(ChecksumError, match=r"checkpoint 'a' in store .* does not match its checksum") as failed:
        run_segment(spec(store, "a"))
    assert failed.value.key == "a"
    store.quarantine("a", "damaged")
    with pytest.raises(CheckpointNotFound, match=r"checkpoint 'a' in store .* is quarantined"):
        run_segment(spec(store, "a"))


TINY = {"segment": {"env_steps": 150, "eval_episodes": 2},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32}}


def tiny(store: Path, retries: int = 1, **run) -> object:
    return config_from_dict({**TINY, "tournament": {"retries": retries}, "run": {
        "env": "Pendulum-v1", "algorithm": "sac", "budget": "3m", "store": str(store), **run}})


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", resources={"CPU": 1}) as cluster, Client(cluster) as c:
        yield c


@pytest.mark.slow
def test_a_damaged_checkpoint_no_record_names_is_quarantined_on_resume_not_recovered(client, tmp_path):
    store_path = tmp_path / "recover.zarr"
    run_tournament(tiny(store_path, max_segments=2), client)
    store = PodracerStore(store_path)
    # a segment that finished after the client last wrote its tables, whose score was then damaged
    run_segment(spec(store, "late", env_step_budget=150, hparams=TINY["hparams"]))
    damage_score(store, "late", score=0.0)  # better than any Pendulum agent: it would top the board
    summary = run_tournament(tiny(store_path, max_segments=1), client)
    assert summary.recovered == 0 and store.is_quarantined("late")
    assert "late" not in {r["key"] for r in store.read_history()}
    assert "late" not in {e["key"] for e in store.read_leaderboard()}


@pytest.mark.slow
def test_a_rerun_that_finds_its_own_checkpoint_damaged_fails_and_quarantines_that_one(client, tmp_path):
    """The first segment saves, damages its score, and kills its worker; Dask runs it again, which finds the
    damaged checkpoint: the segment fails, and its own key is quarantined (it has no parent to blame)."""
    store_path = tmp_path / "own.zarr"
    summary = run_tournament(tiny(store_path, max_segments=3), client,
                             segment_fn=segment_that_damages_its_checkpoint_then_dies)
    store = PodracerStore(store_path)
    history = store.read_history()
    [damaged] = [r for r in history if r["key"].startswith("s000000-")]
    assert damaged["status"] == "failed" and damaged["error"].startswith("ChecksumError: checkpoint 's000000-")
    assert store.is_quarantined(damaged["key"])
    assert damaged["key"] not in {e["key"] for e in store.read_leaderboard()}
    assert summary.segments_completed >= 2 and all(e["score"] < 0 for e in store.read_leaderboard())


@pytest.mark.slow
def test_a_task_that_failed_after_publishing_its_checkpoint_is_recorded_from_the_verified_checkpoint(client,
                                                                                                        tmp_path):
    store_path = tmp_path / "late.zarr"
    summary = run_tournament(tiny(store_path, retries=0, max_segments=2), client,  # no rerun: the error arrives
                             segment_fn=segment_that_fails_after_saving)
    store = PodracerStore(store_path)
    [first] = [r for r in store.read_history() if r["key"].startswith("s000000-")]
    assert first["status"] == "finished" and first["error"] is None
    assert first["score"] == store.load_checkpoint(first["key"]).attrs["score"]
    assert summary.segments_failed == 0 and summary.segments_completed == 2
