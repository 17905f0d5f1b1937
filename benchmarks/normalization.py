"""One agent on a MuJoCo task with and without observation and reward normalisation, for a wall-clock budget each.

    pip install -e ".[bench,mujoco]"
    python benchmarks/normalization.py [--env gym:Hopper-v5] [--minutes 5] [--settings none obs obs+rewards]

For each setting in turn, one PPO agent (CleanRL's MuJoCo settings: 64x64 networks, 2,048
transitions per iteration from `--num-envs` envs, 32 minibatches, 10 epochs, lr 3e-4,
gamma 0.99, GAE lambda 0.95; `reward_scale` 1) trains in this process on one torch thread
for `--minutes` of training time. Every `--eval-every` env steps it is evaluated (not
counted in the clock): the mean return of `--eval-episodes` deterministic episodes stepped
as one batch, the same seeds for every setting. `--algorithm sac` runs SAC with the
halfcheetah config's settings instead. Prints a line per evaluation, then per setting the
best and last evaluation return and the env steps trained.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from dask_podracer.agents import make_agent
from dask_podracer.envs import make_vec_env
from dask_podracer.train import SegmentSpec, evaluate

EVAL_SEED = SegmentSpec.eval_seed  # the seed segments evaluate with

SETTINGS = {
    "none": {},
    "obs": {"normalize_observations": True},
    "rewards": {"normalize_rewards": True},
    "obs+rewards": {"normalize_observations": True, "normalize_rewards": True},
}

HPARAMS = {
    "ppo": lambda num_envs: {"num_envs": num_envs, "rollout_steps": 2048 // num_envs, "num_minibatches": 32,
                             "epochs": 10, "learning_rate": 3e-4, "gamma": 0.99, "gae_lambda": 0.95,
                             "hidden": (64, 64), "reward_scale": 1.0},
    "sac": lambda num_envs: {"num_envs": num_envs, "hidden": (256, 256), "utd_ratio": 1.0 / num_envs,
                             "learning_starts": 10_000, "batch_size": 256},
}


def run(env_name: str, algorithm: str, setting: str, args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    env = make_vec_env(env_name, args.num_envs, seed=args.seed)
    hparams = {**HPARAMS[algorithm](args.num_envs), **SETTINGS[setting]}
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    obs, _ = env.reset(seed=args.seed)
    trained = steps = 0.0
    next_eval, scores = args.eval_every, []
    while trained < args.minutes * 60:
        started = time.perf_counter()
        obs, n, _ = agent.train_iteration(env, obs)
        trained += time.perf_counter() - started
        steps += n
        if steps >= next_eval:
            next_eval += args.eval_every
            eval_env = make_vec_env(env_name, args.eval_episodes, seed=EVAL_SEED)
            scores.append(evaluate(agent, eval_env, seed=EVAL_SEED))
            eval_env.close()
            print(f"{setting:<12} {trained:7.1f} s {int(steps):>10,} steps  return {scores[-1]:8.1f}", flush=True)
    env.close()
    return {"setting": setting, "best": max(scores, default=float("nan")),
            "last": scores[-1] if scores else float("nan"), "steps": int(steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="gym:Hopper-v5")
    parser.add_argument("--algorithm", choices=sorted(HPARAMS), default="ppo")
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["none", "obs", "obs+rewards"])
    parser.add_argument("--minutes", type=float, default=5.0, help="training time per setting")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=50_000, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = [run(args.env, args.algorithm, setting, args) for setting in args.settings]
    print(f"\n{args.algorithm} on {args.env}, {args.minutes:g} min of training each, seed {args.seed}")
    print("| setting | best return | last return | env steps |\n| --- | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['setting']} | {r['best']:,.0f} | {r['last']:,.0f} | {r['steps']:,} |")


if __name__ == "__main__":
    try:
        main()
    except ImportError as error:  # an optional package this run needs: say which, in one line
        sys.exit(f"{sys.argv[0]}: {error}")
