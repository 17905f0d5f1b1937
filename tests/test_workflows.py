"""Workflow scripts, as cron would run them, against a real LocalCluster with tiny budgets.

resume.py builds the store the other scripts work on (a small tournament on the suite's shared
LocalCluster, given by its address); export_champion.py's TorchScript policy is then
replayed in a fresh Python process that never imports dask_podracer.
"""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dask_podracer.config import load_config, parse_duration
from dask_podracer.envs import make_vec_env
from dask_podracer.store import PodracerStore
from dask_podracer.train import evaluate, load_agent

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / "workflows"

TINY_TOML = ('[run]\nname = "wf"\nenv = "Pendulum-v1"\nalgorithm = "sac"\nmax_segments = 2\nseed = 3\n'
             '[tournament]\nleaderboard_size = 3\n'
             '[segment]\nenv_steps = 400\neval_episodes = 4\n'
             '[hparams]\nhidden = [32, 32]\nnum_envs = 2\nlearning_starts = 100\nbatch_size = 64\n')

# The store the workflows read: the same tournament, long enough for its champion to have learned something, so
# that what the scripts say of it is told apart from what any Pendulum policy would get. Two fresh agents of 1500
# env steps side by side on the cluster's two workers, with more updates per step and larger batches and learning
# rates than TINY_TOML's: 2-4 s more than TINY_TOML's run.
LEARNED_TOML = ('[run]\nname = "wf"\nenv = "Pendulum-v1"\nalgorithm = "sac"\nmax_segments = 2\nseed = 3\n'
                '[tournament]\nleaderboard_size = 3\n'
                '[segment]\nenv_steps = 1500\neval_episodes = 4\n'
                '[hparams]\nhidden = [64, 64]\nnum_envs = 2\nlearning_starts = 100\nbatch_size = 256\n'
                'utd_ratio = 1.0\nactor_lr = 3e-3\ncritic_lr = 3e-3\n')
# A mean return above this says a policy learned. Untrained agents of LEARNED_TOML's hyper-parameters (30 seeds)
# score -1240 to -1740 on the export's 4 gymnasium episodes and -1090 to -1570 on evaluate_top's 3 fresh ones, no
# torque at all -1350 and -1000; its champion scores -520 and -450 (at TINY_TOML's 400 env steps: -1440 and -1250).
LEARNED = -800.0


