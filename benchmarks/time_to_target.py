"""Time to a target return on Pendulum-v1: our agents and Stable-Baselines3's SAC and PPO, side by side.

    pip install -e ".[bench]"
    python benchmarks/time_to_target.py [--agents sac td3 ...] [--target -200] [--max-seconds 60]

Every agent trains on one torch thread in this process, one after the other, and is
evaluated the same way: the mean return of 10 deterministic episodes of Pendulum-v1,
stepped as one batch in our torch twin of gymnasium's Pendulum-v1 (`PendulumVecEnv`,
tested to match gymnasium step for step), with the same evaluation seed for everyone.
Evaluations happen every `--eval-every` env steps for the off-policy agents, every 4,096
(PPO) or 8,192 (A2C) env steps for ours on-policy and every rollout (8,192) for SB3's PPO,
and are not counted in the training seconds. Before each evaluation an off-policy agent is
paused (`agents.offpolicy.pause`): in pipeline mode its learner thread first makes every update
owed, and that time *is* counted. Prints, per agent, whether it reached the target, the training
seconds, the env steps it took and, for the off-policy agents, the learner's busy fraction: seconds
inside updates / seconds of training (the pauses for evaluation excluded; `docs/algorithms.md`).
The sequential and the pipelined SAC (`sac`, `sac-pipeline`) run one after the other with the
same settings, so their rows compare the two loops.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from dask_podracer.agents import make_agent
from dask_podracer.agents.offpolicy import OffPolicyAgent
from dask_podracer.envs import make_vec_env
from dask_podracer.train import SegmentSpec

EVAL_SEED = SegmentSpec.eval_seed  # the seed segments evaluate with

# Our agents: (algorithm, hyper-parameters, env steps between evaluations or None for --eval-every).
OURS: dict[str, tuple[str, dict, int | None]] = {
    "sac": ("sac", {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 1.0, "learning_starts": 500}, None),
    "sac-pipeline": ("sac", {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 1.0, "learning_starts": 500,
                             "pipeline": True}, None),
    "td3": ("td3", {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 2.0, "gamma": 0.98}, None),
    "td3-pipeline": ("td3", {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 2.0, "gamma": 0.98, "pipeline": True},
                     None),
    "ddpg": ("ddpg", {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 2.0, "gamma": 0.98}, None),
    "sac-16env": ("sac", {"hidden": (64, 64), "num_envs": 16, "utd_ratio": 0.25, "learning_starts": 1000}, None),
    "sac-32env": ("sac", {"hidden": (64, 64), "num_envs": 32, "utd_ratio": 0.125, "learning_starts": 1000,
                          "batch_size": 512}, None),
    "ppo": ("ppo", {}, 4096),
    "ppo-256env": ("ppo", {"num_envs": 256, "rollout_steps": 16}, 4096),
    "a2c": ("a2c", {"num_envs": 16, "rollout_steps": 8, "gamma": 0.9, "learning_rate": 1e-3}, 8192),
}


def evaluate(policy: Callable[[torch.Tensor], torch.Tensor], episodes: int = 10) -> float:
    """Mean return of `episodes` deterministic 200-step Pendulum episodes, as one batch."""
    env = make_vec_env("Pendulum-v1", episodes, seed=EVAL_SEED)
    obs, _ = env.reset(seed=EVAL_SEED)
    total = torch.zeros(episodes, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(env.max_episode_steps):
            obs, reward, _, _, _ = env.step(policy(obs))
            total += reward.double()
    return float(total.mean())


class Clock:
    """Training seconds: wall-clock time minus the time spent evaluating."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.evaluating = 0.0

    def train_seconds(self) -> float:
        return time.perf_counter() - self.started - self.evaluating

    def evaluate(self, policy: Callable[[torch.Tensor], torch.Tensor]) -> float:
        t = time.perf_counter()
        score = evaluate(policy)
        self.evaluating += time.perf_counter() - t
        return score


