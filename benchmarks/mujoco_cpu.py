"""Ant-v5 env steps per second on the CPU: our threaded MuJoCo VecEnv against gymnasium's vector envs.

    python benchmarks/mujoco_cpu.py --quick     # 2 and 16 envs, under 3 minutes
    python benchmarks/mujoco_cpu.py             # 2 to 256 envs, longer timings
    python benchmarks/mujoco_cpu.py --env HalfCheetah-v5

At each number of envs: `MujocoAnt-v5` through `make_vec_env` (torch tensors in and out) on
one thread and on every core this process may use; gymnasium's `SyncVectorEnv` (one process)
and `AsyncVectorEnv` (a process per env: 2 processes at 2 envs), stepped with numpy actions,
no adapter. Random actions are drawn beforehand. Every configuration is timed in `--rounds`
rounds taken in turn, and its best round counts, so work that others run on the machine
meanwhile weighs on every configuration alike. Beside each rate, the CPU time its processes
(this one, and an async env's workers) spent per env step in that round: what a step costs,
whatever share of the cores others left it. The last line is JSON: our best figure, gymnasium's
best (any vector env, any number of envs), their ratio, and the CPU time per step of each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import psutil
import torch

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.mujoco_batched import available_cores

ASYNC_MAX_ENVS = 16  # a process per env: beyond this, on a small machine, only slower


def cpu_seconds(processes: list[psutil.Process]) -> float:
    """User and system CPU time `processes` have spent so far, all their threads together."""
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def steps_per_second(config: Ours | Gymnasium, num_envs: int, seconds: float) -> tuple[float, float]:
    """Env steps per second of `config.step(t)` over at least `seconds` and 5 calls, after 3 warm-up calls, and
    the CPU µs its processes spent per env step meanwhile."""
    for t in range(3):
        config.step(t)
    processes = config.processes()
    calls, cpu, start = 0, cpu_seconds(processes), time.perf_counter()
    while calls < 5 or time.perf_counter() - start < seconds:
        config.step(calls)
        calls += 1
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(processes) - cpu
    return num_envs * calls / elapsed, 1e6 * cpu / (num_envs * calls)


class Ours:
    def __init__(self, gym_id: str, num_envs: int, threads: int) -> None:
        self.env = make_vec_env(f"Mujoco{gym_id}", num_envs, seed=0, threads=threads)
        self.env.reset()
        low, high = self.env.single_action_space.low, self.env.single_action_space.high
        rng = np.random.default_rng(0)
        self.actions = [torch.from_numpy(rng.uniform(low, high, (num_envs, len(low))).astype(np.float32))
                        for _ in range(16)]

    def step(self, t: int) -> object:
        return self.env.step(self.actions[t % 16])

    def processes(self) -> list[psutil.Process]:
        return [psutil.Process()]

    def close(self) -> None:
        self.env.close()


class Gymnasium:
    def __init__(self, gym_id: str, num_envs: int, mode: str) -> None:
        self.env = gym.make_vec(gym_id, num_envs=num_envs, vectorization_mode=mode)
        self.env.reset(seed=0)
        self.env.action_space.seed(0)
        self.actions = [self.env.action_space.sample() for _ in range(16)]

    def step(self, t: int) -> object:
        return self.env.step(self.actions[t % 16])

    def processes(self) -> list[psutil.Process]:
        """This process, and an AsyncVectorEnv's env processes."""
        return [psutil.Process(), *(psutil.Process(p.pid) for p in getattr(self.env, "processes", ()))]

    def close(self) -> None:
        self.env.close()


def configurations(gym_id: str, num_envs: int, cores: int) -> dict[str, Callable[[], Ours | Gymnasium]]:
    """Label -> constructor of each configuration timed at `num_envs` envs."""
    configs: dict[str, Callable[[], Ours | Gymnasium]] = {
        "ours, 1 thread": lambda: Ours(gym_id, num_envs, 1),
        f"ours, {cores} threads": lambda: Ours(gym_id, num_envs, cores),
        "gymnasium sync": lambda: Gymnasium(gym_id, num_envs, "sync"),
    }
    if cores == 1:
        del configs[f"ours, {cores} threads"]
    if num_envs <= ASYNC_MAX_ENVS:
        configs[f"gymnasium async ({num_envs} processes)"] = lambda: Gymnasium(gym_id, num_envs, "async")
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 and 16 envs, 2 rounds of 2 s (under 3 minutes)")
    parser.add_argument("--env", default="Ant-v5", help="gymnasium's id; ours is Mujoco<id> (default: Ant-v5)")
    parser.add_argument("--sizes", type=int, nargs="+", help="numbers of envs (default: 2 16, or 2 8 16 64 256)")
    parser.add_argument("--seconds", type=float, help="seconds per timing (default: 2, or 4)")
    parser.add_argument("--rounds", type=int, default=2, help="timings per configuration; the best counts")
    args = parser.parse_args()
    sizes = args.sizes or ([2, 16] if args.quick else [2, 8, 16, 64, 256])
    seconds = args.seconds or (2.0 if args.quick else 4.0)
    cores = available_cores()
    torch.set_num_threads(1)  # the tensors in and out are small; torch's own threads would only compete
    print(f"{args.env}, random actions; {cores} cores; load average {os.getloadavg()[0]:.2f} at the start")

    built = {(n, label): make() for n in sizes for label, make in configurations(args.env, n, cores).items()}
    rates: dict[tuple[int, str], float] = {}
    cpu: dict[tuple[int, str], float] = {}  # CPU µs per env step in the best round
    for _ in range(args.rounds):
        for key, config in built.items():
            rate, cost = steps_per_second(config, key[0], seconds)
            if rate > rates.get(key, 0.0):
                rates[key], cpu[key] = rate, cost
    for config in built.values():
        config.close()

    print(f"\n| envs | {'configuration':<30} | steps/s | CPU µs/step |")
    print(f"| ---: | {'-' * 30} | ---: | ---: |")
    for (n, label), rate in rates.items():
        print(f"| {n:>4} | {label:<30} | {rate:>7,.0f} | {cpu[n, label]:>11,.0f} |")
    best = {side: max(((n, label) for (n, label) in rates if label.startswith(side)), key=rates.__getitem__)
            for side in ("ours", "gymnasium")}
    ours, gymnasium = rates[best["ours"]], rates[best["gymnasium"]]
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    print(json.dumps({"env": args.env, "ours": round(ours), "gymnasium": round(gymnasium),
                      "ratio": round(ours / gymnasium, 2), "ours_best": f"{best['ours'][1]}, {best['ours'][0]} envs",
                      "gymnasium_best": f"{best['gymnasium'][1]}, {best['gymnasium'][0]} envs",
                      "ours_cpu_us_per_step": round(cpu[best["ours"]]),
                      "gymnasium_cpu_us_per_step": round(cpu[best["gymnasium"]]), "cores": cores}))


if __name__ == "__main__":
    try:
        main()
    except ImportError as error:  # an optional package this run needs: say which, in one line
        sys.exit(f"{sys.argv[0]}: {error}")
