"""Export a store's champion: a TorchScript policy and a JSON card, loadable without dask_podracer.

    python workflows/export_champion.py STORE OUT_DIR [--key KEY] [--episodes 10] [--env ENV]

Writes OUT_DIR/policy.pt (TorchScript: observations [B, obs_dim] float32 -> deterministic
actions) and OUT_DIR/card.json (env, algorithm, score, hyper-parameters, lineage, and the
evaluation it was scored with). Load it anywhere with `torch.jit.load("policy.pt")`. An env whose observations
are not a Box (FrozenLake's Discrete, Blackjack's Tuple) was trained on them flattened, as the gym adapter presents
them: the policy takes `gymnasium.spaces.flatten(space, obs)` (one-hots; `gymnasium.wrappers.FlattenObservation`),
and the card's `observations_flattened_from` names the env's own space.

The card is standard JSON: a number that is not finite (IMPALA's `rho_bar = inf`) is the string "inf".

The card holds two evaluations.
- `evaluation`: our vectorised env, with the tournament's evaluation seed and the env that scored the
  checkpoint (with `run.eval_env_kwargs`, e.g. a trading agent's validation period; checkpoints written before
  2026-11-28 did not record those). It reproduces the leaderboard score: it runs on the device the score was
  evaluated on, or on the CPU where this machine lacks it, and then float differences between devices may move
  it a little (`evaluation.device` and `scored_on` say which). Each episode's return and score are listed: the
  score is the return unless the env reports its own (a trading env's Sharpe ratio).
- `gymnasium_evaluation`, for gymnasium envs (ids, Env classes of your own) and our envs with a gymnasium twin:
  the exported TorchScript policy played in gymnasium itself, one episode per seed.

`python workflows/replay_champion.py OUT_DIR` reproduces the latter exactly with torch and
gymnasium alone (and, for an Env class of your own, its module). The exported checkpoint is pinned in
the store: retention (`[store]`, `podracer gc`) never deletes it (`podracer pin STORE KEY --unpin` releases it).
It is pinned before it is loaded, so a run going on cannot delete it meanwhile; an export that fails releases
the pin it added.

A team (ippo, mappo, maddpg on a multi-agent env) is exported as policy.pt, the whole team (joint observations
[B, n_agents, obs_dim] -> joint actions [B, n_agents, act_dim], agent i in row i), and agent_<i>.pt, each agent
alone (its own observation -> its own action), listed in the card's `agents` (see team_policies.py); its
`evaluation` score is the team return, the mean over agents.

A champion trained on an env of your own ("my_envs:Arm") is exported only with `--env my_envs:Arm`:
the store names that module, and loading a store imports no code you did not name.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling replay_champion.py plays gymnasium episodes
from replay_champion import play  # noqa: E402
from team_policies import agent_policies  # noqa: E402

from dask_podracer.cli import OneLineArgumentParser
from dask_podracer.cli import import_from_working_directory
from dask_podracer.envs import GymVecEnv, StoredEnvRefused, make_vec_env
from dask_podracer.envs.devices import device_memory
from dask_podracer.envs.multi_agent import is_multi_agent
from dask_podracer.envs.registry import HOW_STEPPED
from dask_podracer.lineage import family_tree
from dask_podracer.store import PodracerStore, StoreError
from dask_podracer.train import SegmentSpec, evaluation_env_kwargs, load_agent
from dask_podracer.train.evaluate import episode_returns_and_scores


class _Policy(torch.nn.Module):
    """The agent's deterministic action function, as a module that tracing can record."""

    def __init__(self, agent) -> None:
        super().__init__()
        self.agent = agent
        # every network of the agent, whatever it calls it (a DQN's is `q_net`), so that requires_grad_(False)
        # reaches the parameters act() uses: tracing refuses a parameter that requires grad as a constant
        for name, value in vars(agent).items():
            if isinstance(value, torch.nn.Module):
                self.add_module(name, value)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.agent.act(obs, deterministic=True)


