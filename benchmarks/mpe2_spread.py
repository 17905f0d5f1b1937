"""MAPPO / IPPO on PettingZoo MPE2's simple_spread_v3 (3 agents cover 3 landmarks), one lineage, one torch thread.

    python benchmarks/mpe2_spread.py [--config workflows/configs/mpe2_spread.toml] [--seconds 180]
                                     [--seed 0] [--snapshot-every 15 | --snapshot-steps 32000]
                                     [--team-steps 320000] [--eval-episodes 200]
                                     [--set hparams.num_envs=128 run.algorithm=ippo ...]

Trains the config's algorithm and hparams alone (no cluster, no tournament: `agent.train_iteration`, as the
segments do) for `--seconds` of wall-clock (or until `--team-steps`), keeps a copy of the weights every
`--snapshot-every` seconds (or every `--snapshot-steps` team steps), and
scores every copy afterwards (so scoring takes none of the training time) on the same `--eval-episodes`
deterministic episodes (the env seeded `--eval-seed`; actions deterministic, as the tournament's evaluation).
Scores are team returns: the mean over agents of each agent's episode return (docs/multi_agent.md). Two
baselines on the same episodes: the untrained policy (the weights before the first iteration, deterministic)
and a uniform random policy (actions drawn uniformly in the Box [0, 1]^5 of each agent).

To measure a change of the library, run this file with PYTHONPATH pointing at another checkout (e.g. a git
worktree at an older commit): the JSON names the dask_podracer it imported and that checkout's commit.
Prints the curve; the last line is JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def checkout_commit(module_file: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(Path(module_file).resolve().parents[1]), "rev-parse", "--short",
                               "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "workflows/configs/mpe2_spread.toml")
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--snapshot-every", type=float, default=15.0)
    parser.add_argument("--team-steps", type=int, default=0,
                        help="stop after this many team steps too (0: only --seconds)")
    parser.add_argument("--snapshot-steps", type=int, default=0,
                        help="a copy every this many team steps instead of every --snapshot-every seconds, so that "
                             "runs of two checkouts compare at equal steps")
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--eval-seed", type=int, default=12345)
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                        help="config values to change, as podracer train's --set: hparams.epochs=4")
    args = parser.parse_args()

    import torch

    import dask_podracer
    from dask_podracer.agents.base import make_agent
    from dask_podracer.config import ConfigError, load_config
    from dask_podracer.envs import make_vec_env
    from dask_podracer.train.evaluate import episode_scores

    torch.set_num_threads(1)
    try:
        config = load_config(args.config, args.set)
    except ConfigError as e:
        parser.error(str(e))
    env_id, algorithm, env_kwargs = config.run.env, config.run.algorithm, dict(config.run.env_kwargs)
    hparams = {**config.hparams, "seed": args.seed}

    torch.manual_seed(args.seed)
    env = make_vec_env(env_id, hparams["num_envs"], seed=args.seed, **env_kwargs)
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    eval_env = make_vec_env(env_id, args.eval_episodes, seed=args.eval_seed, **env_kwargs)

    snapshots = [{"wall_s": 0.0, "cpu_s": 0.0, "team_steps": 0, "iterations": 0,
                  "state": copy.deepcopy(agent.state_dict())}]
    start, cpu_start = time.monotonic(), time.process_time()
    obs, _ = env.reset(seed=args.seed)
    steps, iterations = 0, 0
    next_snapshot = args.snapshot_steps or args.snapshot_every
    while time.monotonic() - start < args.seconds and not (args.team_steps and steps >= args.team_steps):
        obs, n, _ = agent.train_iteration(env, obs)
        steps, iterations = steps + n, iterations + 1
        elapsed = time.monotonic() - start
        clock = steps if args.snapshot_steps else elapsed
        if clock >= next_snapshot or elapsed >= args.seconds or (args.team_steps and steps >= args.team_steps):
            snapshots.append({"wall_s": round(elapsed, 1), "cpu_s": round(time.process_time() - cpu_start, 1),
                              "team_steps": steps, "iterations": iterations,
                              "state": copy.deepcopy(agent.state_dict())})
            while next_snapshot <= clock:
                next_snapshot += args.snapshot_steps or args.snapshot_every

    class Random:  # uniform actions in each agent's Box, a fresh draw every step from one seeded generator
        def __init__(self):
            self.g = torch.Generator().manual_seed(args.eval_seed)

        def act(self, obs, deterministic=True):
            return torch.rand(obs.shape[0], *eval_env.single_action_space.shape, generator=self.g)

    random_return = float(episode_scores(Random(), eval_env, args.eval_seed).mean())
    curve = []
    for snapshot in snapshots:
        agent.load_state_dict(snapshot.pop("state"))
        scores = episode_scores(agent, eval_env, args.eval_seed)
        curve.append({**snapshot, "return": round(float(scores.mean()), 3),
                      "sem": round(float(scores.std() / len(scores) ** 0.5), 3)})
        print(f"{snapshot['wall_s']:7.1f} s  {snapshot['team_steps']:>9,} team steps  "
              f"return {curve[-1]['return']:8.3f} ± {curve[-1]['sem']:.3f}", flush=True)
    best = max(curve[1:], key=lambda c: c["return"]) if len(curve) > 1 else curve[0]
    print(f"random policy {random_return:.3f}; untrained {curve[0]['return']:.3f}; final {curve[-1]['return']:.3f}; "
          f"best {best['return']:.3f} at {best['wall_s']} s")
    print(json.dumps({
        "env": env_id, "algorithm": algorithm, "env_kwargs": env_kwargs, "hparams": hparams, "seed": args.seed,
        "seconds": args.seconds, "team_steps_limit": args.team_steps, "eval_episodes": args.eval_episodes,
        "eval_seed": args.eval_seed,
        "dask_podracer": str(Path(dask_podracer.__file__).resolve().parent),
        "commit": checkout_commit(dask_podracer.__file__),
        "random_return": round(random_return, 3), "untrained_return": curve[0]["return"],
        "final": curve[-1], "best": best, "curve": curve,
    }))


if __name__ == "__main__":
    sys.exit(main())
