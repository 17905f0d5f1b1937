"""Chaos check and soak: a tournament survives killed workers, clients and schedulers, and loses nothing it recorded.

    python workflows/chaos.py [--workers 2] [--segments 12] [--kill-every 10] [--client-kill-after 2] [--store DIR]
    python workflows/chaos.py --soak MINUTES [--kill-every MIN MAX] [--seed 0] [--kind-order {random,rounds}]
                              [--min-kills N] [--workers 2] [--store DIR] [--logs DIR]
    python workflows/chaos.py --verify STORE [--evidence FILE]

The check (the default): starts a Dask scheduler and workers (each under a nanny, which restarts
a killed worker) on 127.0.0.1, runs `podracer train` against them, SIGKILLs a worker process every
`--kill-every` seconds, SIGKILLs the client once the store holds `--client-kill-after` records
and starts it again on the same store. Then it checks the store: every leaderboard
entry loads and passes its checksum, every history record written before the client
was killed is still there, and no key appears twice. Exit status 0 when all hold.

The soak (`--soak MINUTES`): the same cluster and one `podracer train` whose budget outlasts the
soak. Every MIN to MAX seconds (30 to 90 by default; uniform, seeded by `--seed`, so a soak repeats
its schedule) it SIGKILLs one of: a worker process (its nanny restarts it), the client (restarted
on the same store at once), or the scheduler. A worker of distributed 2026.8 does not reconnect: when
its scheduler dies it closes, and its nanny and `dask worker` process exit with it a few seconds
later; the client stops with "lost the Dask scheduler". So after a scheduler kill the soak waits for
both to go, starts the scheduler again on the same port, then the workers, then the client. The
kind is drawn at random (`--kind-order random`) or from seeded shuffles of all three kinds
(`rounds`: every kind once in each three kills). After each kill the history is read: every later
read must begin with every earlier one. The scheduler runs this file as a preload that logs every
segment submitted to it, so segments the store never heard of can be counted.

When MINUTES have passed (and at least `--min-kills` kills were made) it stops killing, waits for
the client to record a segment trained after the last kill, interrupts it (SIGINT), lets the workers
finish what they run, stops the cluster, and verifies the store from a fresh process
(`--verify`): every finished history record names a checkpoint that loads and passes its
checksum (or is quarantined, which is reported; or, in a store whose run state says a retention
policy is on, was deleted by it), as does every leaderboard entry, every agent's checkpoint in the
run state and every other published checkpoint; no key is in the history or the leaderboard twice;
the history only grew. Every client that lost its scheduler must have said so in one line, and none
may exit unasked. It prints the figures (kills of each kind, segments recorded, failed and lost,
entries checked, checkpoints verified) and last a JSON line of them all. Exit status 0 when
everything holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dask_podracer.cli import OneLineArgumentParser

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

KINDS = ("worker", "client", "scheduler")
SEGMENT_LOG_ENV = "PODRACER_CHAOS_SEGMENT_LOG"
"""Set for the soak's scheduler: the file its preload (`dask_setup` below) appends submitted segment keys to."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DASK = [sys.executable, "-m", "dask"]  # this interpreter's dask, with or without a `dask` script on PATH