def export(store: PodracerStore, out: Path, key: str | None = None, episodes: int = 10,
           seed: int = SegmentSpec.eval_seed, env: str | None = None) -> dict:
    """Write `out`/policy.pt and `out`/card.json for checkpoint `key` (default: the best); the card. `env` is
    the env you expect: needed for one imported by path (see `load_agent`)."""
    board = store.read_leaderboard()
    if key is None:
        if not board:
            raise StoreError(f"the leaderboard of '{store.url}' is empty: nothing to export")
        key = board[0]["key"]
    agent = load_agent(store, key, replay=False, env=env)  # a policy to act with: no buffer; on the CPU, to trace
    attrs = store.checkpoint_attrs(key)
    scored_on = attrs.get("device", "cpu")  # absent in checkpoints written before it was recorded
    device = evaluation_device(scored_on)
    evaluator = agent if device.type == "cpu" else load_agent(store, key, device=device, replay=False, env=env)
    env_kwargs = attrs.get("env_kwargs", {})
    one_env = make_vec_env(attrs["env"], 1, **env_kwargs)
    _check_episodes_fit(episodes, one_env)
    team = is_multi_agent(one_env)
    example = torch.as_tensor(one_env.single_observation_space.sample(), dtype=torch.float32)
    example = example.unsqueeze(0) if team else example.reshape(1, -1)  # a team's: [1, n_agents, obs_dim]
    policy = _Policy(agent).requires_grad_(False)  # a traced graph keeps no no_grad context: drop grads here
    scripted = torch.jit.trace(policy, torch.cat([example] * 4), check_trace=False)
    # the evaluations first, nothing written until they are done: one that failed (or was killed) left a new
    # policy.pt beside no card, or beside the card of the champion exported there before
    evaluation = _evaluation(evaluator, attrs["env"], episodes, seed, evaluation_env_kwargs(attrs), device)
    gymnasium_evaluation = _gymnasium_evaluation(scripted, one_env, attrs["env"], episodes, seed, env_kwargs)
    out.mkdir(parents=True, exist_ok=True)
    scripted.save(str(out / "policy.pt"))
    agents = agent_policies(scripted, one_env, out) if team else None
    exported = {entry["policy"] for entry in agents or []}
    for stale in out.glob("agent_*.pt"):  # a larger team's, exported here before: this card would not list them
        if re.fullmatch(r"agent_\d+\.pt", stale.name) and stale.name not in exported:
            stale.unlink()
    card = {
        "key": key, "env": attrs["env"], "env_kwargs": env_kwargs, "algorithm": attrs["algorithm"],
        "score": attrs["score"],
        "env_steps": attrs["env_steps"], "generation": attrs["generation"], "parent": attrs["parent"],
        "hparams": attrs["hparams"], "store": store.url,
        "scored_on": scored_on,
        "evaluation": evaluation,
        "gymnasium_evaluation": gymnasium_evaluation,
        "lineage": family_tree(store.read_history(), key).splitlines() if _in_history(store, key) else [key],
        "observation_shape": list(one_env.single_observation_space.shape),
        "action_space": str(one_env.single_action_space),
    }
    if getattr(one_env, "flattened", None) is not None:  # the policy takes the env's observations flattened
        card["observations_flattened_from"] = str(one_env.flattened)
    if agents is not None:
        card["agents"] = agents
    (out / "card.json").write_text(json.dumps(_standard_json(card), indent=2, allow_nan=False) + "\n")
    return card