def script(name: str, *args, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(WORKFLOWS / name), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def scheduler(cpu_cluster):
    """The "given cluster": the suite's shared LocalCluster of two worker processes (tests/conftest.py), reached by
    its address."""
    return cpu_cluster.scheduler_address


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("wf")
    (path / "tiny.toml").write_text(TINY_TOML)
    (path / "learned.toml").write_text(LEARNED_TOML)
    return path


@pytest.fixture(scope="module")
def store(scheduler, workdir):
    """A small tournament run by resume.py on the given cluster: the store the other workflows read."""
    run = script("resume.py", workdir / "learned.toml", "--store", workdir / "s.zarr", "--scheduler", scheduler,
                 "--budget", "2m", "--json", workdir / "first.json")
    assert run.returncode == 0, run.stderr
    return PodracerStore(workdir / "s.zarr")


def test_resume_continues_the_named_tournament_on_the_given_cluster_for_a_budget(store, scheduler, workdir):
    first = json.loads((workdir / "first.json").read_text())
    assert first["stop_reason"] == "max_segments" and first["segments_completed"] == 2
    assert len(store.read_history()) == 2
    # the next slice: segments bounded by time only (--set), so the 4-second budget is what stops it
    run = script("resume.py", workdir / "learned.toml", "--store", store.url, "--scheduler", scheduler,
                 "--budget", "4s", "--json", workdir / "second.json",
                 "--set", "segment.env_steps=0", "segment.seconds=60", "run.max_segments=0")
    assert run.returncode == 0, run.stderr
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d resume: podracer train .* --budget 4s --quiet", run.stdout)
    assert run.stdout.splitlines()[0].endswith(" --set segment.env_steps=0 segment.seconds=60 run.max_segments=0")
    assert f"--scheduler {scheduler}" in run.stdout.splitlines()[0]
    second = json.loads((workdir / "second.json").read_text())
    assert second["stop_reason"] == "budget" and 4.0 <= second["wall_seconds"] < 40.0
    history = store.read_history()
    assert len(history) == 2 + second["segments_completed"] and second["segments_completed"] >= 1
    assert store.read_run_state()["invocations"] == 2
    # counting on from the first invocation's s000000 and s000001, nothing redone
    numbers = [int(r["key"][1:7]) for r in history[2:]]  # "s000002-1a2b3c4d": 2
    assert min(numbers) >= 2 and len(set(numbers)) == len(numbers), numbers


def test_exported_champion_reproduces_its_score_in_a_process_without_dask_podracer(store, tmp_path):
    out = tmp_path / "champion"
    run = script("export_champion.py", store.url, out, "--episodes", "4")  # the run's eval_episodes
    assert run.returncode == 0, run.stderr
    card = json.loads((out / "card.json").read_text())
    champion = store.read_leaderboard()[0]
    assert card["key"] == champion["key"] and card["score"] == champion["score"]
    assert card["algorithm"] == "sac" and card["env"] == "Pendulum-v1" and card["lineage"]
    # the card's evaluation is the leaderboard's: same seeds, same episodes, same device, same score
    assert card["scored_on"] == card["evaluation"]["device"] == store.checkpoint_attrs(card["key"])["device"]
    assert card["evaluation"]["score"] == pytest.approx(card["score"], abs=1e-3)
    # the exported policy played in gymnasium itself, replayed with torch and gymnasium alone
    gym_card = card["gymnasium_evaluation"]
    assert gym_card["env_id"] == "Pendulum-v1" and gym_card["seeds"] == [1_000_003 + i for i in range(4)]
    replay = script("replay_champion.py", out, "--json")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    outcome = json.loads(replay.stdout)
    assert outcome["reproduced"] and outcome["score"] == gym_card["score"]
    assert outcome["dask_podracer_imported"] is False  # TorchScript and gymnasium alone
    # gymnasium's own seeded episodes: the champion's, so they say it learned, as no untrained policy's would
    assert gym_card["score"] > LEARNED, gym_card["returns"]


def test_the_export_repeats_an_evaluation_on_its_own_device_where_this_machine_has_it(monkeypatch):
    """A GPU-scored checkpoint is evaluated on that GPU, so the card reproduces its score; on a machine
    without one, on the CPU (the card says so), where float differences may move the score a little."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts workflows/ first on it
    spec = importlib.util.spec_from_file_location("export_champion", WORKFLOWS / "export_champion.py")
    export_champion = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export_champion)

    assert export_champion.evaluation_device("cpu") == torch.device("cpu")
    gpus = torch.cuda.device_count()
    assert export_champion.evaluation_device("cuda") == torch.device("cuda" if gpus else "cpu")
    assert export_champion.evaluation_device(f"cuda:{gpus}") == torch.device("cpu")  # one past the last GPU


def test_an_exported_champion_of_an_env_with_kwargs_is_replayed_in_gymnasium_with_them(tmp_path):
    from dask_podracer.train import SegmentSpec, run_segment

    store = PodracerStore(tmp_path / "g.zarr", create=True)
    run_segment(SegmentSpec(key="a", store_url=store.url, env="gym:Pendulum-v1", algorithm="sac", seed=1,
                            hparams={"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32},
                            env_step_budget=100, eval_episodes=3, env_kwargs={"g": 4.0}))
    out = tmp_path / "champion"
    run = script("export_champion.py", store.url, out, "--key", "a", "--episodes", "3")
    assert run.returncode == 0, run.stderr
    card = json.loads((out / "card.json").read_text())
    assert card["env_kwargs"] == {"g": 4.0} and card["gymnasium_evaluation"]["env_kwargs"] == {"g": 4.0}
    assert card["evaluation"]["score"] == pytest.approx(card["score"], abs=1e-3)
    replay = script("replay_champion.py", out, "--json")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert json.loads(replay.stdout)["reproduced"]


def test_evaluate_top_writes_a_report(store, tmp_path):
    run = script("evaluate_top.py", store.url, "--top", "2", "--episodes", "3", "--seed", "7",
                 "--out", tmp_path / "report")
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "report.json").read_text())
    board = store.read_leaderboard()
    assert [r["key"] for r in rows] == [e["key"] for e in board[:2]] and len(rows) == 2
    assert [r["leaderboard_score"] for r in rows] == [e["score"] for e in board[:2]]
    for row in rows:  # each fresh score is its own checkpoint's mean return in 3 envs reset from seed 7
        agent = load_agent(store, row["key"], replay=False)
        fresh = evaluate(agent, make_vec_env("Pendulum-v1", 3, seed=7), seed=7)
        assert row["fresh_score"] == pytest.approx(fresh, abs=1e-3)
    assert rows[0]["fresh_score"] > LEARNED, rows  # the champion learned, on seeds it was never scored on
    assert f"| 1 | {board[0]['key']} | sac |" in (tmp_path / "report.md").read_text()


def test_clusters_workflow_runs_locally_and_names_missing_deployments(workdir, tmp_path):
    run = script("clusters.py", "local", workdir / "tiny.toml", "--workers", "1", "--store", tmp_path / "c.zarr")
    assert run.returncode == 0, run.stderr
    assert "stopped: max_segments" in run.stdout
    assert len(PodracerStore(tmp_path / "c.zarr").read_history()) == 2
    for kind, package in (("slurm", "dask_jobqueue"), ("kubernetes", "dask_kubernetes"), ("cuda", "dask_cuda")):
        # the package hidden from the script's process, installed or not (installed, the script would try to
        # reach a real Slurm, Kubernetes or GPU): a None in sys.modules makes its import fail as a missing one does
        hidden = (f"import runpy, sys; sys.modules[{package!r}] = None; sys.argv = sys.argv[1:]; "
                  "runpy.run_path(sys.argv[0], run_name='__main__')")
        missing = subprocess.run([sys.executable, "-c", hidden, str(WORKFLOWS / "clusters.py"), kind,
                                  str(workdir / "tiny.toml")], capture_output=True, text=True, timeout=120)
        assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
        assert missing.stderr.strip() == f"clusters: error: {kind} needs {package}: pip install it first"


def test_the_crontab_line_schedules_a_valid_resume_that_ends_before_the_next():
    doc = (WORKFLOWS / "resume.py").read_text()
    line = next(line.strip() for line in doc.splitlines() if "workflows/resume.py" in line and "*" in line)
    fields, command = line.split()[:5], line.split(None, 5)[5]
    assert fields == ["0", "*", "*", "*", "*"]  # hourly
    words = shlex.split(command.split(">>")[0])
    args = words[words.index("workflows/resume.py") + 1:]
    spec = importlib.util.spec_from_file_location("resume", WORKFLOWS / "resume.py")
    resume = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(resume)
    parsed = resume.parser().parse_args(args)
    load_config(ROOT / parsed.config)  # the config it names is in the repository and valid
    assert parsed.scheduler.startswith("tcp://") and parse_duration(parsed.budget) < 3600


@pytest.mark.parametrize("name", ["export_champion.py", "replay_champion.py", "chaos.py", "evaluate_top.py", "resume.py",
                                  "clusters.py",
                                  "../docs/make_dashboard_screenshot.py"])
def test_workflow_scripts_answer_help(name):
    run = script(name, "--help", timeout=60)
    assert run.returncode == 0 and "usage:" in run.stdout


def test_the_readme_python_example_runs_as_a_script(tmp_path):
    # README's block as written, in a directory whose workflows/configs/pendulum.toml is a tiny run
    block = re.search(r"From Python.*?```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    (tmp_path / "workflows" / "configs").mkdir(parents=True)
    tiny = TINY_TOML.replace('name = "wf"', 'name = "pendulum"')
    (tmp_path / "workflows" / "configs" / "pendulum.toml").write_text(
        tiny + '[cluster]\nworkers = 1\ndashboard_address = "127.0.0.1:0"\n')
    (tmp_path / "example.py").write_text(block)
    run = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    best, stop_reason = run.stdout.split()
    assert float(best) < 0 and stop_reason == "max_segments"
    assert len(PodracerStore(tmp_path / "runs" / "pendulum.zarr").read_history()) == 2  # the config's store, here


def _workflow(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), WORKFLOWS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, args, said", [
    ("evaluate_top.py", ["s.zarr", "--top", "0"], "evaluate_top: error: --top must be >= 1, got 0"),
    ("evaluate_top.py", ["s.zarr", "--episodes", "0"], "evaluate_top: error: --episodes must be >= 1, got 0"),
    ("export_champion.py", ["s.zarr", "out", "--episodes", "0"], "export_champion: error: --episodes must be >= 1"),
    ("clusters.py", ["local", "c.toml", "--workers", "0"], "clusters: error: --workers must be >= 1, got 0"),
    ("chaos.py", ["--segments", "0"], "chaos: error: --segments must be >= 1, got 0"),
    ("chaos.py", ["--kill-every", "8", "15"], "chaos: error: --kill-every takes SECONDS (the check: positive"),
    ("chaos.py", ["--soak", "1", "--kill-every", "15", "8"], "chaos: error: --kill-every takes MIN MAX (the soak"),
    ("replay_champion.py", ["nowhere"], "replay_champion: error: cannot read nowhere/card.json: No such file"),
    ("chaos.py", ["--verify", "nowhere.zarr"], "chaos: error: --verify nowhere.zarr: no podracer store there"),
])
def test_workflow_scripts_refuse_bad_arguments_in_one_line_before_any_work(name, args, said, tmp_path, monkeypatch,
                                                                           capsys):
    monkeypatch.chdir(tmp_path)
    assert _workflow(name).main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # no store, no cluster's files, no report


@pytest.mark.parametrize("name, args, said", [  # a bad-input hunt of 2026-11-29 found each a traceback
    ("evaluate_top.py", ["s.zarr", "--out", "afile/report"], "evaluate_top: error: --out afile/report: there is no "
                                                              "directory 'afile' to write it in"),
    ("export_champion.py", ["s.zarr", "afile"], "export_champion: error: cannot write into afile: 'afile' is a file"),
    ("export_champion.py", ["s.zarr", "afile/sub"], "export_champion: error: cannot write into afile/sub: 'afile' is"),
    ("export_champion.py", ["s.zarr", "out", "--key", "../../etc"], "export_champion: error: invalid checkpoint key"),
    ("clusters.py", ["local", str(ROOT / "workflows/configs/pendulum.toml"), "--store", "afile/c.zarr"],
     "clusters: error: cannot create store"),
])
def test_workflow_scripts_refuse_paths_they_cannot_use_before_any_work(name, args, said, tmp_path, monkeypatch,
                                                                       capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("a file, not a directory")
    PodracerStore(tmp_path / "s.zarr", create=True)
    assert _workflow(name).main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "s.zarr"]


def test_the_kubernetes_workflow_without_credentials_says_so_in_one_line(tmp_path):
    pytest.importorskip("dask_kubernetes")
    config = ROOT / "workflows/configs/pendulum.toml"
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}  # no credentials anywhere
    run = subprocess.run([sys.executable, str(WORKFLOWS / "clusters.py"), "kubernetes", str(config), "--store",
                          str(tmp_path / "k.zarr")], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("clusters: error: cannot make the kubernetes cluster") and \
        run.stderr.count("\n") == 1, run.stderr


ARGUMENT_ERRORS = [("evaluate_top.py", ["s.zarr", "--top", "x"]), ("export_champion.py", []), ("backtest.py", []),
                   ("clusters.py", ["nowhere", "c.toml"]), ("resume.py", ["c.toml", "--budget"]),
                   ("chaos.py", ["--workers"]), ("replay_champion.py", [])]


@pytest.mark.parametrize("name, args", ARGUMENT_ERRORS)
def test_workflow_scripts_argument_errors_are_one_line(name, args, capsys):
    with pytest.raises(SystemExit) as exit_:
        _workflow(name).main(args)
    err = capsys.readouterr().err
    # the program's name is sys.argv[0]'s: the script's when run, pytest's here
    assert exit_.value.code == 2 and re.fullmatch(r"\S+: error: .+ \(see \S+ --help\)\n", err), err
