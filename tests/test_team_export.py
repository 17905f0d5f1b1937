"""A team checkpoint exported by workflows/export_champion.py: policy.pt (the team) and agent_<i>.pt (each agent
alone) give the checkpoint's deterministic actions in a fresh process that loads them with torch.jit.load only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("vmas")

from dask_podracer.agents.base import make_agent
from dask_podracer.envs import make_vec_env
from dask_podracer.store import PodracerStore
from dask_podracer.train.agent_checkpoints import load_agent, save_agent
from dask_podracer.train.spec import SegmentResult

REPO = Path(__file__).resolve().parents[1]
ENV, ENV_KWARGS = "vmas:simple_tag", {"max_episode_steps": 5}  # 4 agents; the good one sees 14 numbers, not 16
HPARAMS = {"num_envs": 2, "rollout_steps": 4, "num_minibatches": 1, "hidden": [8], "share_parameters": False}

PLAY_EXPORTED = """\
import sys, torch
assert "dask_podracer" not in sys.modules
out, obs = sys.argv[1], torch.load(sys.argv[2])
team = torch.jit.load(out + "/policy.pt")
agents = [torch.jit.load(f"{out}/agent_{i}.pt") for i in range(int(sys.argv[3]))]
widths = [int(w) for w in sys.argv[4].split(",")]
torch.save({"team": team(obs), "agents": [a(obs[:, i, :w]) for i, (a, w) in enumerate(zip(agents, widths))]},
           sys.argv[5])
"""


def _saved_team(store: PodracerStore) -> None:
    env = make_vec_env(ENV, 2, seed=0, **ENV_KWARGS)
    torch.manual_seed(0)
    team = make_agent("ippo", env.single_observation_space, env.single_action_space, HPARAMS)
    with torch.no_grad():  # an untrained head answers ~0 everywhere: move it so the actions tell agents apart
        g = torch.Generator().manual_seed(1)
        for p in team.actor.parameters():
            p.add_(torch.randn(p.shape, generator=g))
    result = SegmentResult(key="team-0", parent=None, algorithm="ippo", env=ENV, hparams=HPARAMS, score=0.0,
                           segment_env_steps=1, lineage_env_steps=1, train_seconds=0.0, eval_seconds=0.0,
                           generation=0, device="cpu", metrics={}, env_kwargs=ENV_KWARGS)
    save_agent(store, "team-0", team, result, seed=0)


def test_an_exported_team_acts_as_its_checkpoint_in_a_fresh_process(tmp_path):
    store = PodracerStore(str(tmp_path / "store.zarr"), create=True)
    _saved_team(store)
    out = tmp_path / "champion"
    out.mkdir()  # a larger team's export was here: its extra agent file would sit beside a card that does not list it
    (out / "agent_9.pt").write_bytes(b"stale")
    (out / "agent_notes.pt").write_bytes(b"not ours")
    exported = subprocess.run([sys.executable, str(REPO / "workflows" / "export_champion.py"), store.url, str(out),
                               "--key", "team-0", "--episodes", "2"], capture_output=True, text=True, check=False)
    assert exported.returncode == 0, exported.stderr
    card = json.loads((out / "card.json").read_text())
    widths = [a["observation_shape"][0] for a in card["agents"]]
    assert card["observation_shape"] == [4, 16] and widths == [16, 16, 16, 14]
    assert [a["policy"] for a in card["agents"]] == [f"agent_{i}.pt" for i in range(4)]
    assert not (out / "agent_9.pt").exists() and (out / "agent_notes.pt").exists()
    assert card["evaluation"]["episodes"] == 2 and len(card["evaluation"]["returns"]) == 2

    obs = make_vec_env(ENV, 3, seed=5, **ENV_KWARGS).reset(seed=5)[0]  # 3 teams: not the traced batch size
    torch.save(obs, tmp_path / "obs.pt")
    played = subprocess.run(
        [sys.executable, "-c", PLAY_EXPORTED, str(out), str(tmp_path / "obs.pt"), "4", ",".join(map(str, widths)),
         str(tmp_path / "actions.pt")],
        capture_output=True, text=True, check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert played.returncode == 0, played.stderr
    actions = torch.load(tmp_path / "actions.pt")

    torch.set_num_threads(1)
    expected = load_agent(store, "team-0", replay=False).act(obs, deterministic=True)
    assert expected.shape == (3, 4, 2) and expected.std() > 0.1  # actions that differ
    torch.testing.assert_close(actions["team"], expected, rtol=0, atol=1e-6)
    for i, action in enumerate(actions["agents"]):
        torch.testing.assert_close(action, expected[:, i], rtol=0, atol=1e-6)
