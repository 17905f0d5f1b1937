"""Resume a named tournament on a given cluster for a budget: meant for cron or any scheduler.

    python workflows/resume.py CONFIG [--store PATH_OR_URL] [--scheduler ADDRESS] [--budget 30m] [--json SUMMARY]
                                      [--set SECTION.KEY=VALUE ...]

The same as `podracer train` (it resumes whatever the store holds), with a quiet log
line per run for a scheduler's log: what it did, and where the store is. Example crontab
line, a 50-minute slice every hour on an existing cluster (the slice ends before the next
one starts; the store keeps everything between them):

    0 * * * * cd /srv/podracer && .venv/bin/python workflows/resume.py workflows/configs/pendulum.toml --scheduler tcp://head:8786 --budget 50m --json runs/last.json >> runs/cron.log 2>&1
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys

from dask_podracer.cli import OneLineArgumentParser
from dask_podracer.cli import main as podracer


def parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="the tournament's TOML config (its run.name names the default store)")
    parser.add_argument("--store", help="Zarr store path or URL (default: the config's run.store)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="the cluster to run on, e.g. tcp://head:8786 (default: an embedded LocalCluster)")
    parser.add_argument("--budget", default="30m", help="wall-clock budget of this slice, e.g. 50m (default 30m)")
    parser.add_argument("--json", metavar="SUMMARY", help="write the run summary as JSON to this file")
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                        help="config values to change for this slice, as podracer train's --set")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = ["train", args.config, "--budget", args.budget, "--quiet"]
    for flag in ("store", "scheduler", "json"):
        if getattr(args, flag):
            command += [f"--{flag}", getattr(args, flag)]
    if args.set:
        command += ["--set", *args.set]
    # quoted as a shell would need it, so the logged line can be pasted to rerun the slice (a config path with a
    # space was logged unquoted: pasted, `podracer train` read the path's first word as the config)
    print(f"{datetime.datetime.now().isoformat(timespec='seconds')} resume: podracer {shlex.join(command)}", flush=True)
    return podracer(command)


if __name__ == "__main__":
    sys.exit(main())
