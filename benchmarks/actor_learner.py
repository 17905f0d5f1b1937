"""IMPALA actor-learner segments on an embedded LocalCluster: learner ingest, policy lag, and the scheduler's bytes.

    python benchmarks/actor_learner.py --quick   # CartPole-v1, 2 actor processes, 2 segments: under 3 minutes
    python benchmarks/actor_learner.py           # actors 1/2/4/8 on gymnasium's HalfCheetah-v5 (a GPU machine)
    python benchmarks/actor_learner.py --env CartPole-v1 --actors 1 2 --env-steps 100000
    python benchmarks/actor_learner.py --env CartPole-v1 --actors 2 --hidden 1024 1024  # a slower learner

Each point is a real tournament (`run_tournament`) with an `[actors]` section: pool size 1, so each segment is
one learner task plus `--actors` actor tasks, on an embedded LocalCluster of 1 + actors worker processes bound
to 127.0.0.1 (`population/cluster.py`'s `embedded_cluster`, one slot each). The learner runs on the segment's
device ("auto": the worker's GPU if there is one); the actors always act on the CPU, one torch thread each.
Figures come from the segment records in the store (`read_history`), as the learner reported them:

- `transitions_per_s`: transitions the learner received from its actors over the seconds since it opened its
  listener (which includes the actors' start-up: the longer the segment, the closer to the steady rate); the
  median over the segments of a point;
- `streaming_transitions_per_s` ("steady"), `streaming_busy_fraction`: the same from the moment every actor had
  delivered a rollout, so without the actors' start-up;
- `streaming_wait_fraction` ("wait"): the share of those seconds the learner sat blocked on its inbox, waiting
  for rollouts (`learner_wait_fraction` over the whole segment; `learner_publish_fraction`: sending weights);
- `policy_lag_p95` (and median, max): the learner's gradient steps between the weights an actor acted with
  and the step that trained on its rollout, over every rollout trained on; the largest over the segments;
- `trajectory_bytes`: bytes of rollouts the learner received over its actor sockets (`socket_bytes_received`);
- `scheduler_bytes`: bytes the scheduler sent and received on all its connections (to the workers, to the
  client) while the tournament ran, preflight and evaluation included.

How `scheduler_bytes` is measured: the embedded cluster's scheduler runs in this process, and Dask's TCP comms
move their bytes through tornado's `IOStream.read_from_fd` / `write_to_fd` (one `recv_into` / `send` on the
socket each). This script wraps those two methods, in this process only, to add up the bytes each call moved
on sockets whose local port is the scheduler's: the scheduler's own end of every connection, so each byte is
counted once (the client's end has a port of its own; the dashboard listens on another port). The workers'
processes are not touched. Whatever trajectory data passed through the scheduler is a part of that total, so
`scheduler_bytes` is an upper bound on it; set beside `trajectory_bytes` it shows where the rollouts went.
Before each tournament the counter is checked on a payload known to pass through the scheduler: a task whose
argument is 1,000,000 random bytes goes client -> scheduler -> worker, so it must count at least 2,000,000
(`calibration_bytes`); the counters are zeroed after it.

The last line is JSON: the figures of the point with the most actors, and every point's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import weakref
from typing import Any

from distributed import Client
from tornado.iostream import IOStream

from dask_podracer.config import config_from_dict
from dask_podracer.population import run_tournament
from dask_podracer.population.cluster import embedded_cluster
from dask_podracer.store import PodracerStore

CALIBRATION_BYTES = 1_000_000
CARTPOLE = {"num_envs": 8, "rollout_steps": 20, "batch_rollouts": 2}
HALFCHEETAH = {"num_envs": 8, "rollout_steps": 20, "batch_rollouts": 4, "learning_rate": 3e-4, "gamma": 0.99,
               "reward_scale": 0.1}


class SchedulerBytes:
    """Bytes moved on the scheduler's end of its TCP connections, counted at tornado's socket calls (see above)."""

    def __init__(self) -> None:
        self.port: int | None = None
        self.received = self.sent = 0
        self._ours: weakref.WeakKeyDictionary[IOStream, bool] = weakref.WeakKeyDictionary()
        self._read, self._write = IOStream.read_from_fd, IOStream.write_to_fd

    def _is_scheduler_end(self, stream: IOStream) -> bool:
        ours = self._ours.get(stream)
        if ours is None:
            try:
                ours = stream.socket.getsockname()[1] == self.port
            except (OSError, AttributeError, IndexError, TypeError):  # closed, or not an internet socket
                return False
            self._ours[stream] = ours
        return ours

    def install(self, port: int) -> None:
        self.port = port
        counter, read, write = self, self._read, self._write

        def read_from_fd(stream: IOStream, buf: Any) -> int | None:
            n = read(stream, buf)
            if n and counter._is_scheduler_end(stream):
                counter.received += n
            return n

        def write_to_fd(stream: IOStream, data: Any) -> int:
            n = write(stream, data)
            if n and counter._is_scheduler_end(stream):
                counter.sent += n
            return n

        IOStream.read_from_fd, IOStream.write_to_fd = read_from_fd, write_to_fd

    def uninstall(self) -> None:
        IOStream.read_from_fd, IOStream.write_to_fd = self._read, self._write

    def reset(self) -> None:
        self.received = self.sent = 0

    @property
    def total(self) -> int:
        return self.received + self.sent


def calibrate(client: Client, counter: SchedulerBytes) -> int:
    """Bytes counted for one task with a 1,000,000-byte argument (which crosses the scheduler twice)."""
    counter.reset()
    if client.submit(len, os.urandom(CALIBRATION_BYTES), pure=False).result() != CALIBRATION_BYTES:
        raise RuntimeError("calibration task returned the wrong length")
    counted = counter.total
    if counted < 2 * CALIBRATION_BYTES:
        raise RuntimeError(f"the scheduler counter saw {counted:,} bytes of a {CALIBRATION_BYTES:,}-byte argument "
                           f"that crossed the scheduler twice: it does not see the scheduler's traffic")
    counter.reset()
    return counted


def run_point(env: str, hparams: dict[str, Any], actors: int, env_steps: int, segments: int,
              eval_episodes: int, max_in_flight: int | None = None) -> dict[str, Any]:
    """One tournament of `segments` IMPALA segments with `actors` actor tasks each; the learner's figures."""
    with tempfile.TemporaryDirectory() as tmp:
        config = config_from_dict({
            "run": {"env": env, "algorithm": "impala", "store": f"{tmp}/bench.zarr", "budget": "30m",
                    "max_segments": segments, "seed": 0},
            "tournament": {"pool_size": 1},
            "segment": {"env_steps": env_steps, "eval_episodes": eval_episodes, "torch_threads": 1},
            "cluster": {"workers": 1 + actors, "dashboard_address": "127.0.0.1:0"},
            "hparams": hparams,
            "actors": {"workers": actors,
                       **({} if max_in_flight is None else {"max_in_flight": max_in_flight})},
        })
        counter = SchedulerBytes()
        with embedded_cluster(config.cluster) as cluster, Client(cluster) as client:
            counter.install(int(cluster.scheduler_address.rsplit(":", 1)[1]))
            try:
                calibration = calibrate(client, counter)
                started = time.perf_counter()
                summary = run_tournament(config, client)
            finally:
                counter.uninstall()
            wall = time.perf_counter() - started
        if summary.segments_completed < segments:
            raise RuntimeError(f"{summary.segments_completed}/{segments} segments completed: {summary.last_error}")
        records = PodracerStore(config.store_url).read_history()
    metrics = [r["metrics"] for r in records]
    point = {
        "env": env, "actors": actors, "segments": len(records), "wall_s": round(wall, 1),
        "transitions_per_s": round(statistics.median(m["transitions_per_s"] for m in metrics), 1),
        "transitions": int(sum(m["transitions_received"] for m in metrics)),
        "policy_lag_median": max(m["policy_lag_median"] for m in metrics),
        "policy_lag_p95": max(m["policy_lag_p95"] for m in metrics),
        "policy_lag_max": max(m["policy_lag_max"] for m in metrics),
        "rollouts_dropped_stale": int(sum(m["rollouts_dropped_stale"] for m in metrics)),
        "learner_busy_fraction": round(statistics.median(m["learner_busy_fraction"] for m in metrics), 3),
        # from the moment every actor had delivered (None where one never did)
        "streaming_transitions_per_s": _median(metrics, "streaming_transitions_per_s", 1),
        "streaming_busy_fraction": _median(metrics, "streaming_busy_fraction", 3),
        # the rest of the learner's time: blocked on its inbox for rollouts, and handing out its weights
        "learner_wait_fraction": _median(metrics, "learner_wait_fraction", 3),
        "streaming_wait_fraction": _median(metrics, "streaming_wait_fraction", 3),
        "learner_publish_fraction": _median(metrics, "learner_publish_fraction", 3),
        "actors_lost": int(sum(m["actors_lost"] for m in metrics)),
        "trajectory_bytes": int(sum(m["socket_bytes_received"] for m in metrics)),
        "scheduler_bytes": counter.total,
        "scheduler_bytes_received": counter.received, "scheduler_bytes_sent": counter.sent,
        "calibration_bytes": calibration,
        "scores": [round(r["score"], 1) for r in records],
        "device": records[0]["device"],
    }
    point["scheduler_to_trajectory_ratio"] = round(point["scheduler_bytes"] / max(1, point["trajectory_bytes"]), 4)
    return point


