"""Our MAPPO and our tournament against BenchMARL's MAPPO on VMAS navigation and balance, at equal wall-clock.

    bash benchmarks/setup_benchmarl_venv.sh      # once: BenchMARL's venv at /work/venv-benchmarl
    python benchmarks/benchmarl_vmas.py [--task navigation balance] [--minutes 10 | --quick] [--out DIR]
                                        [--reuse-benchmarl]

Three runs per task, one after another (never side by side: they would share the 2 cores):

1. BenchMARL 1.5.2's MAPPO with its tuned VMAS settings (the BenchMARL repository's fine_tuned/vmas/conf/config.yaml:
   gamma 0.9, lr 5e-5, 60,000 frames from 600 envs per iteration, 45 passes of 4096-frame minibatches, 200
   deterministic evaluation episodes every 120,000 frames), its package's task yaml (conf/task/vmas/<task>.yaml)
   and algorithm yaml (conf/algorithm/mappo.yaml), on the CPU (torch's default threads: both cores), for
   `--minutes`, stopping at the first batch collected after it, but never before its first evaluation (after
   its first iteration). That tuned setting was made for a GPU: on 2 CPU cores one iteration (675 minibatch
   updates) takes minutes, so BenchMARL's "final" return is that of its last policy trained within the budget,
   and a budget shorter than one iteration overruns to it (the run says so). It runs under `--benchmarl-python` (default:
   this Python where benchmarl imports, else /work/venv-benchmarl/bin/python, the venv that
   benchmarks/setup_benchmarl_venv.sh builds), as this same file with `benchmarl-run`, and writes its
   evaluations (wall-clock, frames, return) to JSON; its CSV logger writes the rest under the same folder.
   `--reuse-benchmarl` takes that JSON from an earlier run instead of running BenchMARL again.
2. Our MAPPO alone (agents/mappo.py, the hparams of workflows/configs/vmas_<task>.toml, one torch thread) for
   `--minutes`, a copy of its weights kept every `--snapshot-every` seconds.
3. Our tournament: `podracer train workflows/configs/vmas_<task>.toml --budget <minutes>`; its best
   leaderboard entry is re-evaluated afterwards (a best of many noisy scores is biased up).

Every policy is scored on the same 1,000 deterministic episodes (VMAS seeded `SAME_SEED`, built as our adapter
builds it), after its run, so scoring takes no run's time: BenchMARL's policy after each iteration (its clock
less the time of its own evaluations), each copy of our MAPPO's weights, the tournament's best. Start
positions are random, and on navigation a 200-episode return moves by about 0.02 with them alone, as much as
the gap measured; the episodes' fingerprint is checked on both sides. BenchMARL's own evaluations (200
episodes of its own) are kept in the JSON beside them.

Returns are comparable: BenchMARL's evaluation return is each episode's reward summed over steps and averaged
over agents, then over episodes, which is our team score (docs/multi_agent.md); the scenario kwargs of our
config must equal BenchMARL's task yaml (checked before any run: the comparison refuses otherwise); one frame
is one env step of the team in both. Prints the figures; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = ("navigation", "balance")
FINE_TUNED = {  # BenchMARL's fine_tuned/vmas/conf/config.yaml, the experiment section, less devices and loggers
    "gamma": 0.9, "lr": 0.00005, "clip_grad_norm": True, "clip_grad_val": 5,
    "share_policy_params": True, "prefer_continuous_actions": True,
    "on_policy_collected_frames_per_batch": 60_000, "on_policy_n_envs_per_worker": 600,
    "on_policy_n_minibatch_iters": 45, "on_policy_minibatch_size": 4096,
    "evaluation": True, "evaluation_interval": 120_000, "evaluation_episodes": 200, "max_n_frames": 10_000_000,
}
EVAL_EPISODES = 200
EVAL_SEED = 12345
SAME_EPISODES = 1000  # the episodes both sides' policies are scored on (`same_episode_returns`)
SAME_SEED = 2026


# -- BenchMARL's side (runs in the BenchMARL venv) ---------------------------------------------

try:  # BenchMARL pickles its callbacks: ours must be importable from this module, so defined at its top
    from benchmarl.experiment import Callback as _BenchmarlCallback
    DEFAULT_BENCHMARL_PYTHON = sys.executable  # BenchMARL is installed beside us: run its half here too
except ImportError:  # our venv without it: only the comparison half runs here
    _BenchmarlCallback = object
    DEFAULT_BENCHMARL_PYTHON = "/work/venv-benchmarl/bin/python"  # benchmarks/setup_benchmarl_venv.sh's default


class OutOfTime(Exception):
    """Raised from a callback: BenchMARL's loop has no wall-clock limit of its own."""


