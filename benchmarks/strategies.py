"""Generator strategies compared on Pendulum from a deliberately wide prior, at the same wall-clock budget.

    python benchmarks/strategies.py [--seeds 0 1 2 3 4] [--budget 150s] [--prior very-wide] [--resample 0.25]
                                    [--margin 2] [--progress-margin 3] [--ready 1]
                                    [--strategies tournament pbt generational random]

Every run: SAC, 4 agents on the embedded LocalCluster's slots, hyper-parameters drawn
from a wide prior (`--prior very-wide`: learning rates and tau over four decades, gamma
over [0.8, 0.999]; `wide`: three), 1,000 env steps per segment, the same budget. Prints per strategy and seed the best
evaluation score at the end of the budget and the seconds until the best score first
reached -200 (from the run's own curve), then how often tournament beat random search.
"""

from __future__ import annotations

import argparse
import tempfile

from dask_podracer.config import config_from_dict, parse_duration
from dask_podracer.population import run_tournament

FIXED_HPARAMS = {"num_envs": 4, "utd_ratio": 1.0, "hidden": [64, 64], "learning_starts": 500}
"""SAC's hyper-parameters outside the prior, the same for every agent."""

PRIORS = {
    # learning rates over three decades: about 4 in 10 draws learn (a critic learning rate of 5e-4 or more
    # is what matters most), so 4 independent draws almost always include a good one
    "wide": {
        "actor_lr": {"log_uniform": [1e-5, 1e-2]},
        "critic_lr": {"log_uniform": [1e-5, 1e-2]},
        "gamma": {"uniform": [0.8, 0.999]},
        "tau": {"log_uniform": [1e-3, 1e-1]},
    },
    # learning rates and tau over four decades: a user who knows nothing of the task; most draws are bad
    "very-wide": {
        "actor_lr": {"log_uniform": [1e-6, 1e-2]},
        "critic_lr": {"log_uniform": [1e-6, 1e-2]},
        "gamma": {"uniform": [0.8, 0.999]},
        "tau": {"log_uniform": [1e-4, 1e-1]},
    },
}


def run(strategy: str, seed: int, budget: str, resample: float, margin: float, prior: str,
        perturb_factor: float, ready: int, progress_margin: float) -> tuple[float, float | None]:
    with tempfile.TemporaryDirectory() as tmp:
        config = config_from_dict({
            "run": {"env": "Pendulum-v1", "algorithm": "sac", "store": f"{tmp}/s.zarr", "budget": budget,
                    "seed": seed},
            "tournament": {"strategy": strategy, "pool_size": 4, "fresh_agents": 4, "quantile": 0.25,
                           "perturb": ["actor_lr", "critic_lr", "gamma", "tau"], "resample_probability": resample,
                           "adopt_margin": margin, "perturb_factor": perturb_factor, "ready": ready,
                           "progress_margin": progress_margin},
            "segment": {"env_steps": 1000, "eval_episodes": 10},
            "cluster": {"dashboard_address": "127.0.0.1:0"},
            "hparams": FIXED_HPARAMS,
            "search": PRIORS[prior],
        })
        summary = run_tournament(config)
    reached = next((p["wall_seconds"] for p in summary.history
                    if p["best_score"] is not None and p["best_score"] >= -200), None)
    return summary.best_score, reached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", default="150s")
    parser.add_argument("--resample", type=float, default=0.25,
                        help="tournament.resample_probability: chance a child redraws a perturbed one from its prior")
    parser.add_argument("--margin", type=float, default=2.0,
                        help="tournament.adopt_margin: standard errors an entry must beat an agent's own score by")
    parser.add_argument("--ready", type=int, default=1,
                        help="tournament.ready: segments a line trains before it may be abandoned or copied over")
    parser.add_argument("--progress-margin", type=float, default=3.0,
                        help="tournament.progress_margin: standard errors an entry must beat the best first segment by")
    parser.add_argument("--prior", choices=sorted(PRIORS), default="very-wide")
    parser.add_argument("--perturb-factor", type=float, default=1.25, help="tournament.perturb_factor")
    parser.add_argument("--strategies", nargs="+", default=["tournament", "pbt", "generational", "random"])
    args = parser.parse_args()
    parse_duration(args.budget)
    results: dict[str, list[tuple[float, float | None]]] = {}
    print(f"{'strategy':<13} {'seed':>4} {'best':>8} {'s to -200':>9}", flush=True)
    for strategy in args.strategies:
        for seed in args.seeds:
            best, reached = run(strategy, seed, args.budget, args.resample, args.margin, args.prior,
                                args.perturb_factor, args.ready, args.progress_margin)
            results.setdefault(strategy, []).append((best, reached))
            shown = f"{reached:9.1f}" if reached is not None else f"{'-':>9}"
            print(f"{strategy:<13} {seed:>4} {best:>8.1f} {shown}", flush=True)
    print()
    print(f"{'strategy':<13} {'median best':>11} {'reached -200':>12} {'median s to -200':>16}")
    for strategy, rows in results.items():
        bests = sorted(b for b, _ in rows)
        times = sorted(t for _, t in rows if t is not None)
        median_time = f"{times[len(times) // 2]:.1f}" if times else "-"
        print(f"{strategy:<13} {bests[len(bests) // 2]:>11.1f} {len(times):>9}/{len(rows)} {median_time:>16}")
    if "tournament" in results and "random" in results:
        wins = sum(_beats(t, r) for t, r in zip(results["tournament"], results["random"]))
        print(f"tournament beat random search on {wins} of {len(results['random'])} seeds "
              "(reached -200 sooner, or a better best score when neither or both missed it)")


def _beats(a: tuple[float, float | None], b: tuple[float, float | None]) -> bool:
    (best_a, time_a), (best_b, time_b) = a, b
    if time_a is not None and time_b is not None:
        return time_a < time_b
    if (time_a is None) != (time_b is None):
        return time_a is not None
    return best_a > best_b


if __name__ == "__main__":
    main()
