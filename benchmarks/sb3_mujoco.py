"""Stable-Baselines3's SAC or PPO on a MuJoCo task for a wall-clock budget: the baseline beside a tournament.

    pip install -e ".[bench,mujoco]"
    python benchmarks/sb3_mujoco.py [--env HalfCheetah-v5] [--algorithm sac|ppo] [--minutes 20] [--seed 0] [--json F]

SAC (the default): one SB3 SAC agent with rl-zoo's MuJoCo settings (SB3's defaults: 256x256
networks, lr 3e-4, batch 256, one update per env step, automatic entropy; rl-zoo's 10,000 random
steps first), on one gymnasium env. PPO: SB3's PPO with its defaults, which are the PPO paper's
MuJoCo settings (64x64 networks, 2,048 steps per rollout, batch 64, 10 epochs, lr 3e-4, gamma
0.99, GAE lambda 0.95), on one env wrapped in `VecNormalize` (observations and rewards, as
rl-zoo's `normalize: true`); `workflows/configs/hopper_ppo.toml` is the same PPO. Either runs in
this process, using every torch thread (`--threads`, default all cores). Every `--eval-every`
env steps (default 10,000, one segment of `workflows/configs/halfcheetah.toml`) it is evaluated
like a tournament's segment: the mean return of `--eval-episodes` deterministic episodes (default
5) of a separate gymnasium env, seeded the same way each time (PPO's observations normalised by
the training statistics of the moment). The clock counts everything, evaluations included, as
the tournament's wall-clock does. Prints a line per evaluation, then the first time the best
evaluation return reached each of `--thresholds`, the form of the tournament's table in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

EVAL_SEED = 1_000_003


def evaluate(model, env, episodes: int, normalize=lambda obs: obs) -> float:  # an SB3 model, a gymnasium env
    """Mean return of `episodes` deterministic episodes, one after the other, the model seeing `normalize(obs)`."""
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(normalize(obs), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--algorithm", choices=["sac", "ppo"], default="sac")
    parser.add_argument("--minutes", type=float, default=20.0, help="wall-clock budget, evaluations included")
    parser.add_argument("--eval-every", type=int, default=10_000, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--thresholds", type=float, nargs="+", default=[1000, 2000, 3000, 4000, 5000, 6000])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: every core")
    parser.add_argument("--json", type=Path, help="also write the evaluations here, in the form of "
                        "`podracer train --json`'s history (for benchmarks/plot_summary.py)")
    args = parser.parse_args()

    import gymnasium as gym
    import mujoco  # noqa: F401  (gymnasium's MuJoCo envs need it; an ImportError here is one line, below)
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    if args.threads:
        torch.set_num_threads(args.threads)
    budget = args.minutes * 60.0

    class EvaluateOnTheClock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.start = time.perf_counter()
            self.next_eval, self.best = args.eval_every, float("-inf")
            self.reached: dict[float, tuple[float, int]] = {}
            self.history: list[dict[str, float]] = []
            self.eval_env = gym.make(args.env)

        def elapsed(self) -> float:
            return time.perf_counter() - self.start

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += args.eval_every
                normalize = self.model.get_env().normalize_obs if args.algorithm == "ppo" else (lambda obs: obs)
                score = evaluate(self.model, self.eval_env, args.eval_episodes, normalize)
                self.best = max(self.best, score)
                seconds = self.elapsed()
                for threshold in args.thresholds:
                    if self.best >= threshold and threshold not in self.reached:
                        self.reached[threshold] = (seconds, self.num_timesteps)
                self.history.append({"wall_seconds": seconds, "env_steps": self.num_timesteps, "score": score,
                                     "best_score": self.best})
                print(f"{seconds:8.0f} s {self.num_timesteps:>9,} env steps  eval {score:9.1f}  best {self.best:9.1f}",
                      flush=True)
            return self.elapsed() < budget

    print(f"SB3 {args.algorithm.upper()} on {args.env}, seed {args.seed}, {torch.get_num_threads()} torch "
          f"thread(s), {args.minutes:g} minutes", flush=True)
    callback = EvaluateOnTheClock()
    if args.algorithm == "ppo":
        model = PPO("MlpPolicy", VecNormalize(DummyVecEnv([lambda: gym.make(args.env)])), seed=args.seed,
                    device="cpu")
    else:
        model = SAC("MlpPolicy", gym.make(args.env), learning_starts=10_000, seed=args.seed, device="cpu")
    model.learn(total_timesteps=10**9, callback=callback)
    print(f"\nat {callback.elapsed():.0f} s: best {callback.best:.1f} after {model.num_timesteps:,} env steps")
    print(f"{'best reached':>12} {'after (s)':>10} {'env steps':>10}")
    for threshold in args.thresholds:
        seconds, steps = callback.reached.get(threshold, (float("nan"), 0))
        print(f"{threshold:>12,.0f} {seconds:>10.0f} {steps:>10,}")
    if args.json:
        args.json.write_text(json.dumps({"best_score": callback.best, "env_steps": model.num_timesteps,
                                         "wall_seconds": callback.elapsed(), "history": callback.history}))


if __name__ == "__main__":
    try:
        main()
    except ImportError as error:  # an optional package this run needs: say which, in one line
        sys.exit(f"{sys.argv[0]}: {error}")