class WallClock(_BenchmarlCallback):
    """Records every evaluation (wall-clock since `start`, frames, return), keeps a copy of the policy after every
    iteration's training (for `same_episode_returns`), and stops the run at `seconds`.

    It stops at the first batch collected after `seconds`, but never before the first evaluation (after the
    first iteration): a run shorter than one iteration would have no return to compare. A policy copy's clock
    leaves out the time BenchMARL spent in its own evaluations before it (they come right after training)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.start, self.cpu_start = time.monotonic(), time.process_time()
        self.evaluations: list[dict] = []
        self.policies: list[dict] = []
        self.evaluation_s = self.evaluation_cpu_s = 0.0
        self.trained_at, self.trained_cpu_at = self.start, self.cpu_start

    def on_batch_collected(self, batch) -> None:
        if self.evaluations and time.monotonic() - self.start > self.seconds:
            raise OutOfTime

    def on_train_end(self, training_td, group: str) -> None:
        import copy

        self.trained_at, self.trained_cpu_at = time.monotonic(), time.process_time()
        self.policies.append({"wall_s": self.trained_at - self.start - self.evaluation_s,
                              "cpu_s": self.trained_cpu_at - self.cpu_start - self.evaluation_cpu_s,
                              "frames": self.experiment.total_frames,
                              "state": copy.deepcopy(self.experiment.policy.state_dict())})

    def on_evaluation_end(self, rollouts) -> None:
        self.evaluation_s += time.monotonic() - self.trained_at  # evaluation follows training directly
        self.evaluation_cpu_s += time.process_time() - self.trained_cpu_at
        returns = []  # as BenchMARL's logger: cut at the first done, sum over steps, mean over agents
        for r in rollouts:
            done = r.get(("next", "done")).reshape(r.batch_size[0], -1).any(-1).nonzero()
            r = r[: int(done[0]) + 1] if done.numel() else r
            returns.append(float(r.get(("next", "agents", "reward")).sum(0).mean()))
        self.evaluations.append({"wall_s": time.monotonic() - self.start, "cpu_s": time.process_time() - self.cpu_start,
                                 "frames": self.experiment.total_frames, "return": sum(returns) / len(returns),
                                 "episodes": len(returns), "iterations": self.experiment.n_iters_performed + 1})


def same_episode_returns(task_name: str, task_config: dict, policy, states: list[dict]) -> tuple[list[float], float]:
    """The team return of BenchMARL's `policy` with each of `states` loaded, on `SAME_EPISODES` deterministic
    episodes of a VMAS env built as our adapter builds it (envs/multi_agent/vmas_adapter.py: the same
    `vmas.make_env` call, reset with `SAME_SEED`), and those episodes' fingerprint (`episodes_fingerprint`).

    The same episodes as `our_same_episode_return`'s: a 200-episode return moves by about 0.02 on navigation
    with the start positions alone (agents and goals are drawn at random), as much as the gap being measured."""
    import torch
    import vmas
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    kwargs = {k: v for k, v in task_config.items() if k != "max_steps"}
    env = vmas.make_env(task_name, num_envs=SAME_EPISODES, device="cpu", continuous_actions=True, max_steps=None,
                        seed=SAME_SEED, clamp_actions=True, **kwargs)
    returns, fingerprint = [], 0.0
    for state in states:
        policy.load_state_dict(state)
        obs = torch.stack(env.reset(seed=SAME_SEED), dim=1)
        fingerprint = episodes_fingerprint(obs)
        total = torch.zeros(SAME_EPISODES, dtype=torch.float64)
        running = torch.ones(SAME_EPISODES, dtype=torch.bool)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            for step in range(task_config["max_steps"]):
                td = TensorDict({"agents": TensorDict({"observation": obs}, batch_size=obs.shape[:2])},
                                batch_size=obs.shape[:1])
                action = policy(td).get(("agents", "action"))
                per_agent_obs, rewards, terminated, _ = env.step(list(action.unbind(1)))
                obs = torch.stack(per_agent_obs, dim=1)
                total += torch.stack(rewards, dim=1).mean(1).double() * running
                running &= ~terminated & (step + 1 < task_config["max_steps"])
                if not bool(running.any()):
                    break
        returns.append(float(total.mean()))
    return returns, fingerprint


def episodes_fingerprint(first_obs) -> float:
    """A number that tells two sets of episodes apart: the sum of |observation| over the first step of every
    episode and agent `[episodes, n_agents, obs_dim]`, in float64."""
    return float(first_obs.double().abs().sum())


def benchmarl_task_config(task_name: str) -> dict:
    """BenchMARL's VMAS task yaml (conf/task/vmas/<task>.yaml), as its package ships it."""
    from benchmarl.environments import VmasTask

    return dict(getattr(VmasTask, task_name.upper()).get_from_yaml().config)


