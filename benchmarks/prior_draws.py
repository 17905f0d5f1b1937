"""How much of a hyper-parameter prior learns: single SAC agents drawn from it, trained alone on Pendulum.

    python benchmarks/prior_draws.py [--prior wide] [--draws 24] [--env-steps 15000]

No cluster and no store: each draw (seeded, `prior-draws/<i>`) trains on 4 envs with the
strategies benchmark's fixed hyper-parameters and is evaluated on 10 episodes every 1,000
env steps. Prints per draw its hyper-parameters, the env steps until its score first
reached -200 and its last score, then how many draws reached -200. It says how often a
random-search agent draws a line that can reach the target, which is what decides the
strategies benchmark on a seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time

import torch
from strategies import FIXED_HPARAMS, PRIORS  # benchmarks/strategies.py, beside this script

from dask_podracer.agents import finish_training, make_agent
from dask_podracer.agents.sac import SACConfig
from dask_podracer.envs import make_vec_env
from dask_podracer.search import parse_prior, sample_hparams
from dask_podracer.train import SegmentSpec
from dask_podracer.train.evaluate import evaluate


def train_draw(hparams: dict, seed: int, env_steps: int) -> list[float]:
    """Scores after every 1,000 env steps of one agent."""
    torch.manual_seed(seed)
    env = make_vec_env("Pendulum-v1", hparams["num_envs"], seed=seed)
    agent = make_agent("sac", env.single_observation_space, env.single_action_space, hparams)
    eval_env = make_vec_env("Pendulum-v1", 10, seed=SegmentSpec.eval_seed)  # the segments' evaluation episodes
    obs, _ = env.reset(seed=seed)
    steps, scores = 0, []
    while steps < env_steps:
        target = steps + 1000
        while steps < target:
            obs, taken, _ = agent.train_iteration(env, obs)
            steps += taken
        finish_training(agent)
        scores.append(evaluate(agent, eval_env, seed=SegmentSpec.eval_seed))
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prior", choices=sorted(PRIORS), default="wide")
    parser.add_argument("--draws", type=int, default=24)
    parser.add_argument("--env-steps", type=int, default=15_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    priors = {name: parse_prior(raw, name) for name, raw in PRIORS[args.prior].items()}
    base = dataclasses.asdict(SACConfig(**FIXED_HPARAMS))
    reached = 0
    print(f"{'draw':>4} {'actor_lr':>9} {'critic_lr':>9} {'gamma':>6} {'tau':>8} {'steps to -200':>13} {'last':>7} {'s':>5}")
    for i in range(args.draws):
        hparams = sample_hparams(base, priors, random.Random(f"prior-draws/{i}"))
        started = time.perf_counter()
        scores = train_draw(hparams, i, args.env_steps)
        hit = next((1000 * (k + 1) for k, s in enumerate(scores) if s >= -200), None)
        reached += hit is not None
        print(f"{i:>4} {hparams['actor_lr']:>9.2e} {hparams['critic_lr']:>9.2e} {hparams['gamma']:>6.3f} "
              f"{hparams['tau']:>8.2e} {hit if hit else '-':>13} {scores[-1]:>7.1f} "
              f"{time.perf_counter() - started:>5.1f}", flush=True)
    print(f"{reached} of {args.draws} draws reached -200 within {args.env_steps} env steps")


if __name__ == "__main__":
    main()