def start_scheduler(port: int, log: Path | None = None, preload: bool = False) -> subprocess.Popen:
    """A `dask scheduler` on 127.0.0.1:`port`; with `preload`, it logs every submitted segment (see dask_setup)."""
    command = [*DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", "127.0.0.1:0"]
    if preload:
        command += ["--preload", str(Path(__file__).resolve())]
    return _spawn(command, log)


def start_worker(address: str, index: int, scratch: Path, log: Path | None = None) -> subprocess.Popen:
    """A `dask worker` process: its nanny, which starts (and restarts) the worker process proper."""
    return _spawn([*DASK, "worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--resources", "CPU=1",
                   "--name", f"chaos-{index}", "--local-directory", str(scratch),
                   "--dashboard-address", "127.0.0.1:0"], log)


def _spawn(command: list[str], log: Path | None) -> subprocess.Popen:
    if log is None:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with log.open("a") as out:  # appended: a restarted process goes on in the same file
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def start_cluster(workers: int, scratch: Path) -> tuple[str, list[subprocess.Popen]]:
    """A scheduler and `workers` workers; the scheduler is the first process of the list."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [start_scheduler(port)]
    procs += [start_worker(address, i, scratch) for i in range(workers)]
    return address, procs


def train(config: Path, store: Path, address: str, log: Path | None = None,
          budget: str | None = None) -> subprocess.Popen:
    """`podracer train` on the cluster at `address`; its output piped, or into `log` (a long run would fill a pipe)."""
    command = [sys.executable, "-m", "dask_podracer.cli", "train", str(config), "--store", str(store),
               "--scheduler", address]
    if budget is not None:
        command += ["--budget", budget]
    if log is None:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with log.open("w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


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
    from dask_podracer.store import PodracerStore, StoreError
    from dask_podracer.train import load_agent

    store = PodracerStore(store_path)
    problems = []
    try:
        history = store.read_history()
        state = store.read_run_state()
        board = store.read_leaderboard()
    except StoreError as e:  # a damaged table is a finding, not a traceback
        return [f"the store's tables do not read: {e}"]
    if history[: len(before)] != before:
        problems.append("history records written before the client was killed changed or vanished")
    if state.get("invocations", 0) < 2 or not state.get("finished"):
        problems.append(f"the second client did not resume the run and finish it (run state: invocations "
                        f"{state.get('invocations')}, stop reason {state.get('stop_reason')!r})")
    for entry in board:
        try:
            load_agent(store, entry["key"])  # the agent rebuilds from it, not only its arrays
        except Exception as e:  # noqa: BLE001 - every failure is a finding to report
            problems.append(f"entry {entry['key']} does not load: {e}")
    # and every other checkpoint the store still relies on (finished records', the agents' a resume continues
    # from), with the duplicate keys: the leaderboard alone missed a damaged checkpoint of an agent off the board
    return problems + verify_store(store_path, {})["problems"]


def chaos_check(args: argparse.Namespace) -> int:
    """The short check: worker kills every few seconds, one client kill, then a resumed run to its end."""
    every = args.kill_every[0] if args.kill_every else 10.0
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
            killer = threading.Thread(target=kill_workers, args=(address, every, stop, log), daemon=True)
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
        problems = (check(store, before) if second.returncode == 0
                    else [f"the resumed client exited {second.returncode}:\n{output}"])
        print(f"{len(before)} records before the client kill; {len(PodracerStore(store).read_history())} after")
        for p in problems:
            print(f"PROBLEM: {p}")
        print("chaos check passed" if not problems else "chaos check FAILED")
        return 0 if not problems else 1


# -- the soak: the scheduler's preload -------------------------------------------------------------

def dask_setup(scheduler: Any) -> None:
    """Run by `dask scheduler --preload chaos.py`: log the key of every segment submitted to this scheduler."""
    path = os.environ.get(SEGMENT_LOG_ENV)
    if path:
        from distributed.diagnostics.plugin import SchedulerPlugin

        from dask_podracer.population.task_keys import segment_key

        class SegmentLog(SchedulerPlugin):
            def update_graph(self, scheduler: Any, *, keys: set, **kwargs: Any) -> None:
                new = sorted(k for k in map(segment_key, keys) if k is not None)
                if new:
                    with open(path, "a") as out:  # one short append per submission: survives a SIGKILL after it
                        out.write("".join(f"{k}\n" for k in new))

        scheduler.add_plugin(SegmentLog(), name="chaos-segment-log")


def submitted_segments(path: Path) -> set[str]:
    """The keys of all segments the soak's schedulers were given, from the preload's log."""
    return set(path.read_text().split()) if path.exists() else set()


# -- the soak: the kill schedule, the cluster, the client ------------------------------------------

class KillSchedule:
    """When to kill next and what: seeded, so a soak with the same seed kills in the same order at the same pace.

    Intervals, kinds and worker choices draw from separate streams, so one never shifts another.
    """

    def __init__(self, seed: int, every: tuple[float, float], order: str, workers: int) -> None:
        self.every, self.order, self.workers = every, order, workers
        self._intervals = random.Random(f"{seed}/interval")
        self._kinds = random.Random(f"{seed}/kind")
        self._victims = random.Random(f"{seed}/worker")
        self._round: list[str] = []

    def interval(self) -> float:
        return self._intervals.uniform(*self.every)

    def kind(self) -> str:
        if self.order == "random":
            return self._kinds.choice(KINDS)
        if not self._round:  # a fresh shuffle of all three: each kind once per round
            self._round = self._kinds.sample(KINDS, len(KINDS))
        return self._round.pop(0)

    def worker(self) -> int:
        return self._victims.randrange(self.workers)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(condition: Callable[[], bool], timeout: float, step: float = 0.5) -> bool:
    """Whether `condition()` came true within `timeout` seconds, asked every `step` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM (dask's processes close their children and leave), then SIGKILL if it is still there."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SoakCluster:
    """The scheduler and workers of a soak, with what it takes to kill and restart each."""

    # a plain class, not a dataclass: a test loads this file by path, as no module that sys.modules holds
    def __init__(self, port: int, workers: int, scratch: Path, logs: Path) -> None:
        self.port, self.workers, self.scratch, self.logs = port, workers, scratch, logs
        self.scheduler: subprocess.Popen | None = None
        self.nannies: list[subprocess.Popen] = []
        self.worker_pids: set[int] = set()
        """Every worker process seen: any left behind by a killed nanny are ended when the soak stops."""

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def start(self) -> None:
        """The scheduler on its port, then the workers; returns once all workers have registered."""
        self.scheduler = start_scheduler(self.port, self.logs / "scheduler.log", preload=True)
        if not wait_until(lambda: port_open(self.port), timeout=60):
            raise RuntimeError(f"the scheduler did not listen on port {self.port} within 60s")
        self.nannies = [start_worker(self.address, i, self.scratch, self.logs / f"worker-{i}.log")
                        for i in range(self.workers)]
        self.wait_for_workers()

    def wait_for_workers(self, timeout: float = 180) -> None:
        from distributed import Client

        with Client(self.address, timeout="60s", set_as_default=False) as probe:
            probe.wait_for_workers(self.workers, timeout=timeout)

    def worker_process(self, index: int, timeout: float = 30) -> int | None:
        """The pid of worker `index`'s worker process (its nanny's child that runs `spawn_main`), waiting up to
        `timeout` seconds for a restarting one; None if it has none."""
        deadline = time.monotonic() + timeout
        while (pid := self._worker_child(index)) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if pid is not None:
            self.worker_pids.add(pid)
        return pid

    def _worker_child(self, index: int) -> int | None:
        import psutil

        try:
            children = psutil.Process(self.nannies[index].pid).children()
            # not the nanny's other child, multiprocessing's resource tracker
            return next((c.pid for c in children if "spawn_main" in " ".join(c.cmdline())), None)
        except psutil.Error:
            return None

    def kill_scheduler(self, grace: float = 60) -> int:
        """SIGKILL the scheduler and wait for its workers to leave; the number that had to be killed."""
        self.remember_worker_processes()
        self.scheduler.kill()
        self.scheduler.wait()
        leftovers = 0
        for nanny in self.nannies:  # they close by themselves a few seconds after their scheduler dies
            try:
                nanny.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                nanny.kill()
                nanny.wait()
                leftovers += 1
        return leftovers

    def remember_worker_processes(self) -> None:
        for index in range(len(self.nannies)):
            self.worker_process(index, timeout=0)

    def dead_nannies(self) -> list[int]:
        return [i for i, nanny in enumerate(self.nannies) if nanny.poll() is not None]

    def drain(self, timeout: float = 120) -> bool:
        """Wait until no worker runs a task (a cancelled segment still runs to its end, and saves)."""
        from distributed import Client

        def executing(dask_worker: Any) -> int:
            return len(dask_worker.state.executing) + len(dask_worker.state.long_running)

        with Client(self.address, timeout="30s", set_as_default=False) as probe:
            return wait_until(lambda: sum(probe.run(executing).values()) == 0, timeout, step=1.0)

    def stop(self) -> None:
        import psutil

        self.remember_worker_processes()
        for nanny in self.nannies:
            stop_process(nanny)
        if self.scheduler is not None:
            stop_process(self.scheduler)
        for pid in self.worker_pids:  # a worker process outlives a SIGKILLed nanny: end it too
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


class SoakClient:
    """The soak's `podracer train`: one invocation at a time, each with its own log."""

    def __init__(self, config: Path, store: Path, address: str, logs: Path, budget: str) -> None:
        self.config, self.store, self.address, self.logs, self.budget = config, store, address, logs, budget
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.proc = train(self.config, self.store, self.address, self.log(), self.budget)

    def log(self) -> Path:
        return self.logs / f"client-{self.starts}.log"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def wait(self, timeout: float) -> bool:
        """Whether it exited within `timeout` seconds."""
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def last_line(self) -> str:
        lines = self.log().read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"


# -- the soak: the history's growth ----------------------------------------------------------------

def record_digest(record: dict) -> str:
    """A record's fingerprint: equal records give equal digests (NaN included, which never equals itself)."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:20]


def history_digests(store_path: Path) -> list[str]:
    from dask_podracer.store import PodracerStore

    if not PodracerStore.exists(store_path):
        return []
    return [record_digest(r) for r in PodracerStore(store_path).read_history()]


def first_shrink(snapshots: list[list[str]]) -> str | None:
    """Where the history did not only grow: a read that does not begin with the read before it."""
    for i, (earlier, later) in enumerate(itertools.pairwise(snapshots), start=1):
        if later[: len(earlier)] != earlier:
            changed = next((j for j, (a, b) in enumerate(zip(earlier, later)) if a != b), len(later))
            return (f"history read {i + 1} ({len(later)} records) does not begin with read {i} "
                    f"({len(earlier)} records): record {changed} changed or vanished")
    return None


# -- the soak: verifying the store -----------------------------------------------------------------

def verify_store(store_path: Path, evidence: dict) -> dict:
    """Check the store as a fresh process sees it; the figures, with a list of problems (none when all holds).

    `evidence`: the soak's history reads ("history_snapshots", digests) and the segments its schedulers
    were given ("segments_submitted", keys); without it, only the store's own consistency is checked.
    """
    from dask_podracer.store import PodracerStore

    store = PodracerStore(store_path)
    history, board, state = store.read_history(), store.read_leaderboard(), store.read_run_state()
    history_keys = {r["key"] for r in history}
    published = set(store.checkpoint_keys())
    problems = duplicates(history, board)
    checked = CheckpointCheck(store)
    # a store with a retention policy deletes checkpoints that can no longer matter; their records stay
    retention = bool((state.get("retention") or {}).get("on"))
    deleted_by_retention = 0
    for record in history:
        if record.get("status") != "finished":
            continue
        if record["key"] in published:
            checked.verify(record["key"], "the checkpoint of finished history record")
        elif retention:
            deleted_by_retention += 1
        else:
            problems.append(f"finished history record {record['key']} names no published checkpoint")
    for entry in board:
        checked.verify(entry["key"], "leaderboard entry")
        if entry["key"] in checked.quarantined:
            problems.append(f"leaderboard entry {entry['key']} is quarantined")
        if entry["key"] not in history_keys:
            problems.append(f"leaderboard entry {entry['key']} has no history record (the history is written first)")
    for agent in (state.get("machine") or {}).get("agents", []):  # what a resume continues each agent from
        if agent.get("checkpoint"):
            checked.verify(agent["checkpoint"], f"agent {agent.get('id')}'s checkpoint in the run state")
    for key in sorted(published):  # those no record names too: the next resume trusts them
        checked.verify(key, "checkpoint")
    problems += checked.problems

    snapshots = [*evidence.get("history_snapshots", []), [record_digest(r) for r in history]]
    shrink = first_shrink(snapshots)
    problems += [shrink] if shrink else []
    submitted = set(evidence.get("segments_submitted", []))
    finished_keys = {r["key"] for r in history if r.get("status") == "finished"}
    if "segments_submitted" in evidence:
        # a result needs a worker, so a scheduler, to have run it; a failed or cancelled record may name a
        # submission the scheduler never received (sent as its connection died)
        unknown = sorted((finished_keys | published) - submitted)
        if unknown:
            problems.append(f"{len(unknown)} results in the store were never submitted to a soak scheduler "
                            f"(the segment log missed them): {unknown[:5]}")
    failed = [r for r in history if r.get("status") == "failed"]
    statuses = Counter(r.get("status") for r in history)
    return {
        "segments_submitted": len(submitted),
        "segments_recorded": statuses["finished"],
        "segments_recovered": sum(1 for r in history if r.get("status") == "finished" and r.get("recovered")),
        "segments_failed": statuses["failed"],
        "failures": dict(Counter(str(r.get("error") or "unknown").split(":")[0] for r in failed)),
        # a failed record whose segment did save: its result never reaches the board, nor is it recovered
        "failed_with_checkpoint": sum(1 for r in failed if r["key"] in published),
        "segments_cancelled": statuses["cancelled"],
        # failed or cancelled records of submissions that no scheduler received
        "records_never_submitted": len(history_keys - submitted) if "segments_submitted" in evidence else None,
        # submitted, yet no record and no checkpoint: its work died with a kill
        "segments_lost": len(submitted - history_keys - published),
        # published after the last table write: the next resume records them ("recovered")
        "unrecorded_checkpoints": len(published - history_keys),
        "unpublished_leftovers": len(unpublished_leftovers(store, published)),
        "retention": retention,
        "deleted_by_retention": deleted_by_retention,
        "quarantined": len(checked.quarantined),
        "quarantine_reasons": {key: quarantine_reason(store, key) for key in sorted(checked.quarantined)},
        "entries_checked": {"history": len(history), "leaderboard": len(board)},
        "checkpoints_verified": len(checked.verified),
        "history_reads": len(snapshots),
        "history_only_grew": shrink is None,
        "problems": problems,
    }


def duplicates(history: list[dict], board: list[dict]) -> list[str]:
    """A key twice in the history or on the leaderboard: one segment counted twice."""
    found = [f"{key} is in the history {n} times" for key, n in Counter(r["key"] for r in history).items() if n > 1]
    return found + [f"{key} is on the leaderboard {n} times"
                    for key, n in Counter(e["key"] for e in board).items() if n > 1]


class CheckpointCheck:
    """Loads each checkpoint once (every array read, the checksum compared), noting quarantined ones."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.verified: set[str] = set()
        self.quarantined: set[str] = set()
        self.problems: list[str] = []

    def verify(self, key: str, what: str) -> None:
        if key in self.verified or key in self.quarantined:
            return
        if self.store.is_quarantined(key):  # never loaded again by design: reported, not an error
            self.quarantined.add(key)
            return
        try:
            self.store.load_checkpoint(key)
            self.verified.add(key)
        except Exception as e:  # noqa: BLE001 - every failure is a finding to report
            self.problems.append(f"{what} {key} does not load: {type(e).__name__}: {e}")


def unpublished_leftovers(store: Any, published: set[str]) -> set[str]:
    """Checkpoint groups on disk that were never published (a worker died mid-save): allowed garbage, which
    `checkpoint_keys()` does not list and a rerun of the segment replaces. Not those a retention policy
    unpublished on its way to deleting them (a store that has one lists them)."""
    folder = Path(store.url) / "checkpoints"
    on_disk = {p.name for p in folder.iterdir() if p.is_dir() and _is_key(p.name)} if folder.is_dir() else set()
    being_deleted = set(store.deleted_checkpoints()) if hasattr(store, "deleted_checkpoints") else set()
    return on_disk - published - being_deleted


def _is_key(name: str) -> bool:
    from dask_podracer.store.format import validate_key

    try:
        validate_key(name)
        return True
    except ValueError:
        return False


def quarantine_reason(store: Any, key: str) -> str:
    """Why `key` was quarantined, as the store says when asked to load it."""
    try:
        store.load_checkpoint(key)
    except Exception as e:  # noqa: BLE001 - CheckpointNotFound, naming the reason
        return str(e)
    return "(loads: not quarantined)"


def verify_in_fresh_process(store: Path, evidence: Path) -> dict:
    """`--verify` in a new interpreter: nothing the soak's own process cached or holds open counts."""
    run = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--verify", str(store), "--evidence",
                          str(evidence)], capture_output=True, text=True, timeout=1800, check=False)
    lines = run.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"problems": [f"the verifier exited {run.returncode} without a report: {run.stderr.strip()[-2000:]}"]}


