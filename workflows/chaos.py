"""Chaos check: a tournament survives killed workers and a killed client, and loses nothing it recorded.

    python workflows/chaos.py [--workers 2] [--segments 12] [--kill-every 10] [--client-kill-after 2] [--store DIR]

Starts a Dask scheduler and workers (each under a nanny, which restarts a killed worker)
on 127.0.0.1, runs `podracer train` against them, SIGKILLs a worker process every
`--kill-every` seconds, SIGKILLs the client once the store holds `--client-kill-after` records
and starts it again on the same store. Then it checks the store: every leaderboard
entry loads and passes its checksum, every history record written before the client
was killed is still there, and no key appears twice. Exit status 0 when all hold.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CONFIG = """
[run]
env = "Pendulum-v1"
algorithm = "sac"
budget = "10m"
max_segments = {segments}
[tournament]
perturb = ["actor_lr"]
[segment]
env_steps = 400
eval_episodes = 2
[hparams]
hidden = [32, 32]
num_envs = 2
learning_starts = 100
batch_size = 64
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(workers: int, scratch: Path) -> tuple[str, list[subprocess.Popen]]:
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask"]  # this interpreter's dask, with or without a `dask` script on PATH
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--dashboard-address", "127.0.0.1:0"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    for i in range(workers):
        procs.append(subprocess.Popen([*dask, "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                                       "--resources", "CPU=1", "--name", f"chaos-{i}", "--local-directory",
                                       str(scratch), "--dashboard-address", "127.0.0.1:0"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return address, procs


def train(config: Path, store: Path, address: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store", str(store),
                             "--scheduler", address], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def kill_workers(address: str, every: float, stop: threading.Event, log: list[str]) -> None:
    from distributed import Client

    with Client(address, timeout="30s") as client:
        rng = random.Random(0)
        while not stop.wait(every):
            pids = client.run(os.getpid)  # worker processes, not their nannies
            if pids:
                worker, pid = rng.choice(sorted(pids.items()))
                os.kill(pid, signal.SIGKILL)
                log.append(f"killed worker {worker} (pid {pid})")


def check(store_path: Path, before: list[dict]) -> list[str]:
    from dask_podracer.store import PodracerStore
    from dask_podracer.train import load_agent

    store = PodracerStore(store_path)
    problems = []
    history = store.read_history()
    if history[: len(before)] != before:
        problems.append("history records written before the client was killed changed or vanished")
    keys = [r["key"] for r in history]
    if len(keys) != len(set(keys)):
        problems.append("a segment appears twice in the history")
    state = store.read_run_state()
    if state.get("invocations", 0) < 2 or not state.get("finished"):
        problems.append(f"the second client did not resume the run and finish it (run state: invocations "
                        f"{state.get('invocations')}, stop reason {state.get('stop_reason')!r})")
    board = store.read_leaderboard()
    if len({e["key"] for e in board}) != len(board):
        problems.append("a leaderboard entry appears twice")
    for entry in board:
        try:
            load_agent(store, entry["key"])  # verifies the checksum
        except Exception as e:  # noqa: BLE001 - every failure is a finding to report
            problems.append(f"entry {entry['key']} does not load: {e}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--segments", type=int, default=12, help="segments the resumed client runs")
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds between worker kills")
    parser.add_argument("--client-kill-after", type=int, default=2, metavar="RECORDS",
                        help="SIGKILL the client once the store holds this many segment records")
    parser.add_argument("--store", help="store directory (default: a temporary one)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        store = Path(args.store) if args.store else tmp_path / "chaos.zarr"
        config = tmp_path / "chaos.toml"
        config.write_text(CONFIG.format(segments=args.segments))
        address, cluster = start_cluster(args.workers, tmp_path)
        stop, log = threading.Event(), []
        try:
            from distributed import Client
            with Client(address, timeout="60s") as probe:
                probe.wait_for_workers(args.workers, timeout=120)
            killer = threading.Thread(target=kill_workers, args=(address, args.kill_every, stop, log), daemon=True)
            killer.start()
            from dask_podracer.store import PodracerStore
            first = train(config, store, address)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and first.poll() is None:
                if PodracerStore.exists(store) and len(PodracerStore(store).read_history()) >= args.client_kill_after:
                    break
                time.sleep(0.5)
            first.kill()
            first.wait()
            before = PodracerStore(store).read_history() if PodracerStore.exists(store) else []
            log.append(f"killed the client with {len(before)} records in the store")
            second = train(config, store, address)
            output, _ = second.communicate(timeout=900)
            stop.set()
            killer.join(timeout=60)
        finally:
            stop.set()
            for proc in cluster:
                proc.kill()
        for line in log:
            print(line)
        print(output.strip().splitlines()[-1] if output.strip() else "(no output)")
        problems = check(store, before) if second.returncode == 0 else [f"the resumed client exited "
                                                                         f"{second.returncode}:\n{output}"]
        print(f"{len(before)} records before the client kill; {len(PodracerStore(store).read_history())} after")
        for p in problems:
            print(f"PROBLEM: {p}")
        print("chaos check passed" if not problems else "chaos check FAILED")
        return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
