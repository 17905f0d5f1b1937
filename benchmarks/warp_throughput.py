"""Env steps per second of the MuJoCo Warp tasks (WarpAnt-v0, ...) under random actions, auto-resets included.

    python benchmarks/warp_throughput.py --quick              # every task, 4 and 16 worlds on the CPU (~1-3 min)
    python benchmarks/warp_throughput.py --device cuda        # WarpAnt-v0 at 4,096, 16,384 and 32,768 worlds
    python benchmarks/warp_throughput.py --device cuda --envs WarpAnt-v0 WarpHumanoid-v0 --worlds 16384
    python benchmarks/warp_throughput.py --device cuda --worlds 16384 --nconmax 16 --njmax 40  # smaller capacities

Each figure builds the env, takes its first steps (on CUDA the first runs eagerly, compiling or
loading the kernels, and the second captures the CUDA graph that every later step replays), then
times at least `--seconds` (and 3 steps) of steps with uniformly random actions (8 batches drawn
beforehand, cycled). steps/s counts every world. Episodes end and restart as they would in
training (Ant and Humanoid fall under random actions). Prints a table, then one JSON line:
{"device", "torch", "results": [{"env", "worlds", "steps_per_s", "ms_per_step", "setup_s"}]}.

`--nconmax`/`--njmax` set MuJoCo Warp's per-world capacities for contacts and constraint rows (`make_data`'s
arguments, which the Warp envs take as env keyword arguments). Its kernels are sized by them, so smaller ones
may step faster; a world that needs more than it has loses contacts, so each such figure also reports the most
contacts and rows a world used and the worlds that overflowed, over 50 further steps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import torch

from dask_podracer.envs import make_vec_env
from dask_podracer.envs.warp import TASKS

CUDA_WORLDS = [4096, 16384, 32768]
CPU_WORLDS = [4, 16]


def rate(name: str, worlds: int, device: str, seconds: float,
         capacity: dict[str, int] | None = None) -> dict[str, float | int | str]:
    """Steps/s of `worlds` worlds of env `name` on `device`, and the seconds its build and first steps took.
    `capacity`: MuJoCo Warp's `nconmax`/`njmax` per world (its defaults where absent); the figure then also says
    the most contacts and constraint rows any world had, and how many worlds overflowed, over 50 more steps."""
    start = time.perf_counter()
    env = make_vec_env(name, worlds, device=device, seed=0, **(capacity or {}))
    env.reset(seed=0)
    generator = torch.Generator(device=env.device).manual_seed(0)
    low = torch.as_tensor(env.single_action_space.low, device=env.device)
    high = torch.as_tensor(env.single_action_space.high, device=env.device)
    actions = [low + (high - low) * torch.rand((worlds, low.numel()), generator=generator, device=env.device)
               for _ in range(8)]
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    for i in range(3):  # compile or load the kernels; capture the graph
        env.step(actions[i])
    sync()
    setup = time.perf_counter() - start
    steps, start = 0, time.perf_counter()
    while steps < 3 or time.perf_counter() - start < seconds:
        env.step(actions[steps % len(actions)])
        steps += 1
    sync()
    elapsed = time.perf_counter() - start
    result = {"env": name, "worlds": worlds, "steps_per_s": round(worlds * steps / elapsed, 1),
              "ms_per_step": round(1000 * elapsed / steps, 3), "setup_s": round(setup, 1)}
    if capacity:
        result.update(capacity, **capacity_used(env, actions))
    env.close()
    return result


def capacity_used(env: Any, actions: list[torch.Tensor], steps: int = 50) -> dict[str, int]:
    """Over `steps` more steps (each read back, so untimed): the most contacts and constraint rows (`nefc`) in one
    world, and the worlds whose step overflowed a capacity (MuJoCo Warp drops what does not fit: wrong physics)."""
    data = env.data
    contacts = rows = overflowed = 0
    for i in range(steps):
        env.step(actions[i % len(actions)])
        worlds = data.contact.worldid.numpy()[:int(data.nacon.numpy()[0])]
        contacts = max(contacts, int(np.bincount(worlds).max()) if worlds.size else 0)
        rows = max(rows, int(data.nefc.numpy().max()))
        overflowed = max(overflowed, int((data.overflow.numpy() != 0).sum()))
    return {"max_contacts": contacts, "max_rows": rows, "overflowed_worlds": overflowed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--envs", nargs="+", default=None, choices=sorted(TASKS),
                        help="Warp envs to time (default: WarpAnt-v0; every task with --quick)")
    parser.add_argument("--worlds", type=int, nargs="+", default=None,
                        help=f"batch sizes (default {CUDA_WORLDS} on CUDA, {CPU_WORLDS} on the CPU)")
    parser.add_argument("--seconds", type=float, default=2.0, help="minimum timed seconds per figure")
    parser.add_argument("--quick", action="store_true", help="the CPU, every task, few worlds, 1 s each")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (Warp's CPU kernels use one)")
    parser.add_argument("--nconmax", type=int, default=None,
                        help="MuJoCo Warp's contacts per world (default: its own guess, 48 for Ant)")
    parser.add_argument("--njmax", type=int, default=None,
                        help="MuJoCo Warp's constraint rows per world (default: its own guess, 64 for Ant)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here")
    capacity = {k: v for k, v in (("nconmax", args.nconmax), ("njmax", args.njmax)) if v is not None}
    if args.quick:
        args.device, args.seconds = "cpu", 1.0
    envs = args.envs or (sorted(TASKS) if args.quick else ["WarpAnt-v0"])
    worlds = args.worlds or (CUDA_WORLDS if args.device.startswith("cuda") else CPU_WORLDS)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, device {args.device}, torch threads {torch.get_num_threads()}, "
          f"capacity {capacity or 'MuJoCo Warp defaults'}\n")
    print("| env | worlds | steps/s | ms per step | build and first 3 steps, s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    results = []
    for name in envs:
        for n in worlds:
            r = rate(name, n, args.device, args.seconds, capacity)
            results.append(r)
            used = (f" contacts <= {r['max_contacts']}, rows <= {r['max_rows']}, overflowed worlds "
                    f"{r['overflowed_worlds']} |" if capacity else "")
            print(f"| {name} | {n:,} | {r['steps_per_s']:,.0f} | {r['ms_per_step']:,.2f} | {r['setup_s']:.0f} |"
                  f"{used}", flush=True)
    print(json.dumps({"device": args.device, "torch": torch.__version__, "results": results}))


if __name__ == "__main__":
    try:
        main()
    except ImportError as error:  # an optional package this run needs: say which, in one line
        sys.exit(f"{sys.argv[0]}: {error}")
