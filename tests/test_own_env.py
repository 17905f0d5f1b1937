"""Envs of one's own: by import path ("my_envs:Reach"), gymnasium ids with their registering module, env_kwargs,
and `podracer check-env`. The first test runs docs/envs.md's "Your own environment" files as written."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from dask_podracer.agents import make_agent
from dask_podracer.cli import main
from dask_podracer.config import ConfigError, config_from_dict
from dask_podracer.envs import check_vec_env, make_vec_env
from dask_podracer.population import check_constructs
from dask_podracer.store import PodracerStore
from dask_podracer.train import evaluate, load_agent

DOCS = Path(__file__).resolve().parents[1] / "docs" / "envs.md"
WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"
PODRACER = [str(Path(sys.executable).with_name("podracer"))]
"""The console script a user runs: its own directory, not the working one, is first on its sys.path."""


def docs_files(folder: Path) -> list[str]:
    """Write the code blocks of docs/envs.md that open with a file name comment ("# my_envs.py") into `folder`."""
    names = []
    for body in re.findall(r"```\w+\n(.*?)```", DOCS.read_text(), re.DOTALL):
        match = re.fullmatch(r"# ([\w.]+\.(?:py|toml))", body.splitlines()[0])
        if match:
            (folder / match.group(1)).write_text(body)
            names.append(match.group(1))
    return names


def check_train_and_export(folder: Path, toml: str, env_name: str) -> tuple[dict, dict]:
    """From `folder`, as a user would: `podracer check-env TOML`, `podracer train TOML` (which must reach its
    target), then export_champion.py on the store. The run's summary and the champion's card."""
    checked = subprocess.run([*PODRACER, "check-env", toml], cwd=folder, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"{env_name}: keeps the VecEnv contract (8 envs on cpu, 50 steps")
    trained = subprocess.run([*PODRACER, "train", toml, "--quiet", "--json", "summary.json", "--budget", "90s"],
                             cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    assert trained.returncode == 0, trained.stderr
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["stop_reason"] == "target" and summary["best_score"] >= -10.0
    exported = subprocess.run([sys.executable, str(WORKFLOWS / "export_champion.py"), summary["store"], "champion",
                               "--episodes", "4", "--env", env_name], cwd=folder, capture_output=True, text=True,
                              check=False)
    assert exported.returncode == 0, exported.stderr
    return summary, json.loads((folder / "champion" / "card.json").read_text())


def assert_the_champion_learned(summary: dict, env, env_name: str) -> None:
    """An untrained actor barely moves and scores about -38 on Reach; the stored champion goes to the centre."""
    torch.manual_seed(0)
    untrained = make_agent("sac", env.single_observation_space, env.single_action_space, {"hidden": [64, 64]})
    assert evaluate(untrained, env, seed=1_000_003) < -25.0
    champion = load_agent(PodracerStore(summary["store"]), summary["best_key"], replay=False, env=env_name)
    assert evaluate(champion, env, seed=1_000_003) >= -10.0


@pytest.mark.slow
def test_the_docs_own_env_runs_as_written_through_the_cli(tmp_path, monkeypatch):
    assert docs_files(tmp_path) == ["my_envs.py", "reach.toml", "my_gym_envs.py", "reach_one.toml"]
    # `podracer` run from the folder: the module is found there, by the client and the workers, and the
    # workflows that rebuild the env from the store find it too
    summary, card = check_train_and_export(tmp_path, "reach.toml", "my_envs:Reach")
    assert card["env"] == "my_envs:Reach" and card["env_kwargs"] == {"speed": 0.2}
    assert card["evaluation"]["score"] >= -10.0 and card["gymnasium_evaluation"] is None

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    attrs = PodracerStore(summary["store"]).checkpoint_attrs(summary["best_key"])
    assert attrs["env"] == "my_envs:Reach" and attrs["env_kwargs"] == {"speed": 0.2}
    env = make_vec_env("my_envs:Reach", 10, seed=1_000_003, speed=0.2)
    assert check_vec_env(env).truncations == 10
    assert_the_champion_learned(summary, env, "my_envs:Reach")


@pytest.mark.slow
def test_the_docs_gymnasium_env_class_runs_as_written_through_the_cli_and_replays_in_gymnasium(tmp_path, monkeypatch):
    docs_files(tmp_path)
    summary, card = check_train_and_export(tmp_path, "reach_one.toml", "my_gym_envs:ReachOne")
    played = card["gymnasium_evaluation"]
    assert played["entry_point"] == "my_gym_envs:ReachOne" and played["env_kwargs"] == {"speed": 0.2,
                                                                                          "max_episode_steps": 50}
    # the same episodes, stepped by gymnasium one env at a time and by the adapter as a batch
    assert played["returns"] == pytest.approx(card["evaluation"]["returns"], abs=1e-4)
    replayed = subprocess.run([sys.executable, str(WORKFLOWS / "replay_champion.py"), "champion", "--json",
                               "--env", "my_gym_envs:ReachOne"], cwd=tmp_path, capture_output=True, text=True,
                              check=False)
    assert replayed.returncode == 0, replayed.stderr
    outcome = json.loads(replayed.stdout)
    assert outcome["reproduced"] and not outcome["dask_podracer_imported"]

    monkeypatch.syspath_prepend(str(tmp_path))
    assert_the_champion_learned(summary, make_vec_env("my_gym_envs:ReachOne", 10, seed=1_000_003, speed=0.2,
                                                      max_episode_steps=50), "my_gym_envs:ReachOne")


def test_a_gymnasium_env_class_is_stepped_by_gymnasiums_vector_envs(tmp_path, monkeypatch):
    import gymnasium as gym

    from dask_podracer.envs import GymVecEnv

    docs_files(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    from my_gym_envs import ReachOne

    env = make_vec_env("my_gym_envs:ReachOne", 3, seed=5, speed=0.2, max_episode_steps=10)
    assert isinstance(env, GymVecEnv) and env.env_class is ReachOne and env.max_episode_steps == 10
    assert check_vec_env(env).truncations == 3
    obs, _ = env.reset(seed=5)
    one = ReachOne(speed=0.2)
    assert torch.equal(obs, torch.stack([torch.from_numpy(one.reset(seed=5 + i)[0]) for i in range(3)]))
    # no time limit: refused, naming the kwarg, before a cluster starts
    with pytest.raises(ValueError, match=r"my_gym_envs:ReachOne has no time limit; give it one with "
                                         r"max_episode_steps in its kwargs \(run.env_kwargs\)"):
        make_vec_env("my_gym_envs:ReachOne", 2)
    with pytest.raises(ConfigError, match=r"run.env_kwargs \{'sped': 0.2, 'max_episode_steps': 5\} do not fit "
                                          r"'my_gym_envs:ReachOne': .*unexpected keyword argument 'sped'"):
        check_constructs(config_from_dict({"run": {"env": "my_gym_envs:ReachOne", "algorithm": "sac",
                                                   "env_kwargs": {"sped": 0.2, "max_episode_steps": 5}}}))
    # the same rule for a gymnasium id registered without a limit
    with pytest.raises(ValueError, match=r"gym:CliffWalking-v1 has no time limit"):
        make_vec_env("gym:CliffWalking-v1", 2)
    assert make_vec_env("gym:CliffWalking-v1", 2, max_episode_steps=30).max_episode_steps == 30
    assert not gym.spec("CliffWalking-v1").max_episode_steps


def test_an_import_path_that_does_not_lead_to_a_vec_env_is_a_config_error_naming_it():
    def config(env):
        return config_from_dict({"run": {"env": env, "algorithm": "sac"}})

    with pytest.raises(ConfigError, match=r"run.env: env 'no_such_module:Env': cannot import module "
                                          r"'no_such_module' \(No module named 'no_such_module'\); it must be "
                                          r"importable wherever segments run"):
        config("no_such_module:Env")
    with pytest.raises(ConfigError, match=r"module 'os' has no attribute 'NoSuchEnv'"):
        config("os:NoSuchEnv")
    with pytest.raises(ConfigError, match=r"env 'os:sep': sep is a str, not a VecEnv class or factory, or a "
                                          r"gymnasium Env class"):
        config("os:sep")
    with pytest.raises(ConfigError, match=r"a VecEnv defined in the script that runs cannot be imported by workers"):
        config("__main__:Reach")
    with pytest.raises(ConfigError, match=r"run.env: unknown env 'not an env'. dask_podracer's own: Acrobot-v1, .*; "
                                          r"any gymnasium id as 'gym:<id>'; .*your own VecEnv class or factory, or "
                                          r"gymnasium Env class, as '<module>:<name>'$"):
        config("not an env")
    # a gymnasium id without its prefix, a near miss of ours: what was meant comes first
    with pytest.raises(ConfigError, match=r"run.env: unknown env 'LunarLander-v3': it is gymnasium's, not one of "
                                          r"dask_podracer's own; write it as 'gym:LunarLander-v3'"):
        config("LunarLander-v3")
    with pytest.raises(ConfigError, match=r"run.env: unknown env 'pendulum-v1'; did you mean 'Pendulum-v1'\? "):
        config("pendulum-v1")
    with pytest.raises(ConfigError, match=r"run.env_kwargs must be a table of keyword arguments, got 3"):
        config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "env_kwargs": 3}})
    with pytest.raises(ConfigError, match=r"run.env_kwargs must be strings, numbers, booleans, lists and tables "
                                          r"\(checkpoints keep them as JSON\), got \{'start': datetime.date"):
        config_from_dict(tomllib.loads('[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\n'
                                       'env_kwargs = { start = 2024-01-01 }\n'))


def test_a_factory_must_build_a_vec_env():
    with pytest.raises(TypeError, match=r"env 'builtins:dict' built a dict, which is not a VecEnv: it has no "
                                        r"num_envs, device, single_observation_space"):
        make_vec_env("builtins:dict", 2)


def test_env_kwargs_that_the_env_does_not_take_are_refused_before_a_cluster_starts(tmp_path, capsys):
    config = config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "env_kwargs": {"gravity": 3.0},
                                       "store": str(tmp_path / "s.zarr")}})
    with pytest.raises(ConfigError, match=r"run.env_kwargs \{'gravity': 3.0\} do not fit 'Pendulum-v1': "
                                          r".*unexpected keyword argument 'gravity'"):
        check_constructs(config)
    path = tmp_path / "bad.toml"
    path.write_text(f'[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nstore = "{tmp_path / "s.zarr"}"\n'
                    f'env_kwargs = {{ gravity = 3.0 }}\n')
    assert main(["train", str(path)]) == 2
    assert "do not fit 'Pendulum-v1'" in capsys.readouterr().err
    assert not (tmp_path / "s.zarr").exists()


GRID_ENVS = """import gymnasium as gym
import numpy as np


