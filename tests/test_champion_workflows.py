"""What a user does after training, on small real stores: export a champion (workflows/export_champion.py) and act
with its TorchScript policy in a fresh process, replay its card (replay_champion.py), backtest a trading one
(backtest.py). Each test here is a bug found by hand, with the run that showed it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dask_podracer.envs import make_vec_env
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentSpec, load_agent, run_segment

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"

# the exported policy alone, in a process that never imports dask_podracer: its actions on saved observations
ACT_EXPORTED = """\
import sys, torch
assert "dask_podracer" not in sys.modules
policy, obs = torch.jit.load(sys.argv[1]), torch.load(sys.argv[2])
torch.save({batch: policy(obs[:batch]) for batch in (1, 3, len(obs))}, sys.argv[3])
"""


def script(name: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(WORKFLOWS / name), *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def trained(store: PodracerStore, key: str, env: str, algorithm: str, hparams: dict) -> None:
    """A checkpoint `key` of one short real segment (seeded), scored on 3 episodes."""
    torch.set_num_threads(1)
    run_segment(SegmentSpec(key=key, store_url=store.url, env=env, algorithm=algorithm, seed=1, hparams=hparams,
                            env_step_budget=200, eval_episodes=3))


def exported_actions(policy: Path, obs: torch.Tensor, tmp_path: Path) -> dict[int, torch.Tensor]:
    torch.save(obs, tmp_path / "obs.pt")
    played = subprocess.run([sys.executable, "-c", ACT_EXPORTED, str(policy), str(tmp_path / "obs.pt"),
                             str(tmp_path / "actions.pt")], capture_output=True, text=True, timeout=120, check=False)
    assert played.returncode == 0, played.stderr
    return torch.load(tmp_path / "actions.pt")


DQN_HPARAMS = {"hidden": [16], "num_envs": 2, "learning_starts": 50, "batch_size": 32}


@pytest.mark.parametrize("algorithm, hparams", [("dqn", {**DQN_HPARAMS, "normalize_observations": True}),
                                                ("d3qn", DQN_HPARAMS)])
def test_a_dqn_champion_is_exported_and_acts_as_its_checkpoint(algorithm, hparams, tmp_path):
    """The DQN family's network is `q_net`, which the export did not register, so its parameters kept requiring
    grad and tracing refused them: `export_champion.py` on any dqn, double_dqn or d3qn store was a 70-line
    traceback ("Cannot insert a Tensor that requires grad as a constant"), and nothing was exported."""
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    trained(store, "q", "CartPole-v1", algorithm, hparams)
    out = tmp_path / "champion"
    run = script("export_champion.py", store.url, out, "--key", "q", "--episodes", "3")
    assert run.returncode == 0, run.stderr[-2000:]
    card = json.loads((out / "card.json").read_text())
    assert card["algorithm"] == algorithm and card["evaluation"]["score"] == pytest.approx(card["score"], abs=1e-3)

    obs = make_vec_env("CartPole-v1", 16, seed=5).reset(seed=5)[0] * 3  # wider than the start states: actions vary
    actions = exported_actions(out / "policy.pt", obs, tmp_path)
    agent = load_agent(store, "q", replay=False)
    for batch, action in actions.items():
        assert torch.equal(action, agent.act(obs[:batch], deterministic=True)), batch
    replay = script("replay_champion.py", out, "--json")
    assert replay.returncode == 0 and json.loads(replay.stdout)["reproduced"], replay.stdout + replay.stderr


@pytest.fixture(scope="module")
def exported_pendulum(tmp_path_factory) -> Path:
    """A SAC champion on Pendulum-v1 (a checkpoint of 200 env steps), exported with a gymnasium evaluation."""
    folder = tmp_path_factory.mktemp("pendulum")
    store = PodracerStore(folder / "s.zarr", create=True)
    trained(store, "p", "Pendulum-v1", "sac", {"hidden": [16], "num_envs": 2, "learning_starts": 50, "batch_size": 32})
    run = script("export_champion.py", store.url, folder / "champion", "--key", "p", "--episodes", "2")
    assert run.returncode == 0, run.stderr[-2000:]
    return folder / "champion"


def _other_champions_policy(folder: Path) -> None:
    """A CartPole policy (4 numbers in) where the Pendulum one (3 numbers) was: files copied from two exports."""
    torch.jit.trace(torch.nn.Linear(4, 1), torch.zeros(1, 4)).save(str(folder / "policy.pt"))


@pytest.mark.parametrize("damage, said", [
    (lambda folder: (folder / "card.json").write_text("[]\n"), "card.json holds a JSON list, not a champion's card"),
    (lambda folder: (folder / "card.json").write_text(json.dumps({"env": "Pendulum-v1", "gymnasium_evaluation": {
        "env_id": "Pendulum-v1", "returns": [-1.0], "score": -1.0}})), "has no valid gymnasium_evaluation.seeds"),
    (lambda folder: (folder / "policy.pt").write_bytes((folder / "policy.pt").read_bytes()[:3000]),
     "policy.pt as a TorchScript policy (damaged, or not written by export_champion.py): PytorchStreamReader"),
    (_other_champions_policy, "policy.pt does not take the observations of shape [3] that its card.json describes"),
], ids=["card-not-an-object", "card-without-seeds", "policy-cut-short", "policy-of-another-champion"])
def test_replaying_a_damaged_export_says_what_is_wrong_in_one_line(exported_pendulum, damage, said, tmp_path):
    """A card or policy.pt damaged in a copy, or files of two exports mixed, were tracebacks (AttributeError,
    KeyError, torch's RuntimeError of its zip reader or of mismatched shapes)."""
    folder = tmp_path / "champion"
    folder.mkdir()
    for name in ("card.json", "policy.pt"):
        (folder / name).write_bytes((exported_pendulum / name).read_bytes())
    damage(folder)
    replay = script("replay_champion.py", folder)
    assert replay.returncode == 2 and replay.stdout == "", replay.stdout + replay.stderr
    assert replay.stderr.startswith("replay_champion: error: ") and replay.stderr.count("\n") == 1, replay.stderr
    assert said in replay.stderr, replay.stderr


def test_an_undamaged_export_still_replays(exported_pendulum):
    replay = script("replay_champion.py", exported_pendulum, "--json")
    assert replay.returncode == 0 and json.loads(replay.stdout)["reproduced"], replay.stdout + replay.stderr


def test_resume_logs_a_command_line_that_can_be_pasted_to_rerun_the_slice(tmp_path):
    """resume.py's log line joined the arguments with spaces: a config path with a space in it, pasted back from
    the cron log, was read as two arguments (`podracer train my runs/pendulum.toml`: "cannot read config 'my'")."""
    config = tmp_path / "my runs" / "pendulum.toml"
    config.parent.mkdir()
    config.write_text('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\n')
    run = script("resume.py", config, "--budget", "0s", "--set", 'run.name="a b"')  # refused before any cluster
    assert run.returncode == 2 and "--budget must be a positive duration" in run.stderr, run.stderr
    logged = run.stdout.splitlines()[0].partition(" resume: podracer ")[2]
    assert shlex.split(logged) == ["train", str(config), "--budget", "0s", "--quiet", "--set", 'run.name="a b"']


UNWRITABLE = Path("/proc/champion")  # a folder whose parent is one, where nothing can be created, even by root


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_export_into_a_folder_that_cannot_be_written_says_so_in_one_line(exported_pendulum):
    """The export evaluated, then out.mkdir's FileNotFoundError (a PermissionError for a folder of another user's)
    was a traceback."""
    store = exported_pendulum.parent / "s.zarr"
    run = script("export_champion.py", store, UNWRITABLE, "--key", "p", "--episodes", "1")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"export_champion: error: cannot write into {UNWRITABLE}: "), run.stderr


