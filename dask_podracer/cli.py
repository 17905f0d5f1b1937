"""`podracer`: train a tournament, show a store's leaderboard, check an env. A thin front over the library."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from dask_podracer import __version__  # the package's __init__ holds only the version: it loads nothing

if TYPE_CHECKING:  # the CLI imports the library lazily, so `podracer --help` loads neither torch nor zarr
    from dask_podracer.store.records import LeaderboardEntry

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM


class UserError(Exception):
    """Something the user can fix; printed as one line, no traceback."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (`timeout`, systemd, Kubernetes, a batch scheduler's stop), raised where Ctrl-C raises, so a run
    stops as it does for Ctrl-C: its segments cancelled, its state written as interrupted, its cluster closed."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    import_from_working_directory()
    _replace_unencodable_output()
    try:
        with _sigterm_stops_the_command():
            return args.func(args)
    except UserError as e:
        print(f"podracer: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        what = "terminated" if isinstance(e, Terminated) else "interrupted"
        print(f"podracer: {what}{_what_the_store_keeps(e)}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    except BrokenPipeError as e:  # `podracer leaderboard STORE | head -1`: the reader has what it wanted
        # Python's advice (the signal module's docs): stdout to devnull, so the flush at exit raises no second one
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if args.command == "train":  # a run cut short says so: its reader may have died rather than had enough
            print(f"podracer: stopped: the reader of its output exited (a closed pipe){_what_the_store_keeps(e)}",
                  file=sys.stderr)
        return 1


def _what_the_store_keeps(stopped: BaseException) -> str:
    """The end of the line of a command stopped early. `train` notes on the exception whether its run had
    started: one stopped before (while its cluster started, or its envs were checked) recorded nothing."""
    started = getattr(stopped, "run_started", None)
    if started is None:  # not a run: `leaderboard`, `status` and the rest only read
        return ""
    return "; the store keeps everything recorded so far" if started else " before the run started: nothing recorded"


def _replace_unencodable_output() -> None:
    """stdout writes what its encoding lacks as escapes (`\\xe9`), as stderr does: a store path or an error
    with an accent, under `PYTHONIOENCODING=ascii` or a non-UTF-8 locale, must not turn a finished run into a
    traceback and exit status 1."""
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")


@contextlib.contextmanager
def _sigterm_stops_the_command() -> Iterator[None]:
    """Within it, SIGTERM raises `Terminated`; the handler before it is restored after it (a script or a test
    that calls `main` keeps its own). Off the main thread Python sets no handler: its process's handling holds."""
    def terminate(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def import_from_working_directory() -> None:
    """Let an env named by import path ("my_envs:Arm") come from the directory `podracer` runs in, as with
    `python -m`: a console script's own directory is first on sys.path, not this one. The embedded
    cluster's worker processes start with this sys.path."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse's errors in one line, as every other error of `podracer`: the usage block is behind --help.

    A value that starts with a minus and a digit (`--budget -5s`, `--top -3`) is given to its option, so the
    option's own check names what is wrong with it; argparse alone would take it for an unknown option and say
    the option is missing its value."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._attach_negative_values(args), namespace)

    def _attach_negative_values(self, args: list[str]) -> list[str]:
        attached: list[str] = []
        for arg in args:
            action = self._option_string_actions.get(attached[-1]) if attached else None
            if (action is not None and action.nargs is None and action.option_strings
                    and re.match(r"-[0-9.]", arg) and arg not in self._option_string_actions):
                attached[-1] = f"{attached[-1]}={arg}"
            else:
                attached.append(arg)
        return attached


def _parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="podracer", description="Population training of deep-RL agents on Dask.")
    parser.add_argument("--version", action="version", version=f"podracer {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser("train", help="run or resume a tournament", description=(
        "Run a tournament from a TOML config, on an embedded LocalCluster or an existing Dask cluster. "
        "Running it again on the same store resumes it."))
    train.add_argument("config", help="TOML config file, e.g. workflows/configs/pendulum.toml")
    train.add_argument("--store", metavar="PATH_OR_URL", help="Zarr store (default: the config's run.store)")
    train.add_argument("--scheduler", metavar="ADDRESS",
                       help="connect to this Dask scheduler instead of starting a LocalCluster")
    train.add_argument("--tls-ca-file", metavar="PEM", help="CA certificate of a TLS-secured scheduler")
    train.add_argument("--tls-cert", metavar="PEM", help="this client's certificate (with --scheduler tls://...)")
    train.add_argument("--tls-key", metavar="PEM", help="this client's private key")
    train.add_argument("--budget", metavar="DURATION",
                       help="wall-clock budget, e.g. 90s, 10m, 1h (overrides run.budget)")
    train.add_argument("--json", metavar="SUMMARY", help="write a run summary as JSON to this file")
    train.add_argument("--quiet", action="store_true", help="print only the final summary")
    train.add_argument("--tensorboard", metavar="DIR",
                       help="write TensorBoard event files here as the run goes (overrides logging.tensorboard)")
    train.add_argument("--set", action="extend", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                       help="change config values, each VALUE a TOML value or a plain word, e.g. --set "
                            "hparams.gamma=0.97 tournament.perturb='[\"actor_lr\"]' run.env=gym:Hopper-v5")
    train.set_defaults(func=_train)

    board = commands.add_parser("leaderboard", help="show the ranked leaderboard of a store",
                                description="Print the leaderboard of a tournament store.")
    board.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    board.add_argument("--json", action="store_true", help="print the entries as a JSON list")
    board.add_argument("--top", type=int, default=0, help="show only the N best entries (default 0: all)")
    board.set_defaults(func=_leaderboard)

    plot = commands.add_parser("plot", help="write the learning curves of a store",
                               description="Write reward vs wall-clock time and reward vs env steps, per agent and "
                                           "best so far, from a store's history: .html (Bokeh) or .png (matplotlib).")
    plot.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    plot.add_argument("--out", required=True, metavar="FILE", help="curves.html or curves.png")
    plot.add_argument("--view", choices=PLOT_VIEWS, default="curves", help=(
        "curves (default): reward vs time and vs env steps; lineage: who started from whom, exploits and fresh "
        "starts marked; hparams: each tuned hyper-parameter over wall-clock per agent, and score against it; "
        "population: lineage and hparams; all: everything"))
    plot.set_defaults(func=_plot)

    status = commands.add_parser("status", help="is a run going, its best score, segments, budget, last error",
                                 description="One screen about a store, for a scheduled workflow's owner: whether "
                                             "a run is going (and since when), the best score, segments finished "
                                             "and failed, the budget spent and left, and the last error.")
    status.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    status.add_argument("--json", action="store_true", help="print the status as one JSON object")
    status.set_defaults(func=_status)

    tensorboard = commands.add_parser("tensorboard", help="write a store's history as TensorBoard event files",
                                      description="Write every finished segment of a store to TensorBoard event "
                                                  "files under DIR/<run name>/agent-NNN, as [logging] tensorboard "
                                                  "does while a run goes. Needs the tensorboard extra.")
    tensorboard.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    tensorboard.add_argument("--out", required=True, metavar="DIR", help="TensorBoard log directory")
    tensorboard.add_argument("--name", metavar="RUN", help="run name (default: the run.name the store records, "
                             "else the store's name without .zarr)")
    tensorboard.set_defaults(func=_tensorboard)

    lineage = commands.add_parser("lineage", help="print a checkpoint's family tree",
                                  description="Print the ancestors of KEY from the first segment of its lineage, "
                                              "then all its descendants, with the hyper-parameters each changed.")
    lineage.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    lineage.add_argument("key", metavar="KEY", help="a checkpoint key, e.g. from `podracer leaderboard`")
    lineage.set_defaults(func=_lineage)

    gc = commands.add_parser("gc", help="delete the checkpoints a store no longer needs", description=(
        "Apply the retention policy to a store no run is using (a store whose run is going is refused, unless "
        "--dry-run): delete every checkpoint that is not on the "
        "leaderboard, an agent's latest, one of the newest K of a live agent, pinned, or read by a kept one's "
        "shared replay; and finish deletions a crash cut off. History records stay, so lineage and plots are "
        "unchanged. Works on stores written before retention existed."))
    gc.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    gc.add_argument("--keep-per-agent", type=int, metavar="K",
                    help="newest checkpoints each live agent keeps (default: the run's store.keep_per_agent, else 2)")
    gc.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    gc.set_defaults(func=_gc)

    pin = commands.add_parser("pin", help="keep a checkpoint whatever the retention policy says",
                              description="Pin KEY so that retention (a run's, or `podracer gc`) never deletes it; "
                                          "--unpin releases it.")
    pin.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    pin.add_argument("key", metavar="KEY", help="a checkpoint key")
    pin.add_argument("--unpin", action="store_true", help="release the pin instead")
    pin.set_defaults(func=_pin)

    check = commands.add_parser("check-env", help="check that an env keeps the VecEnv contract", description=(
        "Build an env (a name, or the env and env_kwargs of a TOML config) and step it with random actions "
        "through the checks of dask_podracer.envs.check_vec_env: spaces, shapes, dtypes, device, seeding, "
        "auto-reset and final observations. Exit 0 when it passes, 1 when a check fails."))
    check.add_argument("env", metavar="ENV_OR_CONFIG",
                       help="an env name (Pendulum-v1, gym:Hopper-v5, my_envs:Arm) or a config file (.toml)")
    check.add_argument("--env-kwargs", metavar="JSON", help="keyword arguments of the env, as a JSON object")
    check.add_argument("--num-envs", type=int, default=8, help="envs in the batch (default 8)")
    check.add_argument("--device", default="cpu", help="torch device: cpu (the default), cuda, cuda:N or auto")
    check.add_argument("--seed", type=int, default=0, help="seed of the env and the random actions")
    check.add_argument("--max-steps", type=int, default=0,
                       help="steps to check (default: the time limit + 1, at most 10000)")
    check.set_defaults(func=_check_env)
    return parser


def _train(args: argparse.Namespace) -> int:
    # Imports here, not at the top, so `podracer --help` answers without loading torch and dask.
    from dask_podracer.config import ConfigError, load_config, parse_duration

    for option, value in (("--store", args.store), ("--tensorboard", args.tensorboard), ("--json", args.json)):
        if value is not None and not value.strip():  # an empty value would fall back to the config's silently
            raise UserError(f"{option} is empty: give a path")
    try:
        if args.budget is not None:
            parse_duration(args.budget, "--budget")  # named as the user wrote it, not as run.budget
        config = load_config(args.config, args.set)
        overrides = {k: v for k, v in {"store": args.store, "budget": args.budget}.items() if v is not None}
        if overrides:
            config = config.replace(**overrides)
        if args.tensorboard is not None:
            config = config.with_logging(tensorboard=args.tensorboard)
    except ConfigError as e:
        raise UserError(str(e)) from None
    if args.json:
        _output_file(args.json, "--json")  # before the run, not after it
    tls = _tls_files(args)
    started = threading.Event()
    try:
        summary = _run(config, args.scheduler, quiet=args.quiet, tls=tls, started=started)
    except (KeyboardInterrupt, BrokenPipeError) as e:  # Ctrl-C, SIGTERM, a closed pipe: `main` says which
        e.run_started = started.is_set()
        _stopped_early(args, getattr(e, "run_summary", None), stdout_open=not isinstance(e, BrokenPipeError))
        raise
    except UserError as e:  # a scheduler lost during the run: what it did before is summarised too
        _stopped_early(args, getattr(e, "run_summary", None), stdout_open=True)
        raise
    _print_summary(summary)
    if args.json:  # after the summary above: a file that cannot be written after all loses none of it
        _write_summary(args.json, summary.to_dict())
    if summary.stop_reason == "failing":
        from dask_podracer.terminal_text import printable

        print(f"podracer: error: segments keep failing; the last one: {printable(summary.last_error or '')}",
              file=sys.stderr)
        return 1
    return 0


def _print_summary(summary) -> None:
    cancelled = summary.segments_cancelled
    at = " at the budget" if summary.stop_reason == "budget" else ""
    print(f"stopped: {summary.stop_reason} after {summary.wall_seconds:.1f}s, "
          f"{_count(summary.segments_completed, 'segment')} ({summary.segments_failed} failed"
          f"{f', {cancelled} cancelled{at}' if cancelled else ''}), {summary.env_steps:,} env steps")
    if cancelled and summary.stop_reason == "budget" and not summary.segments_completed + summary.segments_failed:
        # a run whose budget ended before any segment did said only "0 segments"
        print("no segment ended within the budget: one segment takes longer than it (segment.env_steps or "
              "segment.seconds, and the agents' hparams), so give a longer budget or shorter segments")
    print(f"store: {summary.store}")
    print(format_leaderboard(summary.leaderboard[:5]))


def _stopped_early(args: argparse.Namespace, summary, stdout_open: bool) -> None:
    """A run stopped by Ctrl-C, SIGTERM, a closed pipe or an error during its loop (a lost scheduler, a store that
    cannot be written): its summary as a finished run's is (printed unless stdout is gone, and in `--json`, stop
    reason "interrupted"), when it got as far as having one. A summary file that cannot be written is said on
    stderr, beside what `main` reports."""
    if summary is None:  # stopped before its loop began, or again while it stopped
        return
    if stdout_open:
        with contextlib.suppress(BrokenPipeError):
            _print_summary(summary)
    if args.json:
        try:
            _write_summary(args.json, summary.to_dict())
        except UserError as e:
            print(f"podracer: error: {e}", file=sys.stderr)


def _tls_files(args: argparse.Namespace):
    files = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if not any(files):
        return None
    if not all(files):
        raise UserError("--tls-ca-file, --tls-cert and --tls-key go together")
    if not args.scheduler:
        raise UserError("--tls-ca-file, --tls-cert and --tls-key are for a TLS-secured scheduler: give --scheduler "
                        "tls://HOST:PORT too (the embedded cluster does not use them)")
    from dask_podracer.population import TLSFiles

    return TLSFiles(*files)


def _run(config, scheduler: str | None, quiet: bool, tls=None,
         started: threading.Event | None = None):
    """`started` is set once the run begins (its cluster is up and its store checked)."""
    from dask_podracer.config import ConfigError
    from dask_podracer.population import ClusterError, run_tournament
    from dask_podracer.store import StoreError

    def on_start(client) -> None:
        if started is not None:
            started.set()
        if scheduler is None:
            _say(quiet, f"embedded LocalCluster: {_count(len(client.cluster.workers), 'worker')}, "
                        f"dashboard {client.dashboard_link}")
        else:
            _say(quiet, f"cluster at {scheduler}: dashboard {client.dashboard_link}")

    printer = None if quiet else _progress_printer(config.run.budget_seconds)
    try:
        return run_tournament(config, on_progress=printer, scheduler=scheduler, tls=tls, on_start=on_start)
    except (ConfigError, StoreError, ClusterError) as e:
        raise _carrying_summary(UserError(str(e)), e) from None
    except (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError) as e:
        raise UserError(f"cannot use {e.filename or 'a file'!r}: {e.strerror or e}") from None  # not the scheduler's
    except OSError as e:  # distributed's CommClosedError among them: the scheduler went while the run started
        if isinstance(e, BrokenPipeError) and _stdout_closed():
            raise  # the progress lines' reader exited (`| head`, a quit pager, a killed tee): not the scheduler
        first = str(e).splitlines()[0] if str(e) else ""
        raise _carrying_summary(UserError(f"lost the Dask scheduler ({type(e).__name__}: {first}); everything "
                                          f"recorded is in the store: run again on a cluster to resume"), e) from None


def _carrying_summary(error: UserError, cause: BaseException) -> UserError:
    """`error`, with the `run_summary` the run left on `cause` when it had begun (the orchestrator notes it)."""
    error.run_summary = getattr(cause, "run_summary", None)
    return error


def _stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (poll says so: an error, or hung up)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no file descriptor (a captured stdout)
        return False


def _output_file(path: str, option: str) -> Path:
    """`path`, if a file can be written there; a UserError naming the option otherwise."""
    out = Path(path)
    if out.is_dir():
        raise UserError(f"{option} {path}: is a directory; give a file name")
    if not out.parent.is_dir():
        raise UserError(f"{option} {path}: there is no directory {str(out.parent)!r} to write it in")
    _try_writing(out, option)
    return out


def _try_writing(out: Path, option: str) -> None:
    """Open `out` for writing, and remove it again if it was not there: a read-only directory (or root's
    /proc) is named now, not after a run of hours. An existing file is opened to append, so it is kept."""
    existed = out.exists()
    try:
        with open(out, "a"):
            pass
    except OSError as e:
        raise UserError(f"{option} {out}: cannot write it: {e.strerror or e}") from None
    if not existed:
        out.unlink(missing_ok=True)


def _write_summary(path: str, summary: dict[str, Any]) -> None:
    try:
        Path(path).write_text(json.dumps(summary, indent=2) + "\n")
    except OSError as e:  # the disk filled, the directory went: the summary printed above and the store stay
        raise UserError(f"--json {path}: cannot write the summary: {e.strerror or e}") from None


def _say(quiet: bool, line: str) -> None:
    if not quiet:
        print(line, flush=True)


def _progress_printer(budget_seconds: float):
    """A bar redrawn in place on a terminal, one line per segment in a log (see progress.py)."""
    from dask_podracer.progress import ProgressPrinter

    return ProgressPrinter(budget_seconds)


def _leaderboard(args: argparse.Namespace) -> int:
    from dask_podracer.store import PodracerStore, StoreError

    if args.top < 0:
        raise UserError(f"--top must be >= 0 (0 shows every entry), got {args.top}")
    try:
        entries = PodracerStore(args.store).read_leaderboard()
    except StoreError as e:
        raise UserError(str(e)) from None
    if args.top > 0:
        entries = entries[: args.top]
    if args.json:
        print(json.dumps(entries, indent=2))
    else:
        print(format_leaderboard(entries))
    return 0


PLOT_VIEWS = ("curves", "lineage", "hparams", "population", "all")


def _plot(args: argparse.Namespace) -> int:
    from dask_podracer.dashboard import write_plot, write_population_plot
    from dask_podracer.store import PodracerStore, StoreError

    views = {"curves": (), "lineage": ("lineage",), "hparams": ("hparams",), "population": ("lineage", "hparams"),
             "all": ("curves", "lineage", "hparams")}[args.view]
    _output_file(args.out, "--out")
    try:
        store = PodracerStore(args.store)
        title = Path(store.url).name
        if views:
            out = write_population_plot(store.read_history(), args.out, views, title=title)
        else:
            out = write_plot(store.read_history(), args.out, title=title)
    except (StoreError, ValueError) as e:
        raise UserError(str(e)) from None
    print(f"wrote {out}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from dask_podracer.status import format_status, read_status
    from dask_podracer.store import StoreError

    try:
        status = read_status(args.store)
    except StoreError as e:
        raise UserError(str(e)) from None
    print(json.dumps(status.to_dict(), indent=2) if args.json else format_status(status))
    return 0


def _tensorboard(args: argparse.Namespace) -> int:
    from dask_podracer.config import ConfigError, LoggingConfig, check_run_name
    from dask_podracer.store import PodracerStore, StoreError
    from dask_podracer.tracking import TrackingError, default_run_name, open_trackers

    try:
        if args.name is not None:
            check_run_name(args.name, "--name")  # one directory under --out, never a way out of it
        store = PodracerStore(args.store)
        history = store.read_history()
        # the name a live run logged under ([logging]), so an export lands beside it; older stores: the store's
        name = args.name or store.read_run_state().get("name") or default_run_name(store.url)
        target = Path(args.out) / name
        if target.is_dir() and any(target.rglob("events.out.tfevents.*")):
            raise UserError(f"{target} already holds TensorBoard event files (a live run's, or an earlier "
                            f"export's): choose another --out or --name, or remove it")
        with open_trackers(LoggingConfig(tensorboard=args.out), name, store.url) as trackers:
            trackers.record(history)  # agent by agent: one event file each
    except (StoreError, TrackingError, ConfigError) as e:
        raise UserError(str(e)) from None
    finished = sum(r.get("status") == "finished" for r in history)
    agents = len({r.get("agent") for r in history if r.get("status") == "finished"})
    print(f"wrote {_count(finished, 'segment')} of {_count(agents, 'agent')} to {target} "
          f"(tensorboard --logdir {args.out})")
    return 0


def _lineage(args: argparse.Namespace) -> int:
    from dask_podracer.lineage import family_tree
    from dask_podracer.store import PodracerStore, StoreError

    try:
        store = PodracerStore(args.store)
        print(family_tree(store.read_history(), args.key, stored=set(store.checkpoint_keys())))
    except (StoreError, KeyError) as e:
        raise UserError(str(e).strip('"')) from None
    return 0


def _gc(args: argparse.Namespace) -> int:
    from dask_podracer.config import ConfigError, StoreConfig
    from dask_podracer.population.retention import ReplaySources, checkpoints_to_keep, collect, holders_at_rest
    from dask_podracer.population.run_lease import check_no_run_going
    from dask_podracer.store import PodracerStore, StoreError

    if args.keep_per_agent is not None and args.keep_per_agent < 1:
        raise UserError(f"--keep-per-agent must be >= 1 (an agent trains on from its newest checkpoint), "
                        f"got {args.keep_per_agent}")
    try:
        store = PodracerStore(args.store)
        # held from before it reads what to keep until it has deleted: a run started meanwhile is refused, rather
        # than resuming from what goes (a local store; a remote one has the run state's lease only)
        with contextlib.nullcontext() if args.dry_run else store.hold_run("podracer gc"):
            state = store.read_run_state()
            if not args.dry_run:  # the run's own retention collects as it goes, knowing which parents are in flight
                check_no_run_going(args.store, state, remedy="gc deletes checkpoints that its running segments may "
                                   "start from: run it once the run has ended (--dry-run only lists them)")
            recorded = state.get("retention", {})
            keep_per_agent = args.keep_per_agent or recorded.get("keep_per_agent") or StoreConfig.keep_per_agent
            keep = checkpoints_to_keep(holders_at_rest(store), keep_per_agent, ReplaySources(store))
            candidates = [key for key in store.checkpoint_keys() if not store.is_quarantined(key)]
            done = collect(store, keep, candidates, dry_run=args.dry_run)
    except (StoreError, ConfigError) as e:
        raise UserError(str(e)) from None
    verb = "would remove" if args.dry_run else "removed"
    for key, size in done.deleted:
        print(f"{verb} {key} ({size:,} bytes)")
    for key, size in done.finished:
        print(f"{verb} {key} ({size:,} bytes; its deletion was cut off earlier)")
    removed = len(done.deleted) + len(done.finished)
    print(f"{verb} {removed} checkpoints, {done.bytes_freed:,} bytes ({done.bytes_freed / 2**20:.1f} MiB); kept "
          f"{done.kept} (keep_per_agent {keep_per_agent})")
    return 0


def _pin(args: argparse.Namespace) -> int:
    from dask_podracer.store import PodracerStore, StoreError

    try:
        store = PodracerStore(args.store)
        if args.unpin and args.key not in store.pinned():
            print(f"{args.key} was not pinned")  # nothing to do, and nothing wrong: the outcome is what was asked
            return 0
        if args.unpin:
            store.unpin(args.key)
        else:
            store.pin(args.key, "pinned by `podracer pin`")
    except (StoreError, ValueError) as e:
        raise UserError(str(e)) from None
    print(f"{'unpinned' if args.unpin else 'pinned'} {args.key}")
    return 0


def _check_env(args: argparse.Namespace) -> int:
    from dask_podracer.config import ConfigError, load_config
    from dask_podracer.envs import VecEnvCheckError, check_vec_env, make_vec_env
    from dask_podracer.envs.multi_agent import check_multi_agent_env, is_multi_agent

    if args.max_steps < 0:
        raise UserError(f"--max-steps must be >= 1 (0: the default), got {args.max_steps}")
    name, kwargs = args.env, {}
    try:
        if name.endswith(".toml"):
            run = load_config(name).run
            name, kwargs = run.env, run.env_kwargs
        if args.env_kwargs:
            kwargs = {**kwargs, **_json_object(args.env_kwargs, "--env-kwargs")}
        if args.num_envs < 1:
            raise UserError(f"--num-envs must be >= 1, got {args.num_envs}")
        env = make_vec_env(name, args.num_envs, device=_usable_device(args.device), seed=args.seed, **kwargs)
    except ConfigError as e:  # names the config file and the key already
        raise UserError(str(e)) from None
    except (ValueError, ImportError, TypeError, RuntimeError, MemoryError) as e:
        raise UserError(str(e) if repr(name) in str(e) else f"cannot build env {name!r}: {e}") from None
    limit = args.max_steps or min(env.max_episode_steps + 1, CHECK_STEPS)
    team = is_multi_agent(env)
    contract = "multi-agent VecEnv contract" if team else "VecEnv contract"
    try:
        check = check_multi_agent_env if team else check_vec_env
        report = check(env, seed=args.seed, max_steps=limit)
    except VecEnvCheckError as e:
        print(f"podracer: check-env: {name} breaks the {contract}: {e}", file=sys.stderr)
        return 1
    finally:
        env.close()
    agents = f", {env.n_agents} agents" if team else ""
    print(f"{name}: keeps the {contract} ({env.num_envs} envs on {env.device}{agents}, {report.steps:,} steps, "
          f"{report.terminations:,} terminations, {report.truncations:,} truncations)")
    print(f"  observation {env.single_observation_space}, action {env.single_action_space}, "
          f"max_episode_steps {env.max_episode_steps}")
    if report.terminations + report.truncations == 0:
        print(f"  no episode ended within {report.steps:,} steps: auto-reset was not checked "
              f"(raise --max-steps past the time limit)")
    if report.seed_matters is False:
        print(f"  seeds {args.seed} and {args.seed + 1} gave the same run: right for an env whose start and dynamics "
              f"are fixed; an env with randomness of its own ignores reset's seed")
    return 0


def _usable_device(text: str):
    """The torch device `--device` names, as preflight checks a worker's: a UserError if this machine cannot use it."""
    from dask_podracer.train import usable_device

    try:
        return usable_device(text)
    except ValueError as e:
        raise UserError(f"cannot use --device {text!r}: {e}") from None


CHECK_STEPS = 10_000
"""What `check-env` steps at most by default (an env without a time limit would step for ever)."""


def _json_object(text: str, option: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{option} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise UserError(f"{option} must be a JSON object, got {text!r}")
    return value


def format_leaderboard(entries: Sequence[LeaderboardEntry]) -> str:
    if not entries:
        return "(the leaderboard is empty)"
    from dask_podracer.status import number_text

    lines = [f"{'rank':>4}  {'key':<17} {'score':>9} {'env steps':>10}  {'algorithm':<9} {'gen':>3}  parent"]
    for i, e in enumerate(entries, 1):  # a board written by hand may lack a field: shown as "-"
        lines.append(f"{i:>4}  {str(e.get('key', '-')):<17} {number_text(e.get('score'), '>9.1f')} "
                     f"{number_text(e.get('env_steps'), '>10,')}  {str(e.get('algorithm', '-')):<9} "
                     f"{number_text(e.get('generation', 0), '>3')}  {e.get('parent') or '-'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
