"""How much the orchestrator's bookkeeping costs, with segments that do no training.

    python benchmarks/orchestrator_overhead.py [--agents 1000] [--segments 3000] [--slots 64] [--seconds 20]

1. Throughput: `--agents` agents whose segments return at once (an injected segment
   function), run until `--segments` have finished, through our loop (state machine,
   leaderboard, history and run state written to a real Zarr store), beside a bare
   `as_completed` loop that submits the same tasks and keeps no books.
2. Efficiency: segments that sleep 1 s on `--slots` slots for about `--seconds` seconds;
   efficiency = (segments finished x 1 s) / (slots x wall-clock seconds). Our loop runs twice:
   as configured by default (`tournament.pending = 0`: a slot that frees waits for the client to
   submit its next segment), and with `pending = slots` (a segment queued per slot, so the
   scheduler starts the next one the moment a slot frees, with no round trip to the client).
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import tempfile
import time

from distributed import Client, LocalCluster, as_completed

from dask_podracer.config import config_from_dict
from dask_podracer.population import run_tournament
from dask_podracer.train import SegmentResult, SegmentSpec


def fake_segment(spec: SegmentSpec, sleep: float = 0.0) -> SegmentResult:
    """A segment that trains nothing: sleeps, then reports a random score (no checkpoint is written)."""
    time.sleep(sleep)
    score = random.Random(spec.seed).uniform(-1500, -100)
    return SegmentResult(key=spec.key, parent=spec.parent, algorithm=spec.algorithm, env=spec.env,
                         hparams=spec.hparams, score=score, segment_env_steps=1000, lineage_env_steps=1000,
                         train_seconds=sleep, eval_seconds=0.0, generation=spec.generation, device="cpu", metrics={})


def config(store: str, pool: int, segments: int, budget: str = "30m", pending: int = 0):
    return config_from_dict({
        "run": {"env": "Pendulum-v1", "algorithm": "sac", "store": store, "max_segments": segments, "budget": budget},
        "tournament": {"pool_size": pool, "pending": pending, "perturb": ["actor_lr"], "leaderboard_size": 16},
        # fake_segment writes no checkpoint, so retention would find none to delete (CheckpointNotFound)
        "store": {"retention": False},
    })


def bare_loop(client: Client, agents: int, segments: int, sleep: float) -> float:
    """Completions per second of a loop that only resubmits: the best a plain `as_completed` loop does
    (results gathered in the background, taken in batches, as our loop does), with no books kept."""
    spec = SegmentSpec(key="x", store_url="unused", env="Pendulum-v1", algorithm="sac", hparams={})
    fn = functools.partial(fake_segment, sleep=sleep)
    started = time.perf_counter()
    queue = as_completed([client.submit(fn, spec, pure=False, resources={"CPU": 1}) for _ in range(agents)],
                         with_results=True)
    submitted, done = agents, 0
    for batch in queue.batches():
        for _future, _result in batch:
            done += 1
            if submitted < segments:
                queue.add(client.submit(fn, spec, pure=False, resources={"CPU": 1}))
                submitted += 1
    return done / (time.perf_counter() - started)


def our_loop(client: Client, agents: int, segments: int, sleep: float, pending: int = 0) -> tuple[float, float]:
    """Completions per second through run_tournament, and its wall-clock seconds (from its loop's start:
    the one-off preflight, a second or so, is left out, as the bare loop has none)."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_tournament(config(f"{tmp}/o.zarr", agents, segments, pending=pending), client,
                                 segment_fn=functools.partial(fake_segment, sleep=sleep))
    assert summary.segments_completed == segments, summary
    return summary.segments_completed / summary.wall_seconds, summary.wall_seconds


def on_fresh_cluster(workers: int, threads: int, measure):
    """`measure(client)` on a LocalCluster of its own: a scheduler slows down as it accumulates the state of
    thousands of finished tasks, so loops measured one after the other on one cluster favour the first."""
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", resources={"CPU": threads}) as cluster, \
            Client(cluster) as client:
        bare_loop(client, 50, 200, 0.0)  # warm up: worker imports, connections
        return measure(client)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--segments", type=int, default=3000)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="fresh-cluster measurements of each loop")
    args = parser.parse_args()

    bare, ours = [], []
    for _ in range(args.rounds):  # alternating, each on a fresh cluster
        bare.append(on_fresh_cluster(2, 4, lambda c: bare_loop(c, args.agents, args.segments, 0.0)))
        ours.append(on_fresh_cluster(2, 4, lambda c: our_loop(c, args.agents, args.segments, 0.0)[0]))
    print(f"throughput, {args.agents} agents, {args.segments} segments that return at once, 8 worker threads, "
          f"median of {args.rounds} fresh clusters each:")
    print(f"  bare as_completed loop: {statistics.median(bare):8.1f} completions/s  "
          f"(runs: {', '.join(f'{x:.0f}' for x in bare)})")
    print(f"  our loop (books kept):  {statistics.median(ours):8.1f} completions/s  "
          f"= {100 * statistics.median(ours) / statistics.median(bare):.0f}% of bare  "
          f"(runs: {', '.join(f'{x:.0f}' for x in ours)})")

    per_worker = 16
    workers = max(1, args.slots // per_worker)
    slots = workers * per_worker
    segments = slots * args.seconds
    bare_wall = segments / on_fresh_cluster(workers, per_worker, lambda c: bare_loop(c, slots, segments, 1.0))
    wall = on_fresh_cluster(workers, per_worker, lambda c: our_loop(c, slots, segments, 1.0)[1])
    queued_wall = on_fresh_cluster(workers, per_worker, lambda c: our_loop(c, slots, segments, 1.0, pending=slots)[1])
    print(f"efficiency, 1 s segments on {slots} slots, {segments} segments (ideal {args.seconds:.1f} s):")
    print(f"  bare as_completed loop:       {bare_wall:5.1f} s, efficiency {100 * args.seconds / bare_wall:.1f}%")
    print(f"  our loop, pending = 0:        {wall:5.1f} s, efficiency {100 * args.seconds / wall:.1f}%")
    print(f"  our loop, pending = {slots:<3}:      {queued_wall:5.1f} s, "
          f"efficiency {100 * args.seconds / queued_wall:.1f}%")


if __name__ == "__main__":
    main()