class Grid(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3, 4), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, (3, 4)).astype(np.float32), {}

    def step(self, action):
        obs = self.np_random.uniform(-1, 1, (3, 4)).astype(np.float32)
        return obs, float(-abs(action[0] - obs[0, 0])), False, False, {}


class GridChoice(Grid):
    action_space = gym.spaces.Discrete(2)

    def step(self, action):
        obs = self.np_random.uniform(-1, 1, (3, 4)).astype(np.float32)
        return obs, float(int(action) == int(obs[1, 2] > 0)), False, False, {}
"""


@pytest.mark.parametrize("env_name, algorithm, hparams", [
    ("grid_envs:Grid", "sac", {}),
    ("grid_envs:Grid", "td3", {"normalize_observations": True}),
    ("grid_envs:Grid", "sac", {"pipeline": True}),
    ("grid_envs:GridChoice", "d3qn", {}),
    ("grid_envs:Grid", "ppo", {"rollout_steps": 8, "num_minibatches": 2, "epochs": 1}),
])
def test_every_single_agent_algorithm_trains_on_observations_of_any_shape(tmp_path, monkeypatch, env_name,
                                                                          algorithm, hparams):
    # SAC, TD3, DDPG and the DQN family sized their networks and replay rows by the first axis of a (3, 4) Box,
    # and every segment failed after the cluster had started ("shape '[4, 3]' is invalid for input of size 48");
    # they flatten in obs_norm now, as PPO flattens as it acts
    (tmp_path / "grid_envs.py").write_text(GRID_ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    torch.manual_seed(0)
    env = make_vec_env(env_name, 4, seed=0, max_episode_steps=20)
    off_policy = {"learning_starts": 8, "batch_size": 8} if algorithm != "ppo" else {}
    settings = {"num_envs": 4, "hidden": [16], **off_policy, **hparams}
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, settings)
    obs, _ = env.reset(seed=0)
    for _ in range(12):
        obs, steps, metrics = agent.train_iteration(env, obs)
    agent.finish()
    assert obs.shape == (4, 3, 4) and all(np.isfinite(v) for v in metrics.values())
    assert algorithm == "ppo" or agent.updates > 0  # a pipelined learner's metrics may come an iteration later
    copy = make_agent(algorithm, env.single_observation_space, env.single_action_space, settings)
    copy.load_state_dict(agent.state_dict())
    assert torch.equal(copy.act(obs), agent.act(obs)) and agent.act(obs).shape[0] == 4


def test_ape_x_chunks_of_observations_of_any_shape_reach_the_learner(tmp_path, monkeypatch):
    # an actor's chunk holds [steps * envs, 3, 4] observations: flattened where the learner reads them
    (tmp_path / "grid_envs.py").write_text(GRID_ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    torch.manual_seed(0)
    env = make_vec_env("grid_envs:Grid", 4, seed=0, max_episode_steps=20)
    settings = {"num_envs": 4, "hidden": [16], "learning_starts": 8, "batch_size": 8, "prioritized": True}
    actor, learner = (make_agent("ddpg", env.single_observation_space, env.single_action_space, settings)
                      for _ in range(2))
    actor.start_acting(0, 2)
    obs, _ = env.reset(seed=0)
    chunks = []
    for _ in range(3):
        obs, chunk, _ = actor.collect(env, obs)
        chunks.append(chunk)
    assert chunks[0]["obs"].shape[1:] == (3, 4) and chunks[0]["priorities"].isfinite().all()
    metrics = learner.learn(chunks)
    assert metrics["replay_size"] == sum(len(c["rewards"]) for c in chunks) and np.isfinite(metrics["critic_loss"])


def test_a_tournament_trains_sac_on_an_env_of_2d_observations(tmp_path, monkeypatch, capsys):
    (tmp_path / "grid_envs.py").write_text(GRID_ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the embedded cluster's workers import grid_envs from where podracer runs
    store = tmp_path / "s.zarr"
    path = tmp_path / "grid.toml"
    path.write_text(f'[run]\nenv = "grid_envs:Grid"\nalgorithm = "sac"\nstore = "{store}"\nmax_segments = 4\n'
                    f'budget = "60s"\nenv_kwargs = {{ max_episode_steps = 20 }}\n[segment]\nenv_steps = 400\n'
                    f'[hparams]\nhidden = [16]\nlearning_starts = 50\n')
    assert main(["train", str(path), "--quiet"]) == 0
    board = PodracerStore(str(store)).read_leaderboard()
    assert len(board) >= 3 and any(e["parent"] for e in board)  # children loaded their parents' networks


def test_a_gymnasium_id_may_name_the_module_that_registers_it(tmp_path, monkeypatch):
    (tmp_path / "registering_envs.py").write_text(
        'import gymnasium\n'
        'gymnasium.register("ShortPendulum-v0", entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",'
        ' max_episode_steps=20)\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    config = config_from_dict({"run": {"env": "gym:registering_envs:ShortPendulum-v0", "algorithm": "sac",
                                       "env_kwargs": {"g": 4.0}}})
    env = make_vec_env(config.run.env, 3, seed=0, **config.run.env_kwargs)
    assert env.max_episode_steps == 20 and env.env.envs[0].unwrapped.g == 4.0
    assert check_vec_env(env).truncations == 3
    with pytest.raises(ImportError, match=r"gym:missing_module:Arm-v0: cannot import module 'missing_module', "
                                          r"which should register 'Arm-v0'"):
        make_vec_env("gym:missing_module:Arm-v0", 1)


def test_check_env_names_the_broken_rule_and_exits_1(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_envs.py").write_text(
        "from dask_podracer.envs import PendulumVecEnv\n"
        "class WrongReward(PendulumVecEnv):\n"
        "    def step(self, actions):\n"
        "        obs, reward, terminated, truncated, info = super().step(actions)\n"
        "        return obs, reward.double(), terminated, truncated, info\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["check-env", "broken_envs:WrongReward", "--num-envs", "2"]) == 1
    assert "broken_envs:WrongReward breaks the VecEnv contract: WrongReward: reward has dtype torch.float64, " \
           "expected torch.float32" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\nenv = "no_such_module:Env"\nalgorithm = "sac"\n')
    assert main(["check-env", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"podracer: error: {bad}: run.env: env 'no_such_module:Env': cannot")
    assert main(["check-env", "Pendulum-v1", "--env-kwargs", "[1]"]) == 2
    assert "--env-kwargs must be a JSON object" in capsys.readouterr().err
    for device in ("gpu", "cuda:64"):  # a name torch does not know; no CUDA here, or fewer than 65 devices
        assert main(["check-env", "Pendulum-v1", "--device", device]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"podracer: error: cannot use --device {device!r}: ") and err.count("\n") == 1, err
    assert main(["check-env", "CartPole-v1", "--num-envs", "4", "--max-steps", "30"]) == 0
    assert capsys.readouterr().out.startswith("CartPole-v1: keeps the VecEnv contract (4 envs on cpu, 30 steps")


def test_a_store_trained_with_other_env_kwargs_is_not_resumed(tmp_path):
    from dask_podracer.population import check_store_fits

    store = PodracerStore(tmp_path / "s.zarr", create=True)
    store.write_run_state({"env": "gym:Pendulum-v1", "env_kwargs": {"g": 4.0}, "machine": {"agents": []}})
    run = {"env": "gym:Pendulum-v1", "algorithm": "sac", "store": store.url}
    check_store_fits(config_from_dict({"run": {**run, "env_kwargs": {"g": 4.0}}}))  # the same: resumes
    # a process per env instead of one process steps the same env: resumes
    check_store_fits(config_from_dict({"run": {**run, "env_kwargs": {"g": 4.0, "vectorization_mode": "async"}}}))
    with pytest.raises(ConfigError, match=r"holds a tournament on 'gym:Pendulum-v1' with env_kwargs \{'g': 4.0\}, "
                                          r"and run.env_kwargs is \{'g': 9.0\}: resume it with the config"):
        check_store_fits(config_from_dict({"run": {**run, "env_kwargs": {"g": 9.0}}}))
