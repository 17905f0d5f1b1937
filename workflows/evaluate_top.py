"""Evaluate the top K of a leaderboard on fresh seeds and write a report (JSON and Markdown).

    python workflows/evaluate_top.py STORE [--top 5] [--episodes 20] [--seed 7] [--out report] [--env ENV]

Scores on the leaderboard come from the seeds the tournament evaluated with; this
re-evaluates each entry deterministically on `--episodes` envs reset from `--seed`, so a
lucky checkpoint shows as one. Entries trained on an env of your own ("my_envs:Arm") are evaluated
only with `--env my_envs:Arm`: loading a store imports no code you did not name.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from dask_podracer.cli import OneLineArgumentParser
from dask_podracer.cli import import_from_working_directory
from dask_podracer.envs import StoredEnvRefused, make_vec_env
from dask_podracer.store import PodracerStore, StoreError
from dask_podracer.train import evaluate, evaluation_env_kwargs, load_agent


def report(store: PodracerStore, top: int, episodes: int, seed: int, env: str | None = None) -> list[dict]:
    """The top `top` entries whose checkpoints load, each re-evaluated on `episodes` episodes from `seed` (`rank`
    is the board's); `env` as in `load_agent`. Those that do not load are named on stderr and passed over."""
    rows = []
    for rank, entry in enumerate(store.read_leaderboard(), 1):
        if len(rows) == top:
            break
        try:
            agent = load_agent(store, entry["key"], replay=False, env=env)  # evaluation only acts
        except StoreError as e:  # quarantined, damaged, deleted: a run would take it off the board; the rest stand
            print(f"evaluate_top: passing over rank {rank}: {e}", file=sys.stderr)
            continue
        attrs = store.checkpoint_attrs(entry["key"])
        # the env the score came from: a trading agent's validation period, say (`run.eval_env_kwargs`)
        episodes_env = make_vec_env(attrs["env"], episodes, seed=seed, **evaluation_env_kwargs(attrs))
        fresh = evaluate(agent, episodes_env, seed=seed)
        rows.append({"rank": rank, "key": entry["key"], "algorithm": entry["algorithm"],
                     "leaderboard_score": entry["score"], "fresh_score": fresh, "env_steps": entry["env_steps"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default="report", help="writes OUT.json and OUT.md")
    parser.add_argument("--env", help="the env the entries are trained on; needed for an env of your own "
                                      "('my_envs:Arm'), whose module the store would otherwise import unasked")
    args = parser.parse_args(argv)
    for name in ("top", "episodes"):
        if getattr(args, name) < 1:
            print(f"evaluate_top: error: --{name} must be >= 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    out_dir = Path(args.out).parent
    if not out_dir.is_dir():  # before the evaluation, not after it
        print(f"evaluate_top: error: --out {args.out}: there is no directory {str(out_dir)!r} to write it in",
              file=sys.stderr)
        return 2
    import_from_working_directory()  # an env of your own ('my_envs:Reach'), beside where this runs
    torch.set_num_threads(1)
    try:
        rows = report(PodracerStore(args.store), args.top, args.episodes, args.seed, env=args.env)
    except (StoreError, StoredEnvRefused) as e:
        print(f"evaluate_top: error: {e}", file=sys.stderr)
        return 2
    Path(f"{args.out}.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [f"# Top {len(rows)} of {args.store} on {args.episodes} fresh episodes (seed {args.seed})", "",
             "| rank | key | algorithm | leaderboard score | fresh score | env steps |", "| ---: | --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {r['rank']} | {r['key']} | {r['algorithm']} | {r['leaderboard_score']:.1f} | {r['fresh_score']:.1f} | "
              f"{r['env_steps']:,} |" for r in rows]
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