def verify_command(args: argparse.Namespace) -> int:
    evidence = json.loads(Path(args.evidence).read_text()) if args.evidence else {}
    from dask_podracer.store import PodracerStore, StoreError

    if not PodracerStore.exists(args.verify):
        print(f"chaos: error: --verify {args.verify}: no podracer store there", file=sys.stderr)
        return 2
    try:
        report = verify_store(Path(args.verify), evidence)
    except StoreError as e:  # a damaged table: the verdict, in the report's one JSON line, not a traceback
        report = {"problems": [f"the store does not read: {e}"]}
    print(json.dumps(report))
    return 0 if not report["problems"] else 1


# -- the soak itself -------------------------------------------------------------------------------

class Soak:
    """Kill, restart, read the history; at the end, stop and verify. `run()` returns the figures."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.logs = Path(args.logs) if args.logs else work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.store = Path(args.store).resolve() if args.store else work / "soak.zarr"
        if self.store.exists():  # its earlier segments were submitted to no scheduler the soak's log heard
            raise SystemExit(f"chaos.py: --store {self.store} exists; a soak starts a store of its own")
        self.segment_log = self.logs / "segments-submitted.txt"
        self.segment_log.unlink(missing_ok=True)  # a --logs folder of an earlier soak
        os.environ[SEGMENT_LOG_ENV] = str(self.segment_log)  # inherited by every scheduler the soak starts
        config = work / "soak.toml"
        config.write_text(CONFIG.format(segments=0))  # no segment limit: the budget outlasts the soak
        every = tuple(args.kill_every) if args.kill_every else (30.0, 90.0)
        if len(every) != 2 or not 0 < every[0] <= every[1]:
            raise SystemExit(f"chaos.py: --kill-every takes MIN MAX seconds with 0 < MIN <= MAX, got {every}")
        self.schedule = KillSchedule(args.seed, every, args.kind_order, args.workers)
        self.cluster = SoakCluster(free_port(), args.workers, work / "scratch", self.logs)
        budget = f"{int(args.soak) * 2 + 60}m"  # the budget runs on across restarts: it must outlast the soak
        self.client = SoakClient(config, self.store, self.cluster.address, self.logs, budget)
        self.kills: Counter[str] = Counter({kind: 0 for kind in KINDS})
        self.snapshots: list[list[str]] = []
        self.problems: list[str] = []
        self.said_lost_scheduler = 0
        self.said_cannot_reach_scheduler = 0
        self.workers_killed_after_scheduler = 0
        self.started = time.monotonic()

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {line}", flush=True)

    def run(self) -> dict:
        (self.work / "scratch").mkdir(exist_ok=True)
        try:
            self.cluster.start()
            self.client.start()
            self.started = time.monotonic()  # the soak's minutes count from the first client
            self.say(f"cluster at {self.cluster.address} ({self.args.workers} workers), store {self.store}, "
                     f"logs {self.logs}")
            self.kill_until_the_end()
            minutes = (time.monotonic() - self.started) / 60
            live = self.wait_for_a_fresh_segment()
            self.end_client()
            self.cluster.drain()
        finally:
            if self.client.running():
                self.client.kill()
            self.cluster.stop()
        self.snapshot()
        report = self.verify()
        return self.figures(minutes, live, report)

    def kill_until_the_end(self) -> None:
        end = self.started + self.args.soak * 60
        while True:
            next_kill = time.monotonic() + self.schedule.interval()
            enough = sum(self.kills.values()) >= self.args.min_kills
            if enough and next_kill >= end:
                self.watch_until(end)
                return
            self.watch_until(next_kill)
            kind = self.schedule.kind()
            getattr(self, f"kill_{kind}")()
            self.kills[kind] += 1
            self.snapshot()

    def watch_until(self, moment: float) -> None:
        """Sleep until `moment`, restarting whatever died that the soak did not kill."""
        while time.monotonic() < moment:
            time.sleep(min(1.0, max(0.0, moment - time.monotonic())))
            self.restart_the_unprompted()

    def restart_the_unprompted(self) -> None:
        """Restart a client or a worker that exited without being killed: each is a problem."""
        if not self.client.running():
            self.problems.append(f"client {self.client.starts} exited {self.client.proc.returncode} unprompted: "
                                 f"{self.client.last_line()}")
            self.say(f"PROBLEM: {self.problems[-1]}; restarting it")
            self.client.start()
        for index in self.cluster.dead_nannies():
            self.problems.append(f"worker chaos-{index}'s nanny exited unprompted")
            self.say(f"PROBLEM: {self.problems[-1]}; restarting it")
            self.cluster.nannies[index] = start_worker(self.cluster.address, index, self.cluster.scratch,
                                                       self.logs / f"worker-{index}.log")

    def kill_worker(self) -> None:
        index = self.schedule.worker()
        pid = self.cluster.worker_process(index)
        if pid is None:
            self.problems.append(f"worker chaos-{index} had no worker process to kill for 30s")
            self.say(f"PROBLEM: {self.problems[-1]}")
            return
        os.kill(pid, signal.SIGKILL)
        self.say(f"killed worker chaos-{index} (pid {pid}); its nanny restarts it")

    def kill_client(self) -> None:
        self.client.kill()
        self.say(f"killed client {self.client.starts}; starting client {self.client.starts + 1} on the same store")
        self.client.start()

    def kill_scheduler(self) -> None:
        leftovers = self.cluster.kill_scheduler()
        self.say(f"killed the scheduler; the workers left ({leftovers} had to be killed)")
        self.workers_killed_after_scheduler += leftovers
        if not self.client.wait(timeout=90):
            self.problems.append(f"client {self.client.starts} still ran 90s after its scheduler died")
            self.client.kill()
        elif "lost the Dask scheduler" in self.client.last_line():
            self.said_lost_scheduler += 1
        elif "cannot reach the Dask scheduler" in self.client.last_line():  # killed while it was connecting
            self.said_cannot_reach_scheduler += 1
        else:
            self.problems.append(f"client {self.client.starts} did not say it lost the scheduler: "
                                 f"{self.client.last_line()}")
        self.say(f"client {self.client.starts} exited: {self.client.last_line()}")
        self.cluster.start()
        self.client.start()
        self.say(f"scheduler and workers restarted on port {self.cluster.port}; client {self.client.starts} started")

    def snapshot(self) -> None:
        self.snapshots.append(history_digests(self.store))
        shrink = first_shrink(self.snapshots[-2:])
        if shrink:
            self.say(f"PROBLEM: {shrink}")

    def wait_for_a_fresh_segment(self, timeout: float = 300) -> bool:
        """Whether the client records a segment it trained after the last kill: the run still makes progress."""
        from dask_podracer.store import PodracerStore

        known = len(self.snapshots[-1]) if self.snapshots else 0

        def fresh() -> bool:
            self.restart_the_unprompted()
            if not PodracerStore.exists(self.store):
                return False
            new = PodracerStore(self.store).read_history()[known:]
            return any(r.get("status") == "finished" and not r.get("recovered") for r in new)

        live = wait_until(fresh, timeout, step=1.0)
        if not live:
            self.problems.append(f"no segment was recorded within {timeout:.0f}s after the last kill")
        self.say("a segment trained after the last kill is recorded" if live else f"PROBLEM: {self.problems[-1]}")
        return live

    def end_client(self) -> None:
        self.client.proc.send_signal(signal.SIGINT)  # it cancels its segments and writes its tables
        if not self.client.wait(timeout=60):
            self.problems.append(f"client {self.client.starts} still ran 60s after SIGINT")
            self.client.kill()
        self.say(f"client {self.client.starts} interrupted: {self.client.last_line()}")

    def verify(self) -> dict:
        evidence = self.work / "evidence.json"
        evidence.write_text(json.dumps({"history_snapshots": self.snapshots,
                                        "segments_submitted": sorted(submitted_segments(self.segment_log))}))
        return verify_in_fresh_process(self.store, evidence)

    def figures(self, minutes: float, live: bool, report: dict) -> dict:
        problems = self.problems + report.get("problems", [])
        return {
            "minutes": round(minutes, 1), "wall_minutes": round((time.monotonic() - self.started) / 60, 1),
            "seed": self.args.seed, "kill_every": list(self.schedule.every),
            "kind_order": self.args.kind_order, "workers": self.args.workers,
            "kills": dict(self.kills),
            "client_starts": self.client.starts, "client_restarts": self.client.starts - 1,
            "said_lost_scheduler": self.said_lost_scheduler,
            "said_cannot_reach_scheduler": self.said_cannot_reach_scheduler,
            "workers_killed_after_scheduler_death": self.workers_killed_after_scheduler,
            **{k: v for k, v in report.items() if k != "problems"},
            "progress_after_last_kill": live,
            "problems": problems,
            "verdict": "pass" if not problems else "FAIL",
        }


def print_figures(figures: dict) -> None:
    kills = figures["kills"]
    entries = figures.get("entries_checked", {})
    lines = [
        f"minutes of kills: {figures['minutes']} (all told, ending and verifying included: {figures['wall_minutes']})",
        f"kills: {kills['worker']} worker, {kills['client']} client, {kills['scheduler']} scheduler",
        (f"client restarts: {figures['client_restarts']}; of the {kills['scheduler']} clients whose scheduler was "
         f"killed, {figures['said_lost_scheduler']} said 'lost the Dask scheduler', "
         f"{figures['said_cannot_reach_scheduler']} (still connecting) 'cannot reach the Dask scheduler'"),
        f"segments submitted to the scheduler: {figures.get('segments_submitted')}",
        (f"segments recorded (finished): {figures.get('segments_recorded')} "
         f"({figures.get('segments_recovered')} recovered by a resume)"),
        (f"segments failed: {figures.get('segments_failed')} {figures.get('failures')}; "
         f"cancelled: {figures.get('segments_cancelled')}"),
        f"segments lost (submitted; no record, no checkpoint): {figures.get('segments_lost')}",
        f"records of submissions no scheduler received: {figures.get('records_never_submitted')}",
        (f"failed records whose checkpoint was saved (a result no resume recovers): "
         f"{figures.get('failed_with_checkpoint')}"),
        f"checkpoints no record names yet (the next resume records them): {figures.get('unrecorded_checkpoints')}",
        f"unpublished leftovers (crash mid-save): {figures.get('unpublished_leftovers')}",
        (f"retention policy: {'on' if figures.get('retention') else 'off'}; checkpoints of finished records it "
         f"deleted: {figures.get('deleted_by_retention')}"),
        f"quarantined: {figures.get('quarantined')}",
        f"entries checked: {entries.get('history')} history records, {entries.get('leaderboard')} leaderboard entries",
        f"checkpoints verified (loaded, checksum ok): {figures.get('checkpoints_verified')}",
        f"history reads: {figures.get('history_reads')}, only grew: {figures.get('history_only_grew')}",
        f"progress after the last kill: {figures['progress_after_last_kill']}",
    ]
    lines += [f"PROBLEM: {p}" for p in figures["problems"]]
    lines.append(f"verdict: {figures['verdict']}")
    print("\n".join(lines))
    print(json.dumps(figures))


def soak(args: argparse.Namespace) -> int:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # started with `&` or nohup from a script: SIGINT is ignored here, and an ignored signal is inherited,
        # so the SIGINT that ends the last client would do nothing. Handled signals are reset in a child.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="podracer-soak-") as tmp:
        figures = Soak(args, Path(tmp)).run()
    print_figures(figures)
    return 0 if figures["verdict"] == "pass" else 1


def parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--segments", type=int, default=12, help="segments the resumed client runs (the check)")
    p.add_argument("--kill-every", type=float, nargs="+", metavar="SECONDS",
                   help="the check: seconds between worker kills (10); the soak: MIN MAX seconds between kills "
                        "(30 90)")
    p.add_argument("--client-kill-after", type=int, default=2, metavar="RECORDS",
                   help="SIGKILL the client once the store holds this many segment records (the check)")
    p.add_argument("--store", help="store directory (default: a temporary one)")
    p.add_argument("--soak", type=float, metavar="MINUTES", help="soak: kill at random for this many minutes")
    p.add_argument("--seed", type=int, default=0, help="soak: seed of the kill schedule")
    p.add_argument("--kind-order", choices=["random", "rounds"], default="random",
                   help="soak: each kill's kind drawn at random, or from seeded shuffles of all three kinds")
    p.add_argument("--min-kills", type=int, default=0, help="soak: go past MINUTES until this many kills are made")
    p.add_argument("--logs", metavar="DIR", help="soak: keep the processes' logs here (default: a temporary folder)")
    p.add_argument("--verify", metavar="STORE", help="verify a store as the soak does at its end, and exit")
    p.add_argument("--evidence", metavar="FILE", help="with --verify: the soak's history reads and submitted segments")
    return p


def bad_argument(args: argparse.Namespace) -> str | None:
    """What is wrong with the first argument that cannot work, or None: said before any process starts."""
    for name, low in (("workers", 1), ("segments", 1), ("client_kill_after", 1), ("min_kills", 0)):
        if getattr(args, name) < low:
            return f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}"
    if args.soak is not None and not args.soak > 0:
        return f"--soak must be a positive number of minutes, got {args.soak}"
    every, wanted = args.kill_every, ("MIN MAX", 2) if args.soak is not None else ("SECONDS", 1)
    if every is not None and (len(every) != wanted[1] or not all(s > 0 for s in every) or every != sorted(every)):
        return (f"--kill-every takes {wanted[0]} ({'the soak' if args.soak is not None else 'the check'}: positive "
                f"seconds{', MIN <= MAX' if wanted[1] == 2 else ''}), got {' '.join(map(str, every))}")
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    wrong = bad_argument(args)
    if wrong:
        print(f"chaos: error: {wrong}", file=sys.stderr)
        return 2
    if args.verify:
        return verify_command(args)
    if args.soak is not None:
        return soak(args)
    return chaos_check(args)


if __name__ == "__main__":
    sys.exit(main())
