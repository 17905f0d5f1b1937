"""What a cheaper MuJoCo integrator would cost and give: gymnasium's ant.xml integrates with RK4.

    python benchmarks/integrator_transfer.py --store runs/ant.zarr            # the store's best agent on Ant-v5
    python benchmarks/integrator_transfer.py --warp-worlds 64                 # WarpAnt-v0's step under each
    python benchmarks/integrator_transfer.py --store runs/ant.zarr --warp-worlds 64 --warp-device cuda

RK4 evaluates the dynamics four times per MuJoCo step (20 times per Ant env step, frame_skip 5); Euler and
implicitfast once. Two measurements, each under RK4 (the model's own), implicitfast and Euler:

- `--store`: the best checkpoint of a store trained on gymnasium's Ant-v5 (RK4), evaluated deterministically on
  `--episodes` episodes of Ant-v5 whose model has its integrator switched: does a policy carry over?
- `--warp-worlds`: ms per env step of MuJoCo Warp on gymnasium's ant.xml (our WarpAnt-v0's physics:
  frame_skip MuJoCo steps and rne_postconstraint, under random controls), with the integrator switched.

The last line is JSON: {"returns": {integrator: [episode returns]}, "warp_ms_per_step": {integrator: ms}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import gymnasium as gym
import numpy as np
import torch

INTEGRATORS = ("RK4", "IMPLICITFAST", "EULER")


def returns_under(agent, integrator: str, episodes: int) -> list[float]:
    """Deterministic returns of `agent` on `episodes` episodes of Ant-v5 integrated with `integrator`."""
    import mujoco

    out = []
    for episode in range(episodes):
        env = gym.make("Ant-v5")
        env.unwrapped.model.opt.integrator = getattr(mujoco.mjtIntegrator, f"mjINT_{integrator}")
        obs, _ = env.reset(seed=100 + episode)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                action = agent.act(torch.as_tensor(obs, dtype=torch.float32)[None], deterministic=True)[0]
            obs, reward, terminated, truncated, _ = env.step(action.numpy())
            total, done = total + float(reward), terminated or truncated
        env.close()
        out.append(round(total, 1))
    return out


def warp_ms_per_step(integrator: str, worlds: int, device: str, steps: int) -> float:
    """ms per Ant env step of MuJoCo Warp on `device` (frame_skip = 5 steps and rne_postconstraint, under random
    controls): eager on the CPU, one captured CUDA graph on CUDA (as WarpVecEnv steps)."""
    import mujoco
    import mujoco_warp as mjw
    import warp as wp

    from dask_podracer.envs.warp.model import load_mujoco_model

    mjm = load_mujoco_model("ant.xml")
    mjm.opt.integrator = getattr(mujoco.mjtIntegrator, f"mjINT_{integrator}")
    rng = np.random.default_rng(0)
    with wp.ScopedDevice(device):
        model, data = mjw.put_model(mjm), mjw.make_data(mjm, nworld=worlds)

        def physics() -> None:
            for _ in range(5):
                mjw.step(model, data)
            mjw.rne_postconstraint(model, data)

        physics()  # compile or load the kernels
        advance = physics
        if device != "cpu":
            with wp.ScopedCapture(device=device) as capture:
                physics()
            advance = lambda: wp.capture_launch(capture.graph)  # noqa: E731
        wp.synchronize_device(device)
        started = time.perf_counter()
        for _ in range(steps):
            data.ctrl.assign(rng.uniform(-1, 1, (worlds, mjm.nu)).astype(np.float32))
            advance()
        wp.synchronize_device(device)
    return 1000 * (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", help="a store of a tournament on Ant-v5 (ant.toml)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--warp-worlds", type=int, default=0, help="0: skip the Warp timing")
    parser.add_argument("--warp-device", default="cpu")
    parser.add_argument("--warp-steps", type=int, default=30)
    args = parser.parse_args()
    if args.warp_device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--warp-device {args.warp_device}: torch sees no CUDA device here")
    if not args.store and not args.warp_worlds:
        parser.error("nothing to measure: give --store, --warp-worlds N, or both")
    torch.set_num_threads(1)
    result: dict = {"returns": {}, "warp_ms_per_step": {}}
    if args.store:
        from dask_podracer.store import PodracerStore
        from dask_podracer.train.agent_checkpoints import load_agent

        store = PodracerStore(args.store)
        best = max(store.read_leaderboard(), key=lambda entry: entry["score"])
        agent = load_agent(store, best["key"], replay=False)
        print(f"{best['key']} (score {best['score']:.1f} on Ant-v5) on {args.episodes} episodes of Ant-v5:")
        for integrator in INTEGRATORS:
            returns = returns_under(agent, integrator, args.episodes)
            result["returns"][integrator] = returns
            print(f"  {integrator:12s} mean {np.mean(returns):8.1f}  min {min(returns):8.1f}  max {max(returns):8.1f}")
    if args.warp_worlds:
        print(f"MuJoCo Warp, ant.xml, {args.warp_worlds} worlds on {args.warp_device}:")
        for integrator in INTEGRATORS:
            ms = warp_ms_per_step(integrator, args.warp_worlds, args.warp_device, args.warp_steps)
            result["warp_ms_per_step"][integrator] = round(ms, 2)
            print(f"  {integrator:12s} {ms:8.2f} ms per env step, {args.warp_worlds * 1000 / ms:10,.0f} steps/s")
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        main()
    except ImportError as error:  # an optional package this run needs: say which, in one line
        sys.exit(f"{sys.argv[0]}: {error}")
