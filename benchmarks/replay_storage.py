"""Store size of one agent's lineage with `tournament.replay = "copy"` against `"share"`.

    python benchmarks/replay_storage.py [--segments 8] [--env-steps 2000] [--buffer 100000]

Runs the same lineage twice in-process (SAC on Pendulum, each segment continuing from the
last, the same seeds), once saving every checkpoint's whole replay buffer and once sharing
it (each checkpoint stores the transitions its segment collected and refers to its parent
for the rest), then prints the bytes under `checkpoints/` after each segment and the seconds
spent saving and loading. The two lineages train identically (tests/test_segment.py).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentSpec, load_agent, run_segment


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def lineage(root: Path, share: bool, segments: int, env_steps: int, buffer: int) -> tuple[list[int], float, float]:
    store = PodracerStore(root / ("share.zarr" if share else "copy.zarr"), create=True)
    hparams = {"hidden": [64, 64], "num_envs": 4, "buffer_size": buffer, "learning_starts": 500, "batch_size": 64}
    sizes, parent, started = [], None, time.perf_counter()
    for i in range(segments):
        run_segment(SegmentSpec(key=f"k{i}", store_url=store.url, env="Pendulum-v1", algorithm="sac",
                                hparams=hparams, parent=parent, seed=i, env_step_budget=env_steps, eval_episodes=2,
                                generation=i, share_replay=share))
        parent = f"k{i}"
        sizes.append(size(Path(store.url) / "checkpoints"))
    train = time.perf_counter() - started
    started = time.perf_counter()
    agent = load_agent(store, parent)
    load = time.perf_counter() - started
    assert agent.replay.size == min(buffer, segments * env_steps)
    return sizes, train, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--env-steps", type=int, default=2000)
    parser.add_argument("--buffer", type=int, default=100_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        copy, copy_s, copy_load = lineage(Path(tmp), False, args.segments, args.env_steps, args.buffer)
        share, share_s, share_load = lineage(Path(tmp), True, args.segments, args.env_steps, args.buffer)
    print(f"SAC on Pendulum, {args.segments} segments of {args.env_steps:,} env steps, buffer {args.buffer:,}")
    print("| after segment | copy (MB) | share (MB) | copy / share |")
    print("| ---: | ---: | ---: | ---: |")
    for i, (c, s) in enumerate(zip(copy, share, strict=True), 1):
        print(f"| {i} | {c / 1e6:.2f} | {s / 1e6:.2f} | {c / s:.1f}x |")
    print(f"lineage seconds (train, evaluate, save): copy {copy_s:.1f}, share {share_s:.1f}; "
          f"loading the last checkpoint: copy {copy_load:.2f} s, share {share_load:.2f} s")


if __name__ == "__main__":
    main()