def run_benchmarl(task_name: str, seconds: float, out: Path, seed: int) -> dict:
    """BenchMARL's MAPPO on `task_name` for `seconds` of wall-clock; its evaluations and task config."""
    import torch
    from benchmarl.algorithms import MappoConfig
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    config = ExperimentConfig.get_from_yaml()
    for key, value in FINE_TUNED.items():
        setattr(config, key, value)
    config.sampling_device = config.train_device = config.buffer_device = "cpu"
    config.loggers, config.render, config.create_json = ["csv"], False, False
    config.save_folder, config.checkpoint_interval, config.checkpoint_at_end = str(out), 0, False
    out.mkdir(parents=True, exist_ok=True)
    task = getattr(VmasTask, task_name.upper()).get_from_yaml()
    clock = WallClock(seconds)
    experiment = Experiment(task=task, algorithm_config=MappoConfig.get_from_yaml(),
                            model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
                            seed=seed, config=config, callbacks=[clock])
    clock.start, clock.cpu_start = time.monotonic(), time.process_time()
    try:
        experiment.run()
    except OutOfTime:
        pass
    returns, fingerprint = same_episode_returns(task_name, dict(task.config), experiment.policy,
                                                [p["state"] for p in clock.policies])
    policies = [{k: p[k] for k in ("wall_s", "cpu_s", "frames")} | {"return": r}
                for p, r in zip(clock.policies, returns)]
    return {"task": task_name, "task_config": dict(task.config), "seconds": seconds, "seed": seed,
            "torch_threads": torch.get_num_threads(), "experiment": FINE_TUNED, "evaluations": clock.evaluations,
            "frames": experiment.total_frames, "folder": str(experiment.folder_name),
            "same_episodes": {"episodes": SAME_EPISODES, "seed": SAME_SEED, "fingerprint": fingerprint,
                              "policies": policies}}


# -- our side ----------------------------------------------------------------------------------

def our_env_kwargs(task_config: dict) -> dict:
    """BenchMARL's VMAS task yaml as our env_kwargs: its `max_steps` is our `max_episode_steps`."""
    kwargs = {k: v for k, v in task_config.items() if k != "max_steps"}
    return {**kwargs, "max_episode_steps": task_config["max_steps"]}


def check_comparable(config_path: Path, task_config: dict) -> None:
    """Refuse a comparison whose scenario differs from BenchMARL's (agents, episode length, rewards)."""
    from dask_podracer.config import load_config

    ours, theirs = dict(load_config(config_path).run.env_kwargs), our_env_kwargs(task_config)
    if ours != theirs:
        raise SystemExit(f"{config_path}: run.env_kwargs {ours} differ from BenchMARL's task {theirs}: "
                         f"the returns would not be comparable")


def first_reaching(curve: list[dict], target: float) -> dict | None:
    """The first point of a (wall_s, return) curve whose return is at least `target`."""
    return next((p for p in curve if p["return"] >= target), None)


