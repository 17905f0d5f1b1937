"""gymnasium envs whose observations are not a Box (FrozenLake's and Taxi's Discrete, Blackjack's Tuple) through the
`gym:` adapter: it presents them flattened (a one-hot, or the parts' one-hots side by side) as a float32 Box, so a
config can name them as they are. Every algorithm refused them before, and a config cannot wrap an env."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box

from dask_podracer.cli import main
from dask_podracer.envs import check_vec_env, make_vec_env
from dask_podracer.store import PodracerStore

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"


@pytest.mark.parametrize("env_id, kwargs, width", [
    ("gym:FrozenLake-v1", {}, 16),  # Discrete(16)
    ("gym:Blackjack-v1", {"max_episode_steps": 10}, 32 + 11 + 2),  # Tuple(Discrete(32), Discrete(11), Discrete(2))
])
def test_observations_that_are_not_a_box_are_presented_flattened(env_id, kwargs, width):
    env = make_vec_env(env_id, 4, seed=0, **kwargs)
    assert env.single_observation_space == Box(0.0, 1.0, (width,), np.float32)
    assert env.flattened is not None and not isinstance(env.flattened, Box)  # the env's own space, kept
    check_vec_env(env)  # terminations and truncations included
    obs, _ = env.reset(seed=0)
    assert obs.dtype == torch.float32 and obs.shape == (4, width)
    parts = 1 if env_id == "gym:FrozenLake-v1" else 3
    assert torch.all(obs.sum(dim=1) == parts)  # one one-hot per part


def test_a_box_observation_is_left_as_it_is():
    env = make_vec_env("gym:CartPole-v1", 2)
    assert env.flattened is None and env.single_observation_space == env.env.single_observation_space


def test_a_tournament_learns_frozen_lake_from_its_discrete_observations(tmp_path, capsys):
    # was refused: "dqn needs a Box observation space, got Discrete(16)"; the deterministic lake is solved (return
    # 1.0: the goal reached) by DQN within 16,000 env steps, where a fresh agent scores 0
    store = tmp_path / "lake.zarr"
    path = tmp_path / "lake.toml"
    path.write_text(f'[run]\nenv = "gym:FrozenLake-v1"\nenv_kwargs = {{ is_slippery = false }}\nalgorithm = "dqn"\n'
                    f'store = "{store}"\nbudget = "2m"\ntarget_return = 1.0\nmax_segments = 4\nseed = 0\n'
                    f'[tournament]\npool_size = 1\n[segment]\nenv_steps = 4000\n'
                    f'[cluster]\nworkers = 1\ndashboard_address = "127.0.0.1:0"\n[hparams]\nlearning_starts = 500\n')
    assert main(["train", str(path), "--quiet"]) == 0
    history = PodracerStore(str(store)).read_history()
    assert all(r["status"] == "finished" for r in history)
    assert max(r["score"] for r in history) == 1.0
    # the champion exported, and replayed in gymnasium's own FrozenLake (its observations flattened as in training)
    out = tmp_path / "champion"
    for command in (["export_champion.py", str(store), str(out), "--episodes", "2"],
                    ["replay_champion.py", str(out), "--json"]):
        run = subprocess.run([sys.executable, str(WORKFLOWS / command[0]), *command[1:]], capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
    card = json.loads((out / "card.json").read_text())
    assert card["observations_flattened_from"] == "Discrete(16)" and card["gymnasium_evaluation"]["score"] == 1.0
    assert json.loads(run.stdout)["reproduced"]
