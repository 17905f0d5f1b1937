"""Replay an exported champion with nothing but torch and gymnasium (no dask_podracer).

    python workflows/replay_champion.py CHAMPION_DIR [--json]

Loads CHAMPION_DIR/policy.pt (TorchScript) and plays it in gymnasium's env named by
CHAMPION_DIR/card.json (`gymnasium_evaluation`), one episode per recorded seed, and
compares the mean return with the card's. `workflows/export_champion.py` computed that
figure with this same function, so on the same torch thread count the two agree exactly.
Exit status 0 when they do, 1 when they do not, 2 when the card has no gymnasium evaluation
(an env with no gymnasium twin, such as PointChase-v0) or the card or policy.pt cannot be played (damaged,
or a policy.pt that does not take the card's observations).

An Env class of your own (the card's `entry_point`, "my_envs:Arm"), or a gymnasium id with the module
that registers it ("my_pkg.envs:Arm-v0"), is imported from the working directory, or wherever Python
finds it, and only when `--env` names the card's env: a champion from elsewhere runs no module you did
not name. (TorchScript's policy.pt is a program too, of torch operators only: see docs/faq.md.)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec


@torch.no_grad()
def play(policy: torch.nn.Module, env_id: str, seeds: Sequence[int], env_kwargs: dict | None = None,
         entry_point: str | None = None) -> list[float]:
    """One deterministic episode of `env_id` (made with `env_kwargs`) per seed (`reset(seed=...)`), to its end;
    the returns. With an `entry_point` ("module:EnvClass"), that class is made, as gymnasium makes an id's."""
    returns = []
    for seed in seeds:
        env = gym.make(EnvSpec(id=env_id, entry_point=entry_point) if entry_point else env_id, **(env_kwargs or {}))
        if not isinstance(env.observation_space, gym.spaces.Box):
            # a Discrete, Tuple or Dict observation as the policy was trained on it: flattened (one-hots), as
            # dask_podracer's gym adapter presents it
            env = gym.wrappers.FlattenObservation(env)
        obs, _ = env.reset(seed=int(seed))
        total, done = 0.0, False
        while not done:
            action = policy(torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(1, -1))[0]
            action = action.item() if isinstance(env.action_space, gym.spaces.Discrete) else action.numpy()
            if isinstance(env.action_space, gym.spaces.Box) and np.issubdtype(env.action_space.dtype, np.integer):
                action = np.rint(action).astype(env.action_space.dtype)  # as training's adapter does (gym_adapter.py)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        env.close()
        returns.append(total)
    return returns


def imported_module(recorded: dict) -> str | None:
    """The module that playing the card's gymnasium env imports: an Env class's (`entry_point`), or the one
    gymnasium imports for a "<module>:<id>"; None for a plain gymnasium id. (dask_podracer's rule for stores,
    `check_env_named`, restated: this script runs without dask_podracer.)"""
    if recorded.get("entry_point"):
        return recorded["entry_point"].partition(":")[0]
    module, colon, _ = recorded["env_id"].partition(":")
    return module if colon else None


def refusal(card: dict, named: str | None) -> str | None:
    """Why the card's env is not played: it imports a module and `--env` did not name it, or `--env` named
    another env; None when it may be played."""
    if named is not None and named != card.get("env"):
        return f"card.json is of a champion on env {card.get('env')!r}, not on {named!r}"
    module = imported_module(card["gymnasium_evaluation"])
    if module is not None and named is None:
        return (f"card.json's env {card.get('env')!r} would import module {module!r}; a champion's env is imported "
                f"only where you name it: to allow it, run again with --env {card.get('env')}")
    return None


GYMNASIUM_FIELDS = {"env_id": str, "seeds": list, "returns": list, "score": (int, float)}
"""What replaying reads of a card's `gymnasium_evaluation`, and the JSON type each must have."""


