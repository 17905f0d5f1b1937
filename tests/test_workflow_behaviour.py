"""What the scheduled workflows do with the stores and settings a user meets: damaged checkpoints, a board with
entries that cannot load, configs that share GPUs. Found by a hunt for wrong behaviour (each test failed before
its fix)."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from dask_podracer.config import config_from_dict
from dask_podracer.store import PodracerStore

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / "workflows"

TINY = {"run": {"name": "wfb", "env": "Pendulum-v1", "algorithm": "sac", "max_segments": 4, "seed": 3,
                "budget": "2m"},
        "tournament": {"leaderboard_size": 2},
        "segment": {"env_steps": 300, "eval_episodes": 2},
        "hparams": {"hidden": [16, 16], "num_envs": 2, "learning_starts": 100, "batch_size": 32}}


def workflow(name: str):
    spec = importlib.util.spec_from_file_location(name, WORKFLOWS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> Path:
    """A finished tournament of 4 segments on a board of 2, run on an in-process cluster (no worker processes)."""
    from distributed import Client, LocalCluster

    from dask_podracer.population import run_tournament

    path = tmp_path_factory.mktemp("wfb") / "s.zarr"
    config = config_from_dict({**TINY, "run": {**TINY["run"], "store": str(path)}})
    with (LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None,
                       resources={"CPU": 2}) as cluster, Client(cluster) as client):
        run_tournament(config, client)
    return path


@pytest.fixture
def store_copy(tiny_store, tmp_path) -> Path:
    """A copy of `tiny_store` for a test to damage."""
    copy = tmp_path / "copy.zarr"
    shutil.copytree(tiny_store, copy)
    return copy


def flip_a_byte(store: Path, key: str) -> None:
    """Bit rot in one chunk of checkpoint `key`'s arrays."""
    chunk = next(p for p in sorted((store / "checkpoints" / key).rglob("*"))
                 if p.is_file() and p.name != "zarr.json" and p.stat().st_size > 0)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))


def test_the_chaos_checks_final_check_finds_a_damaged_checkpoint_off_the_leaderboard(store_copy):
    chaos = workflow("chaos")
    store = PodracerStore(store_copy)
    before = store.read_history()
    store.write_run_state({**store.read_run_state(), "invocations": 2})  # as after the check's resumed client
    assert chaos.check(store_copy, before) == []
    board = {e["key"] for e in store.read_leaderboard()}
    agents = {a["checkpoint"] for a in store.read_run_state()["machine"]["agents"] if a.get("checkpoint")}
    # a checkpoint a resume continues an agent from, not on the board (before: only board entries were loaded)
    off_board = set(store.checkpoint_keys()) - board
    (victim, *_) = sorted(agents & off_board) or sorted(off_board)
    flip_a_byte(store_copy, victim)
    problems = chaos.check(store_copy, before)
    assert problems and all(victim in p for p in problems), problems
    assert any("ChecksumError" in p for p in problems), problems


def option(words: list[str], name: str, default: str | None = None) -> str | None:
    return words[words.index(name) + 1] if name in words else default


@pytest.mark.parametrize("sharing", ["threads", "processes"])
def test_slurm_and_kubernetes_workers_run_the_segments_per_gpu_the_config_asks_for(sharing):
    import shlex

    from dask_podracer.config import ClusterConfig
    from dask_podracer.population.cluster import GPU, gpu_share_of, worker_slots

    clusters = workflow("clusters")
    config = ClusterConfig(segments_per_gpu=4, gpu_sharing=sharing)
    with clusters.slurm_cluster({"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}, config) as slurm:
        slurm_worker = shlex.split(slurm.job_script().strip().splitlines()[-1])
    (kube_worker,) = clusters.kubernetes_cluster_spec(2, "podracer:test", cluster=config)["spec"]["worker"]["spec"][
        "containers"]
    for words in (slurm_worker, kube_worker["args"]):
        resources = dict(pair.split("=") for pair in option(words, "--resources").split(","))
        worker = {"resources": {k: float(v) for k, v in resources.items()},
                  "nthreads": int(option(words, "--nthreads"))}
        processes = int(option(words, "--nworkers", "1"))
        # the slots one GPU's workers offer to segments asking for the config's share (before: one, whatever it said)
        assert processes * worker_slots(worker, GPU, gpu_share_of(config)) == 4, words
        assert worker["resources"] == {GPU: 1.0}, words  # each process one GPU's worth, threads sharing it in shares


def test_evaluate_top_passes_over_entries_that_do_not_load_and_reports_the_rest(store_copy, tmp_path, capsys):
    evaluate_top = workflow("evaluate_top")
    store = PodracerStore(store_copy)
    first, second = (e["key"] for e in store.read_leaderboard()[:2])
    store.quarantine(first, "bit rot found by a test")  # a client killed before it took the entry off the board
    out = tmp_path / "report"
    # before: exit 2 and no report at all, for one entry of the K
    assert evaluate_top.main([str(store_copy), "--top", "1", "--episodes", "2", "--out", str(out)]) == 0
    (row,) = json.loads(out.with_suffix(".json").read_text())
    assert row["key"] == second and row["rank"] == 2
    assert f"passing over rank 1: checkpoint '{first}'" in capsys.readouterr().err
    flip_a_byte(store_copy, second)  # and one whose bytes changed
    assert evaluate_top.main([str(store_copy), "--top", "5", "--episodes", "2", "--out", str(out)]) == 0
    assert json.loads(out.with_suffix(".json").read_text()) == []
    assert f"passing over rank 2: checkpoint '{second}' in store" in capsys.readouterr().err


def test_the_chaos_checks_say_a_damaged_table_is_a_problem_rather_than_crash(store_copy, capsys):
    chaos = workflow("chaos")
    before = PodracerStore(store_copy).read_history()
    table = store_copy / "leaderboard" / "zarr.json"
    table.write_text(table.read_text()[:100])  # cut off mid-write by a full disk, say
    assert chaos.main(["--verify", str(store_copy)]) == 1  # before: a traceback
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert json.loads(line)["problems"][0].startswith("the store does not read: unreadable metadata 'leaderboard")
    (problem,) = chaos.check(store_copy, before)
    assert problem.startswith("the store's tables do not read: unreadable metadata 'leaderboard")


def test_slurm_jobs_and_worker_pods_get_the_embedded_clusters_worker_environment():
    # before: the pod spec's env was null and the job script exported nothing, so workers were daemonic and a
    # segment of gymnasium's async vector envs (a process per env) could not start its processes
    clusters = workflow("clusters")
    with clusters.slurm_cluster({"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}) as slurm:
        script = slurm.job_script()
    assert "export DASK_DISTRIBUTED__WORKER__DAEMON=False" in script.splitlines()
    (worker,) = clusters.kubernetes_cluster_spec(2, "podracer:test")["spec"]["worker"]["spec"]["containers"]
    assert {"name": "DASK_DISTRIBUTED__WORKER__DAEMON", "value": "False"} in worker["env"]


def test_the_local_kind_runs_the_segments_per_worker_the_config_asks_for():
    # it started one-thread workers advertising CPU=1 whatever cluster.threads_per_worker said
    from dask_podracer.config import ClusterConfig
    from dask_podracer.population.cluster import CPU

    clusters = workflow("clusters")
    with clusters.local_cluster(1, ClusterConfig(threads_per_worker=2)) as cluster:
        (worker,) = cluster.scheduler_info["workers"].values()
        assert worker["nthreads"] == 2 and worker["resources"] == {CPU: 2}