def _standard_json(value):
    """`value` with every float that is not finite written as a string ("inf", "-inf", "nan"; Python's float()
    reads them back): json.dumps wrote IMPALA's `rho_bar = inf` as Infinity, which is not JSON, so the card did
    not parse outside Python (JavaScript's JSON.parse refused it, jq read 1.8e308)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _standard_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_standard_json(v) for v in value]
    return value


def _on_the_way_to(filename, out: Path) -> bool:
    """Whether `filename` (an OSError's) is `out`, a folder above it (made for it) or a file in it."""
    if not filename:
        return False
    path, out = Path(filename).resolve(), out.resolve()
    return path == out or path in out.parents or path.is_relative_to(out)


def _check_episodes_fit(episodes: int, env) -> None:
    """A ValueError naming --episodes when the evaluation env's observations alone are more than this machine's
    memory: the evaluation steps `episodes` envs at once, and --episodes 100000000 on a VMAS team got the export
    OOM-killed (its policy files already written). A floor: each step holds an observation and a final one."""
    memory = device_memory(torch.device("cpu"))
    if memory is None:  # not a system that tells
        return
    need = episodes * 2 * 4 * math.prod(env.single_observation_space.shape)
    if need > memory:
        raise ValueError(f"--episodes {episodes:,} evaluates that many envs at once: their observations alone need "
                         f"at least {need / 2**30:,.1f} GiB, more than this machine's {memory / 2**30:,.1f} GiB")


def evaluation_device(scored_on: str) -> torch.device:
    """Where to repeat the evaluation a score came from: its own device if this machine has it, else the CPU.

    The same env and network on another device give the same episodes only up to float
    differences, which a long episode can grow, so the device it was scored on comes first."""
    device = torch.device(scored_on)
    if device.type == "cuda" and torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count():
        return device
    return torch.device("cpu")


def _evaluation(agent, env_name: str, episodes: int, seed: int, env_kwargs: dict, device: torch.device) -> dict:
    """The deterministic evaluation the score comes from, as a segment scores (train/evaluate.py), with each
    episode's first observation, return and score (its return, or the env's own `episode_score`: a trading
    env's Sharpe ratio), so it can be replayed without dask_podracer (e.g. in gymnasium from the same initial
    states). `env_kwargs` are those of the env that scored the checkpoint."""
    env = make_vec_env(env_name, episodes, device=device, seed=seed, **env_kwargs)
    first = env.reset(seed=seed)[0].cpu()  # what the evaluation's own reset, with this seed, starts from
    returns, scores = episode_returns_and_scores(agent, env, seed)
    return {"seed": seed, "episodes": episodes, "device": str(env.device), "env_kwargs": env_kwargs,
            "score": float(scores.mean()), "returns": returns.tolist(), "scores": scores.tolist(),
            "initial_observations": first.tolist(), "max_episode_steps": env.max_episode_steps}


GYMNASIUM_TWINS = {"Pendulum-v1", "CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"}
"""Our torch envs that match a gymnasium env of the same id step for step (tests/test_envs*.py)."""


def _gymnasium_evaluation(policy: torch.nn.Module, env, env_name: str, episodes: int, seed: int,
                          env_kwargs: dict) -> dict | None:
    """The exported policy in gymnasium's own env, seeds `seed`, `seed + 1`, ...: what replay_champion.py replays.
    A gymnasium env is made with the env's kwargs, less those of HOW_STEPPED (a vector env's, not the env's);
    with kwargs, our twins have no gymnasium counterpart. An Env class of your own is made from its import
    path, recorded as the `entry_point`."""
    make_kwargs = {k: v for k, v in env_kwargs.items() if k not in HOW_STEPPED}
    entry_point = None
    if isinstance(env, GymVecEnv) and env.env_class is not None:
        env_id = entry_point = env_name
    elif env_name.startswith("gym:"):
        env_id = env_name.removeprefix("gym:")
    elif env_name in GYMNASIUM_TWINS and not env_kwargs:
        env_id = env_name
    else:
        return None
    seeds = [seed + i for i in range(episodes)]
    returns = play(policy, env_id, seeds, make_kwargs, entry_point)
    return {"env_id": env_id, "entry_point": entry_point, "env_kwargs": make_kwargs, "seeds": seeds,
            # math.fsum: rounded once, so replay_champion.py gets the same score on any Python (3.12's sum() is
            # compensated, 3.11's is not: they differed in the last digit)
            "returns": returns, "score": math.fsum(returns) / len(returns)}


def _hold(store: PodracerStore, key: str | None, out: Path) -> bool:
    """Pin `key` for the export's duration, unless it is pinned already or is no checkpoint (the export names
    that); whether it pinned. A running run's retention deleted a checkpoint off the leaderboard between the
    export's choosing it and loading it ("no complete checkpoint", seen twice while a run went on)."""
    try:
        if key is None or key in store.pinned():
            return False
        store.pin(key, f"being exported to {out.resolve()}")  # CheckpointNotFound (a StoreError) for no checkpoint
        return True
    except (StoreError, OSError):  # no such checkpoint, or a store one may only read: export unpinned, as before
        return False


def _release(store: PodracerStore, key: str) -> None:
    try:
        store.unpin(key)
    except (StoreError, OSError):
        pass


def _in_history(store: PodracerStore, key: str) -> bool:
    return any(r.get("key") == key and r.get("status") == "finished" for r in store.read_history())


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", help="Zarr store path or URL")
    parser.add_argument("out", help="directory to write policy.pt and card.json into")
    parser.add_argument("--key", help="a checkpoint key (default: the leaderboard's best)")
    parser.add_argument("--episodes", type=int, default=10,
                        help="evaluation episodes recorded in the card (the run's segment.eval_episodes reproduces "
                             "the leaderboard score)")
    parser.add_argument("--env", help="the env the champion is trained on; needed for an env of your own "
                                      "('my_envs:Arm'), whose module the store would otherwise import unasked")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        print(f"export_champion: error: --episodes must be >= 1, got {args.episodes}", file=sys.stderr)
        return 2
    out = Path(args.out)
    blocker = next((p for p in (out, *out.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():  # before the evaluation, not after it
        print(f"export_champion: error: cannot write into {args.out}: {str(blocker)!r} is a file, not a directory",
              file=sys.stderr)
        return 2
    if blocker is not None and not os.access(blocker, os.W_OK | os.X_OK):  # another's folder, a read-only mount
        print(f"export_champion: error: cannot write into {args.out}: {str(blocker)!r} is not writable",
              file=sys.stderr)
        return 2
    import_from_working_directory()  # an env of your own ('my_envs:Reach'), beside where this runs
    torch.set_num_threads(1)  # segments evaluate on one thread: the same count gives the same numbers
    key, held, exported = args.key, False, False
    try:
        store = PodracerStore(args.store)
        key = key or next((entry["key"] for entry in store.read_leaderboard()), None)
        held = _hold(store, key, out)
        card = export(store, out, key, episodes=args.episodes, env=args.env)
        exported = True
    except (StoreError, StoredEnvRefused, ValueError) as e:  # ValueError: a malformed --key
        print(f"export_champion: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # writing what os.access allowed and the file system refused (/proc, a full disk)
        if not _on_the_way_to(e.filename, out):  # not a file or folder of ours: its traceback says more
            raise
        print(f"export_champion: error: cannot write into {args.out}: {e.strerror or e} ({e.filename})",
              file=sys.stderr)
        return 2
    finally:
        if held and not exported:  # the pin was only the export's, for its duration
            _release(store, key)
    print(f"exported {card['key']} ({card['algorithm']} on {card['env']}, score {card['score']:.1f}) to {args.out}")
    try:  # an exported champion is kept whatever the store's retention policy says
        PodracerStore(args.store).pin(card["key"], f"exported to {Path(args.out).resolve()}")
    except (StoreError, OSError) as e:  # a store one may only read: the export stands
        print(f"export_champion: warning: {card['key']} is not pinned against retention: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
