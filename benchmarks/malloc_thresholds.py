"""SAC update time in a plain process, under Dask's nanny malloc setting, and with it undone.

    python benchmarks/malloc_thresholds.py [--hidden 256 256] [--batch 256] [--updates 300]

Each case runs in a fresh child process on one torch thread, since glibc reads its malloc
variables once, at start: "plain" (no variable), "nanny" (`MALLOC_TRIM_THRESHOLD_=65536`, what
a Dask nanny gives every worker process it spawns) and "nanny + restored" (the same, then
`dask_podracer.train.host_memory.restore_malloc_thresholds()`, which every segment calls).
The agent is our SAC with HalfCheetah's sizes (17 observations, 6 actions) on a fixed batch;
prints milliseconds per update, the median of 5 timings of `--updates` updates each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = """
import json, statistics, sys, time
import numpy as np, torch, gymnasium as gym
from dask_podracer.agents.sac import SACAgent, SACConfig
from dask_podracer.train.host_memory import restore_malloc_thresholds
args = json.loads(sys.argv[1])
restored = restore_malloc_thresholds() if args["restore"] else False
torch.set_num_threads(1)
torch.manual_seed(0)
box = lambda n, bound: gym.spaces.Box(-bound, bound, (n,), np.float32)
agent = SACAgent(box(17, np.inf), box(6, 1.0), SACConfig(hidden=tuple(args["hidden"]), batch_size=args["batch"]),
                 torch.device("cpu"))
b = args["batch"]
batch = {"obs": torch.randn(b, 17), "action": torch.rand(b, 6) * 2 - 1, "reward": torch.randn(b),
         "next_obs": torch.randn(b, 17), "terminated": torch.zeros(b)}
for _ in range(50):
    agent.update(batch)
timings = []
for _ in range(5):
    started = time.perf_counter()
    for _ in range(args["updates"]):
        agent.update(batch)
    timings.append((time.perf_counter() - started) / args["updates"])
print(json.dumps({"ms": 1000 * statistics.median(timings), "restored": restored}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--updates", type=int, default=300)
    args = parser.parse_args()
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    nanny_env = {**plain_env, "MALLOC_TRIM_THRESHOLD_": "65536"}
    cases = [("plain", plain_env, False), ("nanny", nanny_env, False), ("nanny + restored", nanny_env, True)]
    print(f"SAC update, hidden {args.hidden}, batch {args.batch}, 1 torch thread")
    for name, env, restore in cases:
        child_args = json.dumps({"hidden": args.hidden, "batch": args.batch, "updates": args.updates,
                                 "restore": restore})
        out = subprocess.run([sys.executable, "-c", CHILD, child_args], env=env, check=True,
                             capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        note = " (thresholds raised)" if result["restored"] else ""
        print(f"{name:<18} {result['ms']:6.2f} ms/update{note}", flush=True)


if __name__ == "__main__":
    main()