@pytest.fixture(scope="module")
def trading_store(tmp_path_factory) -> PodracerStore:
    """A SAC checkpoint "t" on a small synthetic market (100 env steps), scored on the validation period."""
    store = PodracerStore(tmp_path_factory.mktemp("trading") / "t.zarr", create=True)
    torch.set_num_threads(1)
    run_segment(SegmentSpec(key="t", store_url=store.url, env="StockTrading-v0", algorithm="sac", seed=1,
                            hparams={"hidden": [16], "num_envs": 2, "learning_starts": 50, "batch_size": 32},
                            env_step_budget=100, eval_episodes=1, eval_env_kwargs={"period": "validation"},
                            env_kwargs={"market": "synthetic", "assets": 3, "days": 300, "episode_days": 20}))
    return store


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_a_backtest_output_that_cannot_be_written_says_so_in_one_line(trading_store, option):
    """Writing --json or --plot after the backtest was a FileNotFoundError (PermissionError, a full disk's OSError)
    traceback; the figures are printed first, the error after them."""
    out = UNWRITABLE.with_suffix(".json" if option == "--json" else ".png")
    run = script("backtest.py", trading_store.url, "t", option, out)
    assert run.returncode == 2 and "Sharpe ratio" in run.stdout, run.stdout + run.stderr
    assert run.stderr == f"backtest: error: cannot write {out}: No such file or directory\n", run.stderr


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def test_the_card_of_a_champion_with_an_infinite_setting_is_standard_json(tmp_path):
    """IMPALA's `rho_bar = inf` (no truncation, as docs say) was written to card.json as `Infinity`, which only
    Python reads: JavaScript's JSON.parse refused the card, jq read 1.8e308."""
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    trained(store, "i", "CartPole-v1", "impala", {"hidden": [16], "num_envs": 2, "rho_bar": float("inf")})
    run = script("export_champion.py", store.url, tmp_path / "champion", "--key", "i", "--episodes", "2")
    assert run.returncode == 0, run.stderr[-2000:]
    card = json.loads((tmp_path / "champion" / "card.json").read_text(), parse_constant=_refuse_constant)
    assert card["hparams"]["rho_bar"] == "inf" and float(card["hparams"]["rho_bar"]) == float("inf")