def run_ours(name: str, args: argparse.Namespace) -> tuple[bool, float, int, float, float | None]:
    algorithm, hparams, eval_every = OURS[name]
    eval_every = eval_every or args.eval_every
    torch.manual_seed(args.seed)
    env = make_vec_env("Pendulum-v1", hparams.get("num_envs", 64), seed=args.seed)
    agent = make_agent(algorithm, env.single_observation_space, env.single_action_space, hparams)
    obs, _ = env.reset(seed=args.seed)
    clock, steps, next_eval, score = Clock(), 0, eval_every, float("-inf")
    busy = None  # the off-policy learner's busy fraction
    while clock.train_seconds() < args.max_seconds:
        obs, n, _ = agent.train_iteration(env, obs)
        steps += n
        if steps >= next_eval:
            next_eval = steps + eval_every
            if isinstance(agent, OffPolicyAgent):  # drain a pipelined learner on the training clock
                agent.loop.pause()
                busy = agent.loop.stats.busy_fraction()
            score = clock.evaluate(lambda o: agent.act(o, deterministic=True))
            if score >= args.target:
                return True, clock.train_seconds(), steps, score, busy
    seconds = clock.train_seconds()
    agent.finish()  # off the clock: a pipelined learner must not compete with the next agent
    return False, seconds, steps, score, busy


def run_sb3(name: str, args: argparse.Namespace) -> tuple[bool, float, int, float, float | None]:
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env as sb3_vec_env

    class StopAtTarget(BaseCallback):
        """Evaluates every `eval_every` env steps (SAC) or at the start of every rollout (PPO: the policy
        trained on all rollouts so far); stops learning at the target or after `max_seconds`."""

        def __init__(self, every_rollout: bool) -> None:
            super().__init__()
            self.every_rollout, self.next_eval = every_rollout, args.eval_every
            self.clock, self.score, self.steps, self.done = Clock(), float("-inf"), 0, False

        def _evaluate(self) -> None:
            def policy(obs: torch.Tensor) -> torch.Tensor:
                return torch.as_tensor(self.model.predict(obs.numpy(), deterministic=True)[0])

            self.score, self.steps = self.clock.evaluate(policy), self.num_timesteps
            self.done = self.score >= args.target or self.clock.train_seconds() >= args.max_seconds

        def _on_rollout_start(self) -> None:
            if self.every_rollout and self.num_timesteps > 0:
                self._evaluate()

        def _on_step(self) -> bool:
            if not self.every_rollout and self.num_timesteps >= self.next_eval:
                self.next_eval = self.num_timesteps + args.eval_every
                self._evaluate()
            return not self.done

    torch.manual_seed(args.seed)
    if name == "sb3-sac":  # rl-zoo's Pendulum-v1 settings: lr 1e-3, otherwise SB3's defaults (256x256 nets)
        env = sb3_vec_env("Pendulum-v1", n_envs=1, seed=args.seed)
        model = SAC("MlpPolicy", env, learning_rate=1e-3, seed=args.seed, device="cpu")
        callback = StopAtTarget(every_rollout=False)
    else:  # rl-zoo's Pendulum-v1 PPO settings, with 8 envs instead of 4
        env = sb3_vec_env("Pendulum-v1", n_envs=8, seed=args.seed)
        model = PPO("MlpPolicy", env, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                    learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4, seed=args.seed, device="cpu")
        callback = StopAtTarget(every_rollout=True)
    callback.clock = Clock()
    model.learn(total_timesteps=10**9, callback=callback)
    return callback.score >= args.target, callback.clock.train_seconds(), callback.steps, callback.score, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", nargs="+", choices=[*OURS, "sb3-sac", "sb3-ppo"],
                        default=["sac", "sac-pipeline", "td3", "ddpg", "ppo", "ppo-256env", "a2c", "sb3-sac", "sb3-ppo"])
    parser.add_argument("--target", type=float, default=-200.0)
    parser.add_argument("--eval-every", type=int, default=500, help="env steps between evaluations")
    parser.add_argument("--max-seconds", type=float, default=90.0, help="training seconds before giving up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if any(name.startswith("sb3-") for name in args.agents):
        try:  # before our agents train, not after
            import stable_baselines3  # noqa: F401
        except ImportError as error:
            parser.error(f"the sb3-* agents need Stable-Baselines3 ({error}): pip install stable-baselines3")
    torch.set_num_threads(args.threads)
    print(f"target {args.target} (mean of 10 deterministic episodes), off-policy agents evaluated every "
          f"{args.eval_every} env steps; "
          f"seed {args.seed}, {args.threads} torch thread(s)", flush=True)
    print(f"{'agent':<14} {'reached':>7} {'train s':>8} {'env steps':>10} {'last eval':>9} {'learner busy':>12}",
          flush=True)
    for name in args.agents:
        reached, seconds, steps, score, busy = (run_sb3 if name.startswith("sb3-") else run_ours)(name, args)
        busy_text = "-" if busy is None else f"{busy:.1%}"
        print(f"{name:<14} {reached!s:>7} {seconds:>8.1f} {steps:>10,} {score:>9.1f} {busy_text:>12}", flush=True)


if __name__ == "__main__":
    main()
