"""Milliseconds per SAC update, ours against Stable-Baselines3's, on 1 and 2 torch threads.

    pip install -e ".[mujoco,bench]"
    python benchmarks/sac_update_threads.py [--threads 1 2] [--updates 300]

HalfCheetah-v5's sizes (17 observations, 6 actions), 256x256 networks, batch 256: the shipped
`workflows/configs/halfcheetah.toml` and rl-zoo's SAC. Each case runs in a fresh child process (torch reads
its thread count once, and a fresh process has glibc's default malloc thresholds), warms up with one block of
`--updates` updates, then prints the median of 5 timed blocks. Ours times `SACAgent.update` on a fixed batch;
SB3 times `SAC.train(gradient_steps=...)` after 2,000 env steps of `learn` have filled its buffer (so its
figure includes sampling the batch from its replay buffer, which ours leaves out: a few per cent). The last
line is JSON: {"ours": {threads: ms}, "sb3": {threads: ms}}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, statistics, sys, time
import numpy as np, torch, gymnasium as gym
args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
torch.manual_seed(0)
n = args["updates"]
if args["which"] == "ours":
    from dask_podracer.agents.sac import SACAgent, SACConfig
    box = lambda size, bound: gym.spaces.Box(-bound, bound, (size,), np.float32)
    agent = SACAgent(box(17, np.inf), box(6, 1.0), SACConfig(hidden=(256, 256), batch_size=256), torch.device("cpu"))
    batch = {"obs": torch.randn(256, 17), "action": torch.rand(256, 6) * 2 - 1, "reward": torch.randn(256),
             "next_obs": torch.randn(256, 17), "terminated": torch.zeros(256)}
    block = lambda: [agent.update(batch) for _ in range(n)]
else:
    from stable_baselines3 import SAC
    model = SAC("MlpPolicy", gym.make("HalfCheetah-v5"), learning_starts=0, batch_size=256, seed=0, verbose=0)
    model.learn(2000)
    block = lambda: model.train(gradient_steps=n, batch_size=256)
block()
timings = []
for _ in range(5):
    started = time.perf_counter()
    block()
    timings.append((time.perf_counter() - started) / n)
print(json.dumps({"ms": 1000 * statistics.median(timings)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--updates", type=int, default=300)
    args = parser.parse_args()
    try:  # the children need both; say so here, in one line, rather than in a child's traceback
        import mujoco  # noqa: F401
        import stable_baselines3  # noqa: F401
    except ImportError as error:
        parser.error(f"{error}: pip install stable-baselines3 'gymnasium[mujoco]'")
    results: dict[str, dict[int, float]] = {"ours": {}, "sb3": {}}
    for which in results:
        for threads in args.threads:
            child_args = json.dumps({"which": which, "threads": threads, "updates": args.updates})
            out = subprocess.run([sys.executable, "-c", CHILD, child_args], check=True, capture_output=True,
                                 text=True).stdout
            ms = json.loads(out.strip().splitlines()[-1])["ms"]
            results[which][threads] = round(ms, 2)
            print(f"{which:<5} {threads} thread(s): {ms:6.2f} ms/update", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