def test_the_export_pins_its_checkpoint_before_loading_it_and_unpins_it_when_it_fails(tmp_path, monkeypatch):
    """While a run went on, retention deleted a checkpoint off the leaderboard between the export's choosing it and
    loading it ("no complete checkpoint", seen twice); the export pinned only at the end."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("export_champion", WORKFLOWS / "export_champion.py")
    export_champion = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export_champion)
    store = PodracerStore(tmp_path / "s.zarr", create=True)
    trained(store, "p", "Pendulum-v1", "sac", {"hidden": [16], "num_envs": 2, "learning_starts": 50,
                                               "batch_size": 32})
    pinned_at_load = []

    def load_agent_noting_the_pins(store_, key, *args, **kwargs):  # calls through: the export is the real one
        pinned_at_load.append(key in store_.pinned())
        return load_agent(store_, key, *args, **kwargs)

    monkeypatch.setattr(export_champion, "load_agent", load_agent_noting_the_pins)
    assert export_champion.main([store.url, str(tmp_path / "a"), "--key", "p", "--episodes", "2"]) == 0
    assert pinned_at_load == [True] and store.pinned() == {"p"}

    store.unpin("p")
    pinned_at_load.clear()
    # the evaluation's envs alone beyond any machine's memory: refused after the checkpoint has loaded
    assert export_champion.main([store.url, str(tmp_path / "b"), "--key", "p", "--episodes", str(10**15)]) == 2
    assert pinned_at_load == [True] and store.pinned() == set()  # the export's own pin, released
