"""PPO's learning rate, fixed against adaptive (`lr_schedule`), at equal env steps: one agent, no tournament.

    python benchmarks/ppo_lr_schedule.py                                  # warp_ant.toml's PPO on the torch
                                                                          # Pendulum, 4,096 envs, 2M steps, seeds 0 1
    python benchmarks/ppo_lr_schedule.py --env MujocoAnt-v5 --env-steps 3e6 --seeds 0
    python benchmarks/ppo_lr_schedule.py --quick                          # 64 envs, 100k steps: a rehearsal
    python benchmarks/ppo_lr_schedule.py --config workflows/configs/ant_ppo.toml --env MujocoAnt-v5 \
        --schedules fixed --set hparams.rollout_steps=5 hparams.ent_coef=1e-2   # other settings, same config

A config's PPO hyper-parameters (default `workflows/configs/warp_ant.toml`, the massively parallel settings: 16-step
rollouts of 4,096 envs, 2 minibatches, 4 epochs, learning rate 3e-4) train one agent on `--env` for `--env-steps`
env steps, once per schedule and seed, with `lr_schedule` set to each of `--schedules` (the rest of the config as
it is, or as changed by `--set SECTION.KEY=VALUE ...`, as `podracer train --set` changes it). Every eighth of the
budget the agent is evaluated: the mean return of `--eval-episodes` deterministic episodes in envs of their own (as
a segment scores). Reading figures by env steps, not seconds, keeps them comparable on a busy machine. Prints each
evaluation as it comes, then one JSON line:
{"config", "env", "num_envs", "env_steps", "set", "torch", "runs": [{"schedule", "seed", "curve": [[env steps, seconds,
return, learning rate], ...], "final", "best"}]}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from dask_podracer.agents import make_agent
from dask_podracer.config import ConfigError, load_config, parse_setting
from dask_podracer.envs import make_vec_env
from dask_podracer.train import SegmentSpec
from dask_podracer.train.evaluate import evaluate

ROOT = Path(__file__).parents[1]


def train_and_evaluate(env_name: str, hparams: dict, env_steps: int, seed: int, eval_episodes: int,
                       evaluations: int = 8) -> list[list[float]]:
    """[[env steps, seconds, evaluation return, learning rate], ...] of one agent, `evaluations` points."""
    torch.manual_seed(seed)
    env = make_vec_env(env_name, hparams["num_envs"], seed=seed)
    agent = make_agent("ppo", env.single_observation_space, env.single_action_space, hparams)
    obs, _ = env.reset(seed=seed)
    curve: list[list[float]] = []
    done, started, next_eval = 0, time.perf_counter(), env_steps / evaluations
    while done < env_steps:
        obs, n, metrics = agent.train_iteration(env, obs)
        done += n
        if done >= next_eval or done >= env_steps:
            seconds = time.perf_counter() - started
            eval_env = make_vec_env(env_name, eval_episodes, seed=SegmentSpec.eval_seed + seed)
            score = evaluate(agent, eval_env, seed=SegmentSpec.eval_seed + seed)
            rate = float(agent.optimizer.param_groups[0]["lr"])
            curve.append([done, round(seconds, 1), round(score, 1), rate])
            print(f"  {hparams['lr_schedule']:8s} seed {seed}  {done:>11,} steps  {seconds:7.1f} s  "
                  f"return {score:9.1f}  learning rate {rate:.2e}  KL {metrics.get('approx_kl', 0.0):.4f}", flush=True)
            next_eval += env_steps / evaluations
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=ROOT / "workflows" / "configs" / "warp_ant.toml")
    parser.add_argument("--env", default="Pendulum", help="a CPU env standing in for the config's own")
    parser.add_argument("--env-steps", type=float, default=2e6)
    parser.add_argument("--num-envs", type=int, default=None, help="default: the config's num_envs")
    parser.add_argument("--schedules", nargs="+", default=["fixed", "adaptive"], choices=["fixed", "adaptive"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--eval-episodes", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                        help="config values to change, as podracer train's --set: hparams.epochs=4")
    parser.add_argument("--quick", action="store_true", help="64 envs, 100,000 env steps, seed 0")
    args = parser.parse_args()
    if args.quick:
        args.num_envs, args.env_steps, args.seeds = 64, 1e5, [0]
    torch.set_num_threads(args.threads)

    try:
        config = load_config(args.config, args.set)
    except ConfigError as e:
        parser.error(str(e))
    changed = {".".join(path): value for path, value in map(parse_setting, args.set)}
    base = {**config.hparams, **({"num_envs": args.num_envs} if args.num_envs else {})}
    env_steps = int(args.env_steps)
    print(f"{args.config.name}'s PPO on {args.env}: {base['num_envs']:,} envs, {env_steps:,} env steps, "
          f"learning rate {base.get('learning_rate')}, desired KL {base.get('desired_kl', 0.008)} when adaptive")
    runs = []
    for schedule in args.schedules:
        for seed in args.seeds:
            curve = train_and_evaluate(args.env, {**base, "lr_schedule": schedule}, env_steps, seed,
                                       args.eval_episodes)
            runs.append({"schedule": schedule, "seed": seed, "curve": curve, "final": curve[-1][2],
                         "best": max(point[2] for point in curve)})
    print(f"{'schedule':8s} {'seed':>4s} {'final':>9s} {'best':>9s}")
    for run in runs:
        print(f"{run['schedule']:8s} {run['seed']:4d} {run['final']:9.1f} {run['best']:9.1f}")
    print(json.dumps({"config": str(args.config.relative_to(ROOT)) if args.config.is_relative_to(ROOT)
                      else str(args.config), "env": args.env, "num_envs": base["num_envs"], "env_steps": env_steps,
                      "set": changed, "torch": torch.__version__, "runs": runs}))


if __name__ == "__main__":
    try:
        main()
    except ImportError as error:  # an optional package this run needs: say which, in one line
        sys.exit(f"{sys.argv[0]}: {error}")