def card_damage(card) -> str | None:
    """What makes `card` (card.json's JSON) unlike any card export_champion.py writes, said after the file's
    name; None for a card that can be replayed or refused for what it says. A card edited or cut short by
    hand was an AttributeError or KeyError traceback."""
    if not isinstance(card, dict):
        return f"holds a JSON {type(card).__name__}, not a champion's card (an object)"
    recorded = card.get("gymnasium_evaluation")
    if recorded is None:
        return None  # an env with no gymnasium twin: main() says so
    if not isinstance(recorded, dict):
        return "has a gymnasium_evaluation that is not an object"
    for field, kind in GYMNASIUM_FIELDS.items():
        if not isinstance(recorded.get(field), kind):
            return f"has no valid gymnasium_evaluation.{field}: not a card export_champion.py wrote, or damaged"
    return None


def load_policy(path: Path, card: dict) -> torch.jit.ScriptModule | str:
    """policy.pt, loaded and tried on one observation of the card's shape; or why it cannot be played. A damaged
    copy, or the policy.pt of another champion beside this card, was torch's RuntimeError traceback."""
    try:
        policy = torch.jit.load(str(path))
    except (RuntimeError, ValueError) as e:  # torch's reader: a truncated or overwritten file
        said = str(e).strip().partition(". ")[0] or type(e).__name__  # torch's first sentence of several
        return f"cannot load {path} as a TorchScript policy (damaged, or not written by export_champion.py): {said}"
    shape = card.get("observation_shape")
    if isinstance(shape, list) and all(isinstance(n, int) and n > 0 for n in shape):
        try:
            with torch.no_grad():
                policy(torch.zeros((1, math.prod(shape)), dtype=torch.float32))
        except RuntimeError:  # torch's shape error, naming tensors a and b: say which files disagree
            return (f"{path} does not take the observations of shape {shape} that its card.json describes: "
                    f"the policy of another champion?")
    return policy


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse's errors in one line, as podracer's are. Not imported from dask_podracer.cli: this script
    runs where dask_podracer is not installed."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("champion", help="the directory export_champion.py wrote (policy.pt, card.json)")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.add_argument("--env", help="the champion's env; needed for an env of your own ('my_envs:Arm'), whose "
                                      "module the card would otherwise have imported unasked")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the exporter plays on one thread: the same count gives the same numbers
    folder = Path(args.champion)
    try:
        card = json.loads((folder / "card.json").read_text())
    except (OSError, ValueError) as e:  # not a folder export_champion.py wrote, or a damaged card
        reason = e.strerror if isinstance(e, OSError) else f"not JSON ({e})"
        print(f"replay_champion: error: cannot read {folder / 'card.json'}: {reason}", file=sys.stderr)
        return 2
    if not (folder / "policy.pt").is_file():
        print(f"replay_champion: error: {folder} has a card.json but no policy.pt", file=sys.stderr)
        return 2
    damaged = card_damage(card)
    if damaged:
        print(f"replay_champion: error: {folder / 'card.json'} {damaged}", file=sys.stderr)
        return 2
    recorded = card.get("gymnasium_evaluation")
    if not recorded:
        print(f"replay_champion: error: {card.get('env')} has no gymnasium twin; the card records no gymnasium "
              "evaluation to replay", file=sys.stderr)
        return 2
    refused = refusal(card, args.env)
    if refused:
        print(f"replay_champion: error: {refused}", file=sys.stderr)
        return 2
    policy = load_policy(folder / "policy.pt", card)
    if isinstance(policy, str):
        print(f"replay_champion: error: {policy}", file=sys.stderr)
        return 2
    if recorded.get("entry_point"):
        sys.path.insert(0, "")  # the module of an Env class of your own, beside where this runs (as python -m)
    returns = play(policy, recorded["env_id"], recorded["seeds"], recorded.get("env_kwargs"),
                   recorded.get("entry_point"))
    score = math.fsum(returns) / len(returns)  # as export_champion.py computes the card's, on any Python
    same = returns == recorded["returns"]
    outcome = {"env_id": recorded["env_id"], "score": score, "card_score": recorded["score"], "reproduced": same,
               "dask_podracer_imported": any(m.split(".")[0] == "dask_podracer" for m in sys.modules)}
    if args.json:
        print(json.dumps(outcome))
    else:
        print(f"{recorded['env_id']}: mean return {score:.3f} over {len(returns)} seeded episodes; the card says "
              f"{recorded['score']:.3f}: {'reproduced' if same else 'NOT reproduced'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
