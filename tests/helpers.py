"""Small drivers shared by the tests: train an agent in-process and evaluate it."""

import torch

from dask_podracer.agents import make_agent
from dask_podracer.envs import make_vec_env
from dask_podracer.train import evaluate


def train_agent(algorithm: str, hparams: dict, env_steps: int, seed: int = 0, env: str = "Pendulum"):
    torch.manual_seed(seed)
    return train_in(make_vec_env(env, hparams.get("num_envs", 4), seed=seed), algorithm, hparams, env_steps, seed)


def train_in(train_env, algorithm: str, hparams: dict, env_steps: int, seed: int = 0):
    """A fresh agent trained in `train_env` (reset with `seed`) for at least `env_steps` env steps."""
    agent = make_agent(algorithm, train_env.single_observation_space, train_env.single_action_space, hparams)
    obs, _ = train_env.reset(seed=seed)
    steps = 0
    while steps < env_steps:
        obs, n, _ = agent.train_iteration(train_env, obs)
        steps += n
    return agent


def score(agent, episodes: int = 10, seed: int = 123, env: str = "Pendulum") -> float:
    return evaluate(agent, make_vec_env(env, episodes, seed=seed), seed=seed)


def learner_and_actor(env_id: str, algorithm: str, hparams: dict):
    """An env (4 CPU envs per `hparams`, seed 3) and two agents of `algorithm` on it, a learner and an actor, of
    different weights until the actor loads the learner's (torch seeded 0 first)."""
    env = make_vec_env(env_id, hparams["num_envs"], device="cpu", seed=3)
    spaces = env.single_observation_space, env.single_action_space
    torch.manual_seed(0)
    learner = make_agent(algorithm, *spaces, hparams)
    actor = make_agent(algorithm, *spaces, hparams)  # another draw: other weights until loaded
    return env, learner, actor


def actor_learner_segment(client, store: str, env: str, algorithm: str, env_steps: int, hparams: dict,
                          workers: int = 2, budget: str = "10m") -> dict:
    """One segment of a learner task and `workers` actor tasks on `client`'s cluster, through a real tournament;
    its history record (the segment must have finished)."""
    from dask_podracer.config import config_from_dict
    from dask_podracer.population import run_tournament
    from dask_podracer.store import PodracerStore

    config = config_from_dict({
        "run": {"env": env, "algorithm": algorithm, "store": store, "budget": budget, "max_segments": 1},
        "tournament": {"pool_size": 1},
        "segment": {"env_steps": env_steps, "eval_episodes": 10},
        "hparams": hparams, "actors": {"workers": workers}})
    summary = run_tournament(config, client)
    assert summary.segments_completed == 1, summary.last_error
    (record,) = PodracerStore(config.store_url).read_history()
    return record


def to_toml(data: dict) -> str:
    """A config dict as TOML text (tables, [[groups]], inline tables for priors): enough for the tests' configs."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"cannot write {v!r} as TOML")

    lines = []
    for name, body in data.items():
        if name == "groups" and isinstance(body, list) and all(isinstance(g, dict) for g in body):
            for group in body:
                lines += ["[[groups]]"]
                for k, v in group.items():
                    lines.append(f"{k} = {value(v)}")
        elif isinstance(body, dict):
            lines += [f"[{name}]", *(f"{k} = {value(v)}" for k, v in body.items())]
        else:
            lines.append(f"{name} = {value(body)}")
        lines.append("")
    return "\n".join(lines)


def segment_that_kills_its_worker_first(spec):
    """A segment function for a real cluster: the first segment (key s000000-...) SIGKILLs the worker process
    running it, every time it is run; every other segment trains for real."""
    import os
    import signal

    from dask_podracer.population.tasks import segment_task

    if spec.key.startswith("s000000-"):
        os.kill(os.getpid(), signal.SIGKILL)
    return segment_task(spec)


def segment_held_until(release: str, spec):
    """A segment function that waits until the file `release` exists, then trains for real: a test that watches
    the training pool sees every slot busy for as long as it needs to look (on a loaded machine, two 8-second
    segments once ended between a test's looks). Bind the path with functools.partial."""
    import time
    from pathlib import Path

    from dask_podracer.population.tasks import segment_task

    deadline = time.monotonic() + 300  # a test that failed before releasing them does not leave them forever
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return segment_task(spec)


def segment_that_outlasts_the_budget(spec, seconds: float = 6.0):
    """A segment function that ignores the seconds it is given: it runs `seconds`, then fails (were it ever
    recorded, its failure would say so)."""
    import time

    time.sleep(seconds)
    raise RuntimeError("this segment outlasted its budget and was still recorded")


def segment_that_damages_its_checkpoint_then_dies(spec):
    """A segment function for a real cluster: the first segment (key s000000-...) trains and saves for real,
    rewrites its saved score (leaving the checksum), and SIGKILLs its worker, once: a worker that died after
    saving a checkpoint that was then damaged. Dask's rerun finds that checkpoint. Every other segment trains."""
    import json
    import os
    import signal
    from pathlib import Path

    from dask_podracer.population.tasks import segment_task

    died = Path(spec.store_url).with_name(f"{spec.key}.died")
    if not spec.key.startswith("s000000-") or died.exists():
        return segment_task(spec)
    segment_task(spec)
    meta = Path(spec.store_url) / "checkpoints" / spec.key / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["attrs"]["score"] = 0.0  # better than any Pendulum agent
    meta.write_text(json.dumps(doc))
    died.write_text("")
    os.kill(os.getpid(), signal.SIGKILL)


def segment_that_fails_after_saving(spec):
    """A segment function for a real cluster: the first segment trains and publishes its checkpoint, then its task
    fails (as a task cancelled when its scheduler died after the worker saved); every other segment trains."""
    from dask_podracer.population.tasks import segment_task

    result = segment_task(spec)
    if spec.key.startswith("s000000-"):
        raise RuntimeError("the task failed after its checkpoint was published")
    return result
