"""PPO's training throughput on one device: env steps per second with learning included, eager and captured.

    python benchmarks/ppo_throughput.py --device cuda                     # warp_ant.toml's PPO on WarpAnt-v0,
                                                                         # 4,096 and 16,384 worlds
    python benchmarks/ppo_throughput.py --device cuda --worlds 16384 32768 --modes on
    python benchmarks/ppo_throughput.py --quick                          # a rehearsal on the CPU: 4 worlds

A config's PPO (default `workflows/configs/warp_ant.toml`: 16-step rollouts, 2 minibatches, 4 epochs, networks
[256, 128, 64], normalised observations and rewards) runs `agent.train_iteration` (rollout, GAE, every
minibatch update) on `--worlds` envs stepped as one batch, for each `compile` mode (`off`: eager; `on`: each
minibatch step replayed as one CUDA graph, agents/captured.py). The first `--warmup` iterations (kernel
compilation, graph capture) are not timed, then at least `--seconds` and 2 iterations are. Env steps/s counts
every world's step; `env_fraction` is the share of an iteration spent stepping envs, measured on its own beside
it (`--seconds` of env steps under the same random actions). The last line is JSON:
{"device", "torch", "config", "results": [{"env", "worlds", "mode", "env_steps_per_s", "ms_per_iteration",
"env_only_steps_per_s", "setup_s"}]}.

The issue's target (PPO on WarpAnt-v0 at >= 300,000 env steps/s, learning included, on one H100) is read off
the `on` rows; this script only measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from dask_podracer.agents import captured, make_agent
from dask_podracer.config import load_config
from dask_podracer.envs import make_vec_env

ROOT = Path(__file__).parents[1]


def measure(env_name: str, hparams: dict, worlds: int, mode: str, device: str, seconds: float,
            warmup: int) -> dict[str, float | int | str]:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    started = time.perf_counter()
    torch.manual_seed(0)
    env = make_vec_env(env_name, worlds, device=device, seed=0)
    agent = make_agent("ppo", env.single_observation_space, env.single_action_space,
                       {**hparams, "num_envs": worlds, "compile": mode}, device)
    obs, _ = env.reset(seed=0)
    for _ in range(warmup):  # kernels compiled or loaded, the env's and the update's graphs captured
        obs, _, _ = agent.train_iteration(env, obs)
    sync()
    setup = time.perf_counter() - started
    iterations, steps, started = 0, 0, time.perf_counter()
    while iterations < 2 or time.perf_counter() - started < seconds:
        obs, n, _ = agent.train_iteration(env, obs)
        iterations, steps = iterations + 1, steps + n
    sync()
    elapsed = time.perf_counter() - started
    env_only = env_rate(env, worlds, seconds / 2, sync)
    env.close()
    return {"env": env_name, "worlds": worlds, "mode": mode, "env_steps_per_s": round(steps / elapsed, 1),
            "ms_per_iteration": round(1e3 * elapsed / iterations, 2), "iterations": iterations,
            "env_only_steps_per_s": round(env_only, 1), "setup_s": round(setup, 1)}


def env_rate(env, worlds: int, seconds: float, sync) -> float:
    """The same env's steps/s under uniformly random actions, no learning: what the learner adds is the rest."""
    low = torch.as_tensor(env.single_action_space.low, device=env.device)
    high = torch.as_tensor(env.single_action_space.high, device=env.device)
    actions = low + (high - low) * torch.rand((worlds, low.numel()), device=env.device)
    steps, started = 0, time.perf_counter()
    while steps < 3 or time.perf_counter() - started < seconds:
        env.step(actions)
        steps += 1
    sync()
    return worlds * steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "workflows/configs/warp_ant.toml"))
    parser.add_argument("--env", default=None, help="another env than the config's (e.g. Pendulum-v1)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--worlds", type=int, nargs="+", default=None, help="default 4096 16384 (CPU: 4)")
    parser.add_argument("--modes", nargs="+", default=["off", "on"], choices=captured.COMPILE_MODES)
    parser.add_argument("--seconds", type=float, default=5.0, help="minimum timed seconds per figure")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    parser.add_argument("--quick", action="store_true", help="CPU rehearsal: 4 worlds, eager, 1 s")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here")
    config = load_config(args.config)
    env_name = args.env or config.run.env
    hparams = dict(config.hparams)
    if args.quick:
        args.device, args.modes, args.seconds, args.warmup = "cpu", ["off"], 1.0, 1
    worlds = args.worlds or ([4096, 16384] if args.device.startswith("cuda") else [4])
    torch.set_num_threads(1)  # a segment's default (segment.torch_threads)
    results = []
    for n in worlds:
        for mode in args.modes:
            captured.clear_cache()
            row = measure(env_name, hparams, n, mode, args.device, args.seconds, args.warmup)
            print(f"{env_name} {n:>6} worlds  compile={mode:3s}  {row['env_steps_per_s']:>12,.0f} env steps/s "
                  f"learning included  ({row['ms_per_iteration']} ms an iteration; the env alone "
                  f"{row['env_only_steps_per_s']:,.0f}/s; setup {row['setup_s']} s)", flush=True)
            results.append(row)
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(json.dumps({"device": device, "torch": torch.__version__, "config": args.config, "results": results}))


if __name__ == "__main__":
    try:
        main()
    except ImportError as error:  # an optional package this run needs: say which, in one line
        sys.exit(f"{sys.argv[0]}: {error}")
