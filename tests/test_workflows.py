"""Workflow scripts: exporting the champion (TorchScript + card) and using it without dask_podracer."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentSpec, run_segment

ROOT = Path(__file__).resolve().parents[1]

REPLAY = r"""
import json, math, sys
import gymnasium as gym, numpy as np, torch
torch.set_num_threads(1)
policy = torch.jit.load(sys.argv[1] + "/policy.pt")
card = json.load(open(sys.argv[1] + "/card.json"))
returns = []
for first in card["evaluation"]["initial_observations"]:
    env = gym.make("Pendulum-v1")
    env.reset(seed=0)
    env.unwrapped.state = np.array([math.atan2(first[1], first[0]), first[2]])
    obs, total = np.array(first, dtype=np.float32), 0.0
    for _ in range(card["evaluation"]["max_episode_steps"]):
        action = policy(torch.as_tensor(obs).reshape(1, -1))[0].numpy()
        obs, reward, terminated, truncated, _ = env.step(action)
        total += reward
    returns.append(total)
print(json.dumps({"score": float(np.mean(returns)), "imported": [m for m in sys.modules if m == "dask_podracer"
                  or m.startswith("dask_podracer.")]}))
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = PodracerStore(tmp_path_factory.mktemp("wf") / "s.zarr", create=True)
    hparams = {"hidden": [32, 32], "num_envs": 2, "learning_starts": 100, "batch_size": 64}
    result = run_segment(SegmentSpec(key="champ", store_url=store.url, env="Pendulum-v1", algorithm="sac",
                                     hparams=hparams, env_steps=600, eval_episodes=4))
    store.write_leaderboard([{"key": "champ", "score": result.score, "env_steps": 600, "algorithm": "sac",
                              "parent": None}])
    return store


def test_exported_champion_reproduces_its_score_in_a_process_without_dask_podracer(store, tmp_path):
    out = tmp_path / "champion"
    run = subprocess.run([sys.executable, str(ROOT / "workflows" / "export_champion.py"), store.url, str(out),
                          "--episodes", "4"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    card = json.loads((out / "card.json").read_text())
    assert card["key"] == "champ" and card["algorithm"] == "sac" and card["env"] == "Pendulum-v1"
    assert card["evaluation"]["score"] == pytest.approx(card["score"], abs=1e-3)
    replay = subprocess.run([sys.executable, "-c", REPLAY, str(out)], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    outcome = json.loads(replay.stdout)
    assert outcome["imported"] == []  # TorchScript alone
    # gymnasium's float64 physics from the same initial states, against our float32 twin
    assert outcome["score"] == pytest.approx(card["evaluation"]["score"], abs=2.0)


def test_evaluate_top_writes_a_report(store, tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "workflows" / "evaluate_top.py"), store.url, "--top", "3",
                          "--episodes", "3", "--out", str(tmp_path / "report")], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    rows = json.loads((tmp_path / "report.json").read_text())
    assert [r["key"] for r in rows] == ["champ"] and -2000 < rows[0]["fresh_score"] < 0
    assert "| 1 | champ | sac |" in (tmp_path / "report.md").read_text()


def test_resume_workflow_runs_a_tiny_budget(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nmax_segments = 1\n'
                      '[segment]\nenv_steps = 100\neval_episodes = 2\n[cluster]\nworkers = 1\n'
                      'dashboard_address = "127.0.0.1:0"\n'
                      '[hparams]\nhidden = [16, 16]\nnum_envs = 2\nlearning_starts = 50\nbatch_size = 32\n')
    for _ in range(2):  # the second run resumes the first
        run = subprocess.run([sys.executable, str(ROOT / "workflows" / "resume.py"), str(config), "--store",
                              str(tmp_path / "r.zarr"), "--budget", "2m"], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
    assert len(PodracerStore(tmp_path / "r.zarr").read_history()) == 2


def test_clusters_workflow_runs_locally_and_names_missing_deployments(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nmax_segments = 2\n'
                      '[segment]\nenv_steps = 100\neval_episodes = 2\n'
                      '[hparams]\nhidden = [16, 16]\nnum_envs = 2\nlearning_starts = 50\nbatch_size = 32\n')
    run = subprocess.run([sys.executable, str(ROOT / "workflows" / "clusters.py"), "local", str(config), "--workers",
                          "1", "--store", str(tmp_path / "c.zarr")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "stopped: max_segments" in run.stdout
    missing = subprocess.run([sys.executable, str(ROOT / "workflows" / "clusters.py"), "slurm", str(config)],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "slurm needs dask_jobqueue" in missing.stderr


@pytest.mark.parametrize("script", ["export_champion.py", "chaos.py", "evaluate_top.py", "resume.py", "clusters.py"])
def test_workflow_scripts_answer_help(script):
    run = subprocess.run([sys.executable, str(ROOT / "workflows" / script), "--help"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and "usage:" in run.stdout