def our_same_episode_return(agent, env_id: str, env_kwargs: dict) -> tuple[float, float]:
    """Our `agent`'s team return on the episodes of `same_episode_returns` (deterministic actions), and their
    fingerprint: the comparison refuses to go on if it differs from BenchMARL's side."""
    from dask_podracer.envs import make_vec_env
    from dask_podracer.train.evaluate import episode_scores

    env = make_vec_env(env_id, SAME_EPISODES, seed=SAME_SEED, **env_kwargs)
    first_obs, _ = env.reset(seed=SAME_SEED)
    return float(episode_scores(agent, env, SAME_SEED).mean()), episodes_fingerprint(first_obs)


def run_our_mappo(config_path: Path, seconds: float, snapshot_every: float, seed: int) -> dict:
    """Our MAPPO alone, one torch thread, for `seconds`; a copy of its weights every `snapshot_every` seconds,
    each scored afterwards on the same episodes as BenchMARL's policies (so scoring takes none of its time)."""
    import copy

    import torch

    from dask_podracer.agents.base import make_agent
    from dask_podracer.config import load_config
    from dask_podracer.envs import make_vec_env

    torch.set_num_threads(1)
    config = load_config(config_path)
    hparams, env_kwargs = dict(config.hparams), dict(config.run.env_kwargs)
    torch.manual_seed(seed)
    env = make_vec_env(config.run.env, hparams["num_envs"], seed=seed, **env_kwargs)
    agent = make_agent(config.run.algorithm, env.single_observation_space, env.single_action_space, hparams)
    start, cpu_start = time.monotonic(), time.process_time()
    obs, _ = env.reset(seed=seed)
    frames, next_snapshot, snapshots = 0, snapshot_every, []
    while time.monotonic() - start < seconds:
        obs, steps, _ = agent.train_iteration(env, obs)
        frames += steps
        elapsed = time.monotonic() - start
        if elapsed >= next_snapshot or elapsed >= seconds:
            snapshots.append({"wall_s": elapsed, "cpu_s": time.process_time() - cpu_start, "frames": frames,
                              "state": copy.deepcopy(agent.state_dict())})
            next_snapshot += snapshot_every
    curve, fingerprint = [], 0.0
    for snapshot in snapshots:
        agent.load_state_dict(snapshot.pop("state"))
        score, fingerprint = our_same_episode_return(agent, config.run.env, env_kwargs)
        curve.append({**snapshot, "return": score})
    return {"algorithm": config.run.algorithm, "hparams": {k: v for k, v in hparams.items()
                                                            if not isinstance(v, tuple)},
            "fingerprint": fingerprint, "curve": curve}


def run_our_tournament(config_path: Path, seconds: float, out: Path) -> dict:
    """`podracer train` on the config for `seconds`; its best entry, re-evaluated on 200 fresh episodes and on
    the episodes of `same_episode_returns`."""
    import torch

    from dask_podracer.envs import make_vec_env
    from dask_podracer.store import PodracerStore
    from dask_podracer.train.agent_checkpoints import load_agent
    from dask_podracer.train.evaluate import episode_scores

    store, summary = out / "tournament.zarr", out / "tournament.json"
    if store.exists():  # an earlier comparison's: `podracer train` would resume it, not start afresh
        shutil.rmtree(store)
    command = [sys.executable, "-m", "dask_podracer.cli", "train", str(config_path), "--store", str(store),
               "--budget", f"{int(seconds)}s", "--json", str(summary), "--quiet"]
    started = time.monotonic()
    subprocess.run(command, cwd=REPO, check=True)
    wall = time.monotonic() - started
    board = PodracerStore(str(store)).read_leaderboard()
    history = [r for r in PodracerStore(str(store)).read_history() if r["status"] == "finished"]
    best = board[0]
    torch.set_num_threads(1)
    agent = load_agent(PodracerStore(str(store)), best["key"], replay=False)
    attrs = PodracerStore(str(store)).checkpoint_attrs(best["key"])
    eval_env = make_vec_env(attrs["env"], EVAL_EPISODES, seed=EVAL_SEED, **attrs.get("env_kwargs", {}))
    fresh = float(episode_scores(agent, eval_env, EVAL_SEED).mean())
    same, fingerprint = our_same_episode_return(agent, attrs["env"], attrs.get("env_kwargs", {}))
    curve, top = [], float("-inf")
    for r in sorted(history, key=lambda r: r["wall_seconds"]):
        top = max(top, r["score"])
        curve.append({"wall_s": r["wall_seconds"], "frames": r["run_env_steps"], "return": top})
    return {"command": " ".join(command[1:]), "process_wall_s": wall, "segments": len(history),
            "worker_train_s": sum(r.get("train_seconds") or 0.0 for r in history),
            "env_steps": max((r["run_env_steps"] for r in history), default=0), "best_key": best["key"],
            "best_score": best["score"], "best_fresh_eval": fresh, "best_same_episodes": same,
            "fingerprint": fingerprint, "first_score": history[0]["score"],
            "best_curve": curve}


