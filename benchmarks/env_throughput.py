"""Env steps per second: our torch envs against gymnasium's SyncVectorEnv, and Ant three ways.

    python benchmarks/env_throughput.py                      # Pendulum and CartPole, CPU
    python benchmarks/env_throughput.py --device cuda        # the torch envs on a GPU
    python benchmarks/env_throughput.py --ant                # also Ant: gym adapter (sync/async) and MuJoCo Warp
    python benchmarks/env_throughput.py --envs CartPole-v1   # one env's rows only

Each figure steps one env batch for at least `--seconds` (and 3 steps) after a warm-up,
with random actions drawn beforehand; steps/s counts every env in the batch. Torch runs
on one thread unless --threads says otherwise. The last column divides ours by
gymnasium's best figure at any size for the same env.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from dask_podracer.envs import make_vec_env

TORCH_SIZES = [1, 64, 1024, 16384, 262144]
GYM_SIZES = [1, 64, 1024, 16384]


def timed(step: Callable[[], object], seconds: float, sync: Callable[[], None] = lambda: None) -> float:
    """Seconds per call of `step`, over at least `seconds` and 3 calls, after 3 warm-up calls."""
    for _ in range(3):
        step()
    sync()
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - start < seconds:
        step()
        calls += 1
    sync()
    return (time.perf_counter() - start) / calls


def torch_rate(name: str, n: int, device: str, seconds: float) -> float:
    env = make_vec_env(name, n, device=device, seed=0)
    env.reset()
    space = env.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        actions = torch.randint(0, int(space.n), (n,), device=device)
    else:
        actions = torch.rand((n, *space.shape), device=device) * 2 - 1
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    return n / timed(lambda env=env, actions=actions: env.step(actions), seconds, sync)


def gym_rate(env_id: str, n: int, seconds: float, mode: str = "sync") -> float:
    env = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode)
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = env.action_space.sample()
    rate = n / timed(lambda env=env, actions=actions: env.step(actions), seconds)
    env.close()
    return rate


def fmt(rate: float | None) -> str:
    return "—" if rate is None else f"{rate:,.0f}"


CLASSIC = ["Pendulum-v1", "CartPole-v1"]  # ours and gymnasium's share the id


def classic_table(device: str, seconds: float, gym_max: int, names: list[str]) -> None:
    print(f"| env | envs | ours on {device} (steps/s) | gymnasium SyncVectorEnv (steps/s) | ours / gym at this size "
          "| ours / gym's best |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        try:
            make_vec_env(name, 1)
        except ValueError:
            print(f"| {name} | not registered | | | | |")
            continue
        gym_rates = {n: gym_rate(name, n, seconds) for n in GYM_SIZES if n <= gym_max}
        best = max(gym_rates.values())
        for n in TORCH_SIZES:
            ours = torch_rate(name, n, device, seconds)
            g = gym_rates.get(n)
            same = "—" if g is None else f"{ours / g:,.0f}x"
            print(f"| {name} | {n:,} | {fmt(ours)} | {fmt(g)} | {same} | {ours / best:,.0f}x |", flush=True)


def ant_table(device: str, seconds: float, warp_sizes: list[int]) -> None:
    print("\n| Ant | envs | steps/s |")
    print("| --- | ---: | ---: |")
    for mode, sizes in [("sync", [1, 16]), ("async", [2])]:
        for n in sizes:
            env = make_vec_env("gym:Ant-v5", n, seed=0, vectorization_mode=mode)
            env.reset()
            actions = torch.rand(n, 8) * 2 - 1
            rate = n / timed(lambda env=env, actions=actions: env.step(actions), seconds)
            env.close()
            label = f"gymnasium Ant-v5 via make_vec_env('gym:Ant-v5', vectorization_mode='{mode}')"
            print(f"| {label} | {n} | {fmt(rate)} |", flush=True)
    for n in warp_sizes:
        t0 = time.perf_counter()
        env = make_vec_env("WarpAnt-v0", n, device=device, seed=0)
        env.reset()
        actions = torch.rand(n, 8, device=device) * 2 - 1
        env.step(actions)  # compiles (or loads cached) kernels
        setup = time.perf_counter() - t0
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        rate = n / timed(lambda env=env, actions=actions: env.step(actions), seconds, sync)
        print(f"| MuJoCo Warp Ant (WarpAnt-v0) on {device}, first step after {setup:.0f} s | {n:,} | {fmt(rate)} |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=1.0, help="minimum timed seconds per figure")
    parser.add_argument("--gym-max", type=int, default=16384, help="largest SyncVectorEnv to build")
    # One thread by default: on this 2-vCPU machine shared with other work, 2 threads
    # spin-waiting at OpenMP barriers ran 10-20x slower than one (docs/developing.md).
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--envs", nargs="+", default=CLASSIC, choices=CLASSIC, help="classic envs to time")
    parser.add_argument("--ant", action="store_true", help="also time Ant through the gym adapter and MuJoCo Warp")
    parser.add_argument("--warp-sizes", type=int, nargs="*", default=None,
                        help="MuJoCo Warp worlds (default: 4 16 on cpu, 4096 16384 on cuda)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, gymnasium {gym.__version__}, numpy {np.__version__}, "
          f"torch threads {torch.get_num_threads()}, device {args.device}\n")
    classic_table(args.device, args.seconds, args.gym_max, args.envs)
    if args.ant:
        sizes = args.warp_sizes or ([4, 16] if args.device == "cpu" else [4096, 16384])
        ant_table(args.device, args.seconds, sizes)


if __name__ == "__main__":
    try:
        main()
    except ImportError as error:  # an optional package this run needs: say which, in one line
        sys.exit(f"{sys.argv[0]}: {error}")
