"""Same seed, same result, for every algorithm: twice in this process and once in a fresh one.

The fingerprint hashes every array of the agent's checkpoint state (networks, optimizers,
replay buffer, counters' skeleton), so any difference in any of them shows. Pipeline mode is
left out on purpose: its learner thread's timing decides how many updates precede each env
step, so it is not bit-reproducible (agents/pipeline.py).
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import train_agent

from dask_podracer.agents import registered_algorithms
from dask_podracer.train.state import flatten_state

REPO = Path(__file__).resolve().parents[1]
OFF_POLICY = {"hidden": (16, 16), "num_envs": 2, "learning_starts": 32, "batch_size": 16, "buffer_size": 1000}
DQN = {**OFF_POLICY, "num_envs": 4}
# algorithm: (env, hyper-parameters, env steps): tiny budgets that still make some updates.
CASES = {
    "ddpg": ("Pendulum", OFF_POLICY, 96),
    "td3": ("Pendulum", OFF_POLICY, 96),
    "sac": ("Pendulum", OFF_POLICY, 96),
    "dqn": ("CartPole", DQN, 128),
    "double_dqn": ("CartPole", DQN, 128),
    "d3qn": ("CartPole", DQN, 128),
    "ppo": ("Pendulum", {"num_envs": 4, "rollout_steps": 8, "hidden": (16,), "epochs": 2, "num_minibatches": 2}, 64),
    "a2c": ("CartPole", {"num_envs": 4, "rollout_steps": 5, "hidden": (16,)}, 40),
    "impala": ("CartPole", {"num_envs": 4, "rollout_steps": 5, "hidden": (16,)}, 40),
    "mappo": ("vmas:navigation", {"num_envs": 2, "rollout_steps": 8, "hidden": (16,), "epochs": 2,
                                  "num_minibatches": 2}, 32),
    "ippo": ("vmas:navigation", {"num_envs": 2, "rollout_steps": 8, "hidden": (16,), "epochs": 2,
                                 "num_minibatches": 2, "share_parameters": False}, 32),
    "maddpg": ("vmas:navigation", {"num_envs": 2, "hidden": (16,), "learning_starts": 16, "batch_size": 8,
                                   "buffer_size": 100, "utd_ratio": 0.5}, 32),
}


def fingerprint(algorithm: str, seed: int) -> str:
    env, hparams, steps = CASES[algorithm]
    agent = train_agent(algorithm, hparams, env_steps=steps, seed=seed, env=env)
    arrays, skeleton = flatten_state(agent.state_dict())
    digest = hashlib.sha256(json.dumps(skeleton, sort_keys=True).encode())
    for name in sorted(arrays):
        digest.update(name.encode())
        digest.update(arrays[name].tobytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def fresh_process_fingerprints() -> dict[str, str]:
    """Every algorithm's seed-0 fingerprint, computed once in a new interpreter (one thread, as here)."""
    script = ("import json, sys, torch\ntorch.set_num_threads(1)\nsys.path.insert(0, 'tests')\n"
              "from test_agents_determinism import CASES, fingerprint\n"
              "print(json.dumps({name: fingerprint(name, 0) for name in CASES}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_registered_algorithm_is_covered():
    assert sorted(CASES) == registered_algorithms()


@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_same_seed_same_result_also_in_a_fresh_process(algorithm, fresh_process_fingerprints):
    here = fingerprint(algorithm, 0)
    assert here == fingerprint(algorithm, 0)
    assert here != fingerprint(algorithm, 1)  # the seed matters
    assert here == fresh_process_fingerprints[algorithm]