def check_same_episodes(side: str, fingerprint: float, benchmarl_fingerprint: float) -> None:
    if abs(fingerprint - benchmarl_fingerprint) > 1e-6 * abs(benchmarl_fingerprint):
        raise SystemExit(f"{side} was scored on other episodes than BenchMARL's policies (fingerprint {fingerprint} "
                         f"against {benchmarl_fingerprint}): the VMAS versions or the env construction differ")


def compare(task: str, minutes: float, out: Path, python: str, snapshot_every: float, seed: int,
            reuse_benchmarl: bool = False) -> dict:
    seconds = minutes * 60
    folder = out / task
    folder.mkdir(parents=True, exist_ok=True)
    bench_json = folder / "benchmarl.json"
    config_path = REPO / "workflows" / "configs" / f"vmas_{task}.toml"
    script = str(Path(__file__).resolve())
    if not Path(python).exists():
        raise SystemExit(f"--benchmarl-python {python} does not exist: run benchmarks/setup_benchmarl_venv.sh")
    task_json = subprocess.run([python, script, "benchmarl-task", task], check=True, capture_output=True, text=True)
    check_comparable(config_path, json.loads(task_json.stdout))
    if not (reuse_benchmarl and bench_json.exists()):
        subprocess.run([python, script, "benchmarl-run", task, str(seconds),
                        str(folder / "benchmarl"), str(bench_json), "--seed", str(seed)], check=True)
    bench = json.loads(bench_json.read_text())
    check_comparable(config_path, bench["task_config"])
    same = bench.get("same_episodes")
    if not (same and same["policies"]):
        raise SystemExit(f"{bench_json}: no BenchMARL policy was scored on the shared episodes (a run of an older "
                         f"version of this script): run again without --reuse-benchmarl")
    if bench["seconds"] != seconds:
        print(f"{task}: reusing a BenchMARL run of {bench['seconds']:.0f} s for runs of {seconds:.0f} s")
    # its last policy trained within the budget (it stops only at a batch collected after it); its first where
    # even that one came later
    policies = same["policies"]
    within = [p for p in policies if p["wall_s"] <= seconds]
    final = within[-1] if within else policies[0]
    reached = first_reaching(policies, final["return"])
    ours = run_our_mappo(config_path, seconds, snapshot_every, seed)
    check_same_episodes("our MAPPO", ours["fingerprint"], same["fingerprint"])
    ours_reached = first_reaching(ours["curve"], final["return"])
    tournament = run_our_tournament(config_path, seconds, folder)
    check_same_episodes("the tournament's best", tournament["fingerprint"], same["fingerprint"])
    result = {
        "task": task, "minutes": minutes, "scenario": bench["task_config"],
        "episodes": {"count": same["episodes"], "seed": same["seed"], "fingerprint": same["fingerprint"]},
        "benchmarl": {"final_return": final["return"], "final_wall_s": final["wall_s"],
                      "final_frames": final["frames"], "frames_collected": bench["frames"],
                      "time_to_final_s": reached["wall_s"], "cpu_to_final_s": reached["cpu_s"],
                      "torch_threads": bench["torch_threads"], "policies": policies,
                      "own_evaluations": bench["evaluations"]},
        "our_mappo": {"time_to_benchmarl_final_s": ours_reached["wall_s"] if ours_reached else None,
                      "cpu_to_benchmarl_final_s": ours_reached["cpu_s"] if ours_reached else None,
                      "frames_to_benchmarl_final": ours_reached["frames"] if ours_reached else None,
                      "last_return": ours["curve"][-1]["return"], "best_return": max(p["return"] for p in ours["curve"]),
                      "curve": ours["curve"]},
        "tournament": tournament,
    }
    b, o = result["benchmarl"], result["our_mappo"]
    print(f"{task}: all returns on the same {same['episodes']} episodes (seed {same['seed']}), deterministic actions")
    print(f"{task}: BenchMARL MAPPO's last policy in the budget returns {b['final_return']:.3f} (trained by "
          f"{b['final_wall_s']:.0f} s, {b['final_frames']:,} frames), first reached at {b['time_to_final_s']:.0f} s; "
          f"its own last evaluation ({EVAL_EPISODES} episodes of its own) {bench['evaluations'][-1]['return']:.3f}")
    if b["final_wall_s"] > seconds:
        print(f"{task}: BenchMARL's first iteration ended after the {seconds:.0f} s budget; compare at --minutes "
              f"above {b['final_wall_s'] / 60:.0f}")
    if o["time_to_benchmarl_final_s"] is None:
        print(f"{task}: our MAPPO did not reach it in {seconds:.0f} s (last {o['last_return']:.3f}, "
              f"best {o['best_return']:.3f})")
    else:
        print(f"{task}: our MAPPO reached it at {o['time_to_benchmarl_final_s']:.0f} s "
              f"({o['frames_to_benchmarl_final']:,} frames, {ours_reached['cpu_s']:.0f} CPU s), "
              f"{o['time_to_benchmarl_final_s'] / b['time_to_final_s']:.2f} of BenchMARL's time")
    print(f"{task}: tournament best {tournament['best_score']:.3f} on its segment's episodes, "
          f"{tournament['best_same_episodes']:.3f} on the shared ones, vs BenchMARL {b['final_return']:.3f} at "
          f"{minutes:g} min; {tournament['segments']} segments, first {tournament['first_score']:.3f}")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["benchmarl-task"] and len(argv) == 2 and argv[1] in TASKS:  # in BenchMARL's venv
        print(json.dumps(benchmarl_task_config(argv[1])))
        return 0
    if argv[:1] == ["benchmarl-run"]:  # the BenchMARL half, in BenchMARL's venv
        parser = argparse.ArgumentParser(prog="benchmarl_vmas.py benchmarl-run")
        parser.add_argument("task", choices=TASKS)
        parser.add_argument("seconds", type=float)
        parser.add_argument("folder", type=Path)
        parser.add_argument("json", type=Path)
        parser.add_argument("--seed", type=int, default=0)
        args = parser.parse_args(argv[1:])
        args.json.write_text(json.dumps(run_benchmarl(args.task, args.seconds, args.folder, args.seed)) + "\n")
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-clock of each run (default 10)")
    parser.add_argument("--quick", action="store_true", help="2 minutes a run")
    parser.add_argument("--snapshot-every", type=float, default=15.0,
                        help="seconds between the copies of our MAPPO's weights that are scored (default 15)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarl_vmas"))
    parser.add_argument("--reuse-benchmarl", action="store_true",
                        help="take BenchMARL's half from <out>/<task>/benchmarl.json where an earlier run left it")
    parser.add_argument("--benchmarl-python", default=os.environ.get("BENCHMARL_PYTHON", DEFAULT_BENCHMARL_PYTHON),
                        help=f"a Python with benchmarl installed (default {DEFAULT_BENCHMARL_PYTHON})")
    args = parser.parse_args(argv)
    minutes = 2.0 if args.quick else args.minutes
    results = [compare(task, minutes, args.out.resolve(), args.benchmarl_python, args.snapshot_every, args.seed,
                       args.reuse_benchmarl) for task in args.task]
    summary = [{"task": r["task"], "minutes": r["minutes"],
                "benchmarl_final_return": r["benchmarl"]["final_return"],
                "benchmarl_time_to_final_s": r["benchmarl"]["time_to_final_s"],
                "our_mappo_time_to_benchmarl_final_s": r["our_mappo"]["time_to_benchmarl_final_s"],
                "benchmarl_cpu_to_final_s": r["benchmarl"]["cpu_to_final_s"],
                "our_mappo_cpu_to_benchmarl_final_s": r["our_mappo"]["cpu_to_benchmarl_final_s"],
                "tournament_best": r["tournament"]["best_score"],
                "tournament_best_fresh_eval": r["tournament"]["best_fresh_eval"],
                "tournament_best_same_episodes": r["tournament"]["best_same_episodes"]} for r in results]
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
