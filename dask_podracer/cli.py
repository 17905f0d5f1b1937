"""`podracer`: train a tournament, show a store's leaderboard. A thin front over the library."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_USAGE = 2


class UserError(Exception):
    """Something the user can fix; printed as one line, no traceback."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"podracer: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("podracer: interrupted; the store keeps everything recorded so far", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="podracer", description="Population training of deep-RL agents on Dask.")
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
    train.add_argument("--budget", metavar="DURATION", help="wall-clock budget, e.g. 90s, 10m, 1h (overrides run.budget)")
    train.add_argument("--json", metavar="SUMMARY", help="write a run summary as JSON to this file")
    train.add_argument("--quiet", action="store_true", help="print only the final summary")
    train.set_defaults(func=_train)

    board = commands.add_parser("leaderboard", help="show the ranked leaderboard of a store",
                                description="Print the leaderboard of a tournament store.")
    board.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    board.add_argument("--json", action="store_true", help="print the entries as a JSON list")
    board.add_argument("--top", type=int, default=0, help="show only the N best entries")
    board.set_defaults(func=_leaderboard)

    plot = commands.add_parser("plot", help="write the learning curves of a store",
                               description="Write reward vs wall-clock time and reward vs env steps, per agent and "
                                           "best so far, from a store's history: .html (Bokeh) or .png (matplotlib).")
    plot.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    plot.add_argument("--out", required=True, metavar="FILE", help="curves.html or curves.png")
    plot.set_defaults(func=_plot)

    lineage = commands.add_parser("lineage", help="print a checkpoint's family tree",
                                  description="Print the ancestors of KEY from the first segment of its lineage, "
                                              "then all its descendants, with the hyper-parameters each changed.")
    lineage.add_argument("store", metavar="STORE", help="Zarr store path or URL")
    lineage.add_argument("key", metavar="KEY", help="a checkpoint key, e.g. from `podracer leaderboard`")
    lineage.set_defaults(func=_lineage)
    return parser


def _train(args: argparse.Namespace) -> int:
    # Imports here, not at the top, so `podracer --help` answers without loading torch and dask.
    from dask_podracer.config import ConfigError, load_config, parse_duration

    try:
        if args.budget is not None:
            parse_duration(args.budget, "--budget")  # named as the user wrote it, not as run.budget
        config = load_config(args.config)
        overrides = {k: v for k, v in {"store": args.store, "budget": args.budget}.items() if v is not None}
        if overrides:
            config = config.replace(**overrides)
    except ConfigError as e:
        raise UserError(str(e)) from None
    tls = _tls_files(args)
    summary = _run(config, args.scheduler, quiet=args.quiet, tls=tls)
    if args.json:
        Path(args.json).write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    print(f"stopped: {summary.stop_reason} after {summary.wall_seconds:.1f}s, {summary.segments_completed} segments "
          f"({summary.segments_failed} failed), {summary.env_steps:,} env steps")
    print(f"store: {summary.store}")
    print(format_leaderboard(summary.leaderboard[:5]))
    if summary.stop_reason == "failing":
        print(f"podracer: error: segments keep failing; the last one: {summary.last_error}", file=sys.stderr)
        return 1
    return 0


def _tls_files(args: argparse.Namespace):
    files = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if not any(files):
        return None
    if not all(files):
        raise UserError("--tls-ca-file, --tls-cert and --tls-key go together")
    from dask_podracer.population import TLSFiles

    return TLSFiles(*files)


def _run(config, scheduler: str | None, quiet: bool, tls=None):
    from dask_podracer.population import (ClusterError, check_constructs, check_store_fits, connect, embedded_client,
                                          run_tournament)
    from dask_podracer.store import StoreError

    try:
        check_constructs(config)
        check_store_fits(config)  # before the cluster starts
    except (ValueError, ImportError) as e:  # e.g. a MuJoCo env without the mujoco extra
        raise UserError(f"{config.source}: {e}") from None
    except StoreError as e:
        raise UserError(str(e)) from None
    budget = config.run.budget_seconds
    printer = None if quiet else _progress_printer(budget)
    try:
        if scheduler is None:
            with embedded_client(config.cluster) as client:
                _say(quiet, f"embedded LocalCluster: {len(client.cluster.workers)} workers, "
                            f"dashboard {client.dashboard_link}")
                return run_tournament(config, client, on_progress=printer)
        with connect(scheduler, tls) as client:
            _say(quiet, f"cluster at {scheduler}: dashboard {client.dashboard_link}")
            return run_tournament(config, client, on_progress=printer)
    except (StoreError, ClusterError) as e:
        raise UserError(str(e)) from None


def _say(quiet: bool, line: str) -> None:
    if not quiet:
        print(line, flush=True)


def _progress_printer(budget_seconds: float):
    """A bar redrawn in place on a terminal, one line per segment in a log (see progress.py)."""
    from dask_podracer.progress import ProgressPrinter

    return ProgressPrinter(budget_seconds)


def _leaderboard(args: argparse.Namespace) -> int:
    from dask_podracer.store import PodracerStore, StoreError

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


def _plot(args: argparse.Namespace) -> int:
    from dask_podracer.dashboard import write_plot
    from dask_podracer.store import PodracerStore, StoreError

    try:
        store = PodracerStore(args.store)
        out = write_plot(store.read_history(), args.out, title=Path(store.url).name)
    except (StoreError, ValueError) as e:
        raise UserError(str(e)) from None
    print(f"wrote {out}")
    return 0


def _lineage(args: argparse.Namespace) -> int:
    from dask_podracer.lineage import family_tree
    from dask_podracer.store import PodracerStore, StoreError

    try:
        history = PodracerStore(args.store).read_history()
        print(family_tree(history, args.key))
    except (StoreError, KeyError) as e:
        raise UserError(str(e).strip('"')) from None
    return 0


def format_leaderboard(entries: Sequence[dict[str, Any]]) -> str:
    if not entries:
        return "(the leaderboard is empty)"
    lines = [f"{'rank':>4}  {'key':<17} {'score':>9} {'env steps':>10}  {'algorithm':<9} {'gen':>3}  parent"]
    for i, e in enumerate(entries, 1):
        lines.append(f"{i:>4}  {e['key']:<17} {e['score']:>9.1f} {e['env_steps']:>10,}  {e['algorithm']:<9} "
                     f"{e.get('generation', 0):>3}  {e.get('parent') or '-'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
