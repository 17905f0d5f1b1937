"""What one training iteration costs on a device: milliseconds, torch ops, and where the time goes.

    python benchmarks/iteration_cost.py                                   # the shipped Pendulum SAC, CPU
    python benchmarks/iteration_cost.py --device cuda --profile  # on a GPU, with torch.profiler's top ops
    python benchmarks/iteration_cost.py --config workflows/configs/hopper_ppo.toml --iterations 3

Builds the config's algorithm, env and hparams as a segment does, trains past
`learning_starts` (so every iteration makes its updates), then times `--iterations`
iterations. The op count is every leaf aten op dispatched per iteration: on CUDA each is
about one kernel launch, so small networks on a few envs are bound by what launching costs
(docs/benchmarks.md, "On one H100").
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from dask_podracer.agents import make_agent
from dask_podracer.config import load_config
from dask_podracer.envs import make_vec_env


def leaf_ops(prof: profile) -> int:
    """aten ops that call no other aten op: the ones that run kernels."""
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    return sum(1 for e in aten if not any(c.name.startswith("aten::") for c in e.cpu_children))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="workflows/configs/pendulum.toml")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iterations", type=int, default=100, help="iterations timed")
    parser.add_argument("--warmup", type=int, default=None,
                        help="iterations before timing (default: past learning_starts; at least 10)")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's 15 costliest ops")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here")
    torch.set_num_threads(1)  # a segment's default (segment.torch_threads)
    config = load_config(args.config)
    group = config.groups[0]  # the first group's algorithm and hyper-parameters, every field filled in
    algorithm, hparams = group.algorithm, dict(group.hparams)
    torch.manual_seed(0)
    env = make_vec_env(config.run.env, hparams["num_envs"], device=args.device, seed=0, **config.run.env_kwargs)
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams, args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    obs, _ = env.reset(seed=0)
    steps = iterations = 0
    while (steps <= hparams.get("learning_starts", 0) if args.warmup is None else iterations < args.warmup) \
            or iterations < 10:
        obs, n, _ = agent.train_iteration(env, obs)
        steps, iterations = steps + n, iterations + 1
    sync()

    state = {"obs": obs, "steps": 0}

    def iteration() -> None:
        state["obs"], k, _ = agent.train_iteration(env, state["obs"])
        state["steps"] += k

    start = time.perf_counter()
    for _ in range(args.iterations):
        iteration()
    sync()
    seconds, timed_steps = time.perf_counter() - start, state["steps"]
    counted = min(args.iterations, 10)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        for _ in range(counted):
            iteration()
        sync()
    print(f"{algorithm} on {config.run.env} ({args.config}), device {args.device}, torch {torch.__version__}")
    print(f"{seconds / args.iterations * 1e3:.2f} ms per iteration over {args.iterations} iterations "
          f"({timed_steps / seconds:,.0f} env steps/s while timed); "
          f"{leaf_ops(prof) / counted:,.0f} leaf torch ops per iteration")
    if args.profile:
        sort = "self_cuda_time_total" if args.device.startswith("cuda") else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=sort, row_limit=15))


if __name__ == "__main__":
    main()
