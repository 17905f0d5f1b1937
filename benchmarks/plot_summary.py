"""Reward against wall-clock and against env steps from the JSON summaries of `podracer train --json`: the best
score so far after each finished segment (the summary's `history`), one line per file.

    python benchmarks/plot_summary.py RUN.json [RUN2.json ...] --out curves.png [--title "WarpAnt-v0 on one H100"]

Used for the GPU runs, whose stores stay on the lent machine: their summaries come back, the stores do not.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summaries", nargs="+", type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    fig, (by_time, by_steps) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for path in args.summaries:
        history = json.loads(path.read_text())["history"]
        seconds = [0.0] + [h["wall_seconds"] for h in history]
        steps = [0] + [h["env_steps"] for h in history]
        best = [None] + [h["best_score"] for h in history]
        by_time.step(seconds[1:], best[1:], where="post", marker="o", label=path.stem)
        by_steps.step(steps[1:], best[1:], where="post", marker="o", label=path.stem)
    by_time.set_xlabel("wall-clock seconds of the tournament")
    by_steps.set_xlabel("env steps (all segments)")
    by_time.set_ylabel("best evaluation return so far")
    for ax in (by_time, by_steps):
        ax.grid(alpha=0.3)
    by_steps.legend(loc="upper left", fontsize=8)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
