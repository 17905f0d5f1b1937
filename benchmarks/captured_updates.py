"""Captured learner updates against eager: milliseconds per update and per iteration, for each algorithm.

    python benchmarks/captured_updates.py                 # CPU: eager vs torch.compile (inductor)
    python benchmarks/captured_updates.py --device cuda   # CUDA: eager vs one CUDA graph per update
    python benchmarks/captured_updates.py --quick         # fewer repetitions; SAC, TD3, D3QN and PPO (no DDPG)

Each algorithm runs with the shipped Pendulum config's sizes (hidden 64x64, 4 envs, batch 256; SAC's utd 1.0,
so an iteration is 4 env steps and 4 updates) on Pendulum-v1, the DQN family on CartPole-v1 (batch 128), PPO on
Pendulum-v1 with 16 envs x 64 steps in 8 minibatches of 128 over 10 epochs (an update is one minibatch step). For
each mode (`compile = "off"`, then `"on"`) it builds env and agent, trains past `learning_starts` (which
compiles or captures), then times `--iterations` iterations (`agent.train_iteration`: acting, env steps,
updates) and `--updates` updates on one sampled batch (`agent.update`), and the env's step alone (`ms_per_env_step`:
on CUDA in captured mode one replayed graph, envs/graphed.py). `first_update_s` is the first update's
seconds: compiling or capturing (an inductor cache on disk makes it shorter the second time). The last line is
JSON: per algorithm, ms per update and per iteration, eager and captured, and the speed-ups.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from dask_podracer.agents import captured, make_agent
from dask_podracer.agents.loop import sample_batch
from dask_podracer.envs import make_vec_env
from dask_podracer.envs.graphed import graph_steps

SIZES = {"num_envs": 4, "hidden": [64, 64], "learning_starts": 256}
CASES = {
    "sac": ("Pendulum-v1", {**SIZES, "batch_size": 256, "utd_ratio": 1.0, "tau": 0.01}),
    "td3": ("Pendulum-v1", {**SIZES, "batch_size": 256, "utd_ratio": 1.0}),
    "ddpg": ("Pendulum-v1", {**SIZES, "batch_size": 256, "utd_ratio": 1.0}),
    "d3qn": ("CartPole-v1", {**SIZES, "batch_size": 128, "utd_ratio": 1.0}),
    "ppo": ("Pendulum-v1", {"num_envs": 16, "rollout_steps": 64, "num_minibatches": 8, "epochs": 10,
                            "hidden": [64, 64]}),
}
QUICK = ("sac", "td3", "d3qn", "ppo")


def measure(algorithm: str, env_name: str, hparams: dict, mode: str, device: str, iterations: int,
            updates: int) -> dict[str, float]:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch.manual_seed(0)
    env = make_vec_env(env_name, hparams["num_envs"], device=device, seed=0)
    if captured.use_capture(mode, torch.device(device)):
        env = graph_steps(env)  # as a segment does: on CUDA the env's step is one graph too (envs/graphed.py)
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space,
                       {**hparams, "compile": mode}, device)
    obs, _ = env.reset(seed=0)
    on_policy = algorithm == "ppo"
    while True:  # random steps until learning starts, then the first update (compiles, captures)
        started = time.perf_counter()
        obs, _, _ = agent.train_iteration(env, obs)
        sync()
        first = time.perf_counter() - started
        if on_policy or agent.updates:
            break
    state = {"obs": obs}

    def iteration() -> None:
        state["obs"], _, state["metrics"] = agent.train_iteration(env, state["obs"])

    if on_policy:  # one minibatch step: PPO's update
        n = agent.config.batch_size // agent.config.num_minibatches
        buf = agent.buffer
        mb = {"obs": buf.obs.flatten(0, 1)[:n], "actions": buf.actions.flatten(0, 1)[:n],
              "log_probs": buf.log_probs.flatten()[:n], "values": buf.values.flatten()[:n],
              "advantages": torch.randn(n, device=device), "returns": buf.values.flatten()[:n] + 0.1}
        update = lambda: agent._update(mb)
    else:
        batch = sample_batch(agent)
        update = lambda: agent.update(batch)
    per_iteration = timed(iteration, iterations, sync)
    action = agent.random_action(env.num_envs) if not on_policy else None
    if action is None:
        with torch.no_grad():
            action = agent.act(state["obs"])
    per_env_step = timed(lambda: env.step(action), iterations, sync)
    per_update = timed(update, updates, sync)
    updates_per_iteration = state["metrics"]["updates"] if on_policy else agent.config.utd_ratio * \
        agent.config.num_envs * agent.config.steps_per_iteration
    return {"ms_per_update": round(1e3 * per_update, 3), "ms_per_iteration": round(1e3 * per_iteration, 3),
            "ms_per_env_step": round(1e3 * per_env_step, 3), "env_graphed": type(env).__name__ == "GraphedStepEnv",
            "updates_per_iteration": updates_per_iteration, "first_update_s": round(first, 2)}


def timed(fn, n: int, sync, blocks: int = 5) -> float:
    """Seconds per call: the median over `blocks` blocks of n / blocks calls (other jobs' load spikes drop out),
    after 3 calls of warm-up."""
    for _ in range(3):
        fn()
    sync()
    per_call = []
    for _ in range(blocks):
        started = time.perf_counter()
        for _ in range(max(1, n // blocks)):
            fn()
        sync()
        per_call.append((time.perf_counter() - started) / max(1, n // blocks))
    return statistics.median(per_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--quick", action="store_true", help="SAC, TD3, D3QN and PPO, fewer repetitions")
    parser.add_argument("--algorithms", nargs="*", default=None, help=f"some of {sorted(CASES)}")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here")
    torch.set_num_threads(1)  # a segment's default (segment.torch_threads)
    algorithms = args.algorithms or (QUICK if args.quick else tuple(CASES))
    iterations, updates = (20, 50) if args.quick else (100, 300)
    results: dict[str, dict] = {}
    for algorithm in algorithms:
        env_name, hparams = CASES[algorithm]
        row = {}
        n_iterations = max(5, iterations // 10) if algorithm == "ppo" else iterations  # a PPO iteration is 80 steps
        for mode, label in (("off", "eager"), ("on", "captured")):
            captured.clear_cache()
            row[label] = measure(algorithm, env_name, hparams, mode, args.device, n_iterations, updates)
            print(f"{algorithm:5s} {label:8s} {row[label]}", flush=True)
        row["update_speedup"] = round(row["eager"]["ms_per_update"] / row["captured"]["ms_per_update"], 2)
        row["iteration_speedup"] = round(row["eager"]["ms_per_iteration"] / row["captured"]["ms_per_iteration"], 2)
        results[algorithm] = row
    device = torch.cuda.get_device_name() if args.device == "cuda" else f"{platform.processor() or 'cpu'}"
    print(json.dumps({"device": device, "torch": torch.__version__, "quick": args.quick, "results": results}))


if __name__ == "__main__":
    main()