def _median(metrics: list[dict[str, float]], name: str, digits: int) -> float | None:
    values = [m[name] for m in metrics if name in m]
    return round(statistics.median(values), digits) if len(values) == len(metrics) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CartPole-v1, 2 actors, 2 segments of 40k transitions")
    parser.add_argument("--env", default=None, help='default "gym:HalfCheetah-v5" (quick: "CartPole-v1")')
    parser.add_argument("--actors", type=int, nargs="+", default=None, help="default 1 2 4 8 (quick: 2)")
    parser.add_argument("--env-steps", type=int, default=None, help="per segment, per actor (quick: 20000)")
    parser.add_argument("--segments", type=int, default=None, help="segments per point (default 2)")
    parser.add_argument("--max-in-flight", type=int, default=None,
                        help="actors.max_in_flight (default: the config's, 2; 0: no bound)")
    parser.add_argument("--hidden", type=int, nargs="+", default=None,
                        help="the networks' hidden layers, e.g. 1024 1024: a learner slower than its actors")
    args = parser.parse_args()
    env = args.env or ("CartPole-v1" if args.quick else "gym:HalfCheetah-v5")
    sweep = args.actors or ([2] if args.quick else [1, 2, 4, 8])
    per_actor = args.env_steps or (20_000 if args.quick else 100_000)
    segments = args.segments or 2
    hparams = dict(CARTPOLE if "CartPole" in env else HALFCHEETAH)
    if args.hidden:
        hparams["hidden"] = args.hidden
    in_flight = "the default" if args.max_in_flight is None else args.max_in_flight
    print(f"IMPALA on {env}, hparams {hparams}, max_in_flight {in_flight}; {segments} segments per point, "
          f"{per_actor:,} transitions per actor per segment; {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'actors':>6} {'trans/s':>9} {'steady':>9} {'lag p50':>7} {'p95':>4} {'max':>4} {'stale':>5} {'busy':>5} "
          f"{'steady':>6} {'wait':>5} {'trajectory B':>13} {'scheduler B':>12} {'sched/traj':>10} {'wall s':>7}  "
          "scores", flush=True)
    points = []
    for actors in sweep:
        p = run_point(env, hparams, actors, per_actor * actors, segments, eval_episodes=10,
                      max_in_flight=args.max_in_flight)
        points.append(p)
        steady, steady_busy = p["streaming_transitions_per_s"], p["streaming_busy_fraction"]
        steady_wait = p["streaming_wait_fraction"]
        print(f"{actors:>6} {p['transitions_per_s']:>9,.0f} {f'{steady:,.0f}' if steady is not None else '-':>9} "
              f"{p['policy_lag_median']:>7.1f} {p['policy_lag_p95']:>4.0f} "
              f"{p['policy_lag_max']:>4.0f} {p['rollouts_dropped_stale']:>5} {p['learner_busy_fraction']:>5.2f} "
              f"{f'{steady_busy:.2f}' if steady_busy is not None else '-':>6} "
              f"{f'{steady_wait:.2f}' if steady_wait is not None else '-':>5} "
              f"{p['trajectory_bytes']:>13,} {p['scheduler_bytes']:>12,} {p['scheduler_to_trajectory_ratio']:>10.4f} "
              f"{p['wall_s']:>7.1f}  {p['scores']} ({p['device']})", flush=True)
    print(f"counter check: a task with a {CALIBRATION_BYTES:,}-byte argument counted "
          f"{points[-1]['calibration_bytes']:,} scheduler bytes (it crosses the scheduler twice)", flush=True)
    last = points[-1]
    print(json.dumps({**{k: last[k] for k in ("env", "actors", "transitions_per_s", "scheduler_bytes",
                                               "trajectory_bytes", "policy_lag_p95", "policy_lag_median")},
                      "load_average": os.getloadavg()[0], "points": points}))


if __name__ == "__main__":
    main()
