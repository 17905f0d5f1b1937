"""Preflight: everything that can be checked before the first segment is submitted.

The config constructs (env and agents, on the client and on every worker), a store that
already holds a tournament holds one this config can continue, the store is reachable
from every worker, and the cluster offers the resource segments ask for. Each failure
is one line naming the worker, the store, the group or the resource.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import gymnasium
import psutil
import torch
from distributed import Client

from dask_podracer.agents import algorithm_info, make_agent
from dask_podracer.config import Config, ConfigError, GroupConfig
from dask_podracer.envs import VecEnvCheckError, check_vec_env, make_vec_env
from dask_podracer.envs.multi_agent import is_multi_agent
from dask_podracer.envs.registry import DATA_PIN_KEYS, module_imported_by, same_env, with_data_pins
from dask_podracer.population.cluster import (CPU, GPU, ClusterError, Slots, cluster_slots, gpu_share_of,
                                              worker_layout)
from dask_podracer.population.run_lease import check_no_run_going
from dask_podracer.population.tournament import config_values
from dask_podracer.store import PodracerStore, StoreError
from dask_podracer.train import usable_device


def check_constructs(config: Config) -> None:
    """Build the env and a fresh agent of every group here, so a config that cannot run fails first."""
    run = config.run
    env = _built(run.env, run.env_kwargs, "run.env_kwargs")
    _check_steps(run.env, env, run.seed)
    _check_envs_fit(run.env, env, config.segment.eval_episodes, "segment.eval_episodes")
    if run.eval_env_kwargs:  # the env that scores segments must build too, or every segment fails after training
        _built(run.env, {**run.env_kwargs, **run.eval_env_kwargs}, "run.eval_env_kwargs", run.eval_env_kwargs)
    for i, group in enumerate(config.groups):
        prefix = f"groups[{i}]." if len(config.groups) > 1 else ""
        _check_agent_count(group.name, group.algorithm, run.env, env)
        _check_agent_fits(group, group.hparams, env, run.env, f"{prefix}hparams")
        for key, edge in _sizing_edges(group):
            try:
                _check_agent_fits(group, {**group.hparams, key: edge}, env, run.env, f"{prefix}hparams")
            except (ConfigError, MemoryError, RuntimeError) as e:
                raise ConfigError(f"{prefix}search.{key}: its prior can draw {edge!r}, and {first_line(e)}") from None


def _check_agent_fits(group: GroupConfig, hparams: dict[str, Any], env: Any, env_name: str, field: str) -> None:
    """A fresh agent of `hparams` builds here, and its network and envs fit this machine's memory."""
    _check_network_fits(group.algorithm, hparams, env, field)
    make_agent(group.algorithm, env.single_observation_space, env.single_action_space, hparams)
    # after the agent's own buffers (which name the hyper-parameters that size them): the envs' state
    _check_envs_fit(env_name, env, hparams.get("num_envs"), f"{field}.num_envs")


def _sizing_edges(group: GroupConfig) -> list[tuple[str, Any]]:
    """The values `[search]` priors can draw that may size an agent's memory: the top of a range over an integer,
    each option of a choice of integers or lists (`hidden`), where it differs from the group's own value. Floats
    (rates, discounts) size nothing. A segment built its agent from a drawn `buffer_size` of 10^12 and failed on
    the worker, each agent that drew one, after the cluster had started."""
    edges = []
    for key, prior in group.search.items():
        values = prior.edges(group.hparams.get(key))
        if prior.kind != "choice":
            values = values[-1:]
        for value in values:
            sizes = isinstance(value, (int, list, tuple)) and not isinstance(value, bool)
            if sizes and value != group.hparams.get(key):
                edges.append((key, value))
    return edges


def pin_data(config: Config) -> Config:
    """`config` with the content of the data files its env reads pinned in `run.env_kwargs` (and in
    `run.eval_env_kwargs` where the scoring env reads another file): every segment, on any worker, and every
    resume of the store then trains on the bytes the run began on, or is refused (a market file edited mid-run
    mixed checkpoints of two datasets in one store, silently)."""
    run = config.run
    env_kwargs = with_data_pins(run.env, run.env_kwargs)
    scoring = with_data_pins(run.env, {**run.env_kwargs, **run.eval_env_kwargs})
    eval_pins = {key: value for key, value in scoring.items()
                 if key in DATA_PIN_KEYS and env_kwargs.get(key) != value}
    if env_kwargs is run.env_kwargs and not eval_pins:
        return config
    run = dataclasses.replace(run, env_kwargs=env_kwargs, eval_env_kwargs={**run.eval_env_kwargs, **eval_pins})
    return dataclasses.replace(config, run=run)


PREFLIGHT_STEPS = 3
"""Steps of the env the preflight checks against the VecEnv contract (the seeding replays are left to check-env)."""


def _check_steps(env_name: str, env: Any, seed: int) -> None:
    """A few steps of an env of one's own (code a name imports), checked against the VecEnv contract. One that
    hands out numpy arrays, rewards `[B, 1]` or NaN failed every segment after the cluster had started; one with
    float64 observations or integer rewards trained, silently, on what the contract does not promise. The envs we
    ship are left out: their tests check them, and a Warp env's first step compiles its CPU kernels (45 s)."""
    if module_imported_by(env_name) is None or is_multi_agent(env):
        return
    try:
        check_vec_env(env, seed=seed, max_steps=PREFLIGHT_STEPS, seeding=False)
    except VecEnvCheckError as e:
        raise ConfigError(f"run.env {env_name!r} breaks the VecEnv contract: {first_line(e)} (`podracer check-env "
                          f"{env_name}` checks it in full)") from None
    except Exception as e:  # the env's own code raised: one line here, rather than in every segment
        raise ConfigError(f"run.env {env_name!r} failed in its first {PREFLIGHT_STEPS} steps: {type(e).__name__}: "
                          f"{first_line(e)}") from None


def check_without_cluster(config: Config, *, embedded: bool = False) -> None:
    """Everything about `config` that can be known before a cluster starts: the env and agents construct here, a
    store it names can be created or continued by it and, for an `embedded` cluster (this machine's processes),
    `segment.device` is usable here. A `ConfigError` or `StoreError`, one line, when not. `run_tournament` calls
    it first; a script that makes its own cluster calls it before making it."""
    try:  # before a cluster starts: none of these needs one to be found
        check_constructs(config)
    except (ValueError, ImportError, TypeError) as e:  # e.g. a MuJoCo env without the mujoco extra
        raise ConfigError(f"{config.source}: {first_line(e)}") from None
    except (RuntimeError, MemoryError) as e:  # torch cannot allocate what the hparams ask for (a buffer, a layer)
        raise ConfigError(f"{config.source}: cannot build the env and agents this config asks for on this machine: "
                          f"{type(e).__name__}: {first_line(e)}") from None
    _check_pool_fits(config)
    if embedded:
        _check_embedded_workers_fit(config)
        _check_embedded_slots(config)
    if embedded and config.segment.device != "auto":
        try:  # the embedded cluster's workers are this machine's processes: what it lacks, they lack
            usable_device(config.segment.device)
        except ValueError as e:
            raise ConfigError(f"{config.source}: cannot use segment.device {config.segment.device!r} on this machine "
                              f"(the embedded cluster's): {first_line(e)}") from None
    check_store_fits(config)  # its errors name the store, which may come from the command line, not the config


AGENT_STATE_BYTES = 2_000
"""A floor on the client's memory for one agent of the pool: the tournament's state of it and its segment's
instruction measured 2,370 bytes (tracemalloc, 20,000 agents); Dask's future and task for it come on top."""

WORKER_PROCESS_BYTES = 200 * 2**20
"""A floor on the memory of one worker process of the embedded cluster: a process that has imported torch,
distributed and dask_podracer.train, as a worker running segments has, measured 259 MB resident (torch alone
223 MB)."""


def _check_pool_fits(config: Config) -> None:
    """A pool no memory of this machine holds is refused, not left to a client that builds its agents for hours."""
    tournament = config.tournament
    agents = tournament.pool_size + tournament.pending
    memory = psutil.virtual_memory().total
    if agents * AGENT_STATE_BYTES > memory:
        field = "tournament.pool_size" if tournament.pool_size else "tournament.pending"
        raise ConfigError(f"{config.source}: {field} = {getattr(tournament, field.split('.')[1])} makes a pool of "
                          f"{agents:,} agents: the client's state of them alone needs at least "
                          f"{agents * AGENT_STATE_BYTES / 2**30:,.0f} GiB, more than this machine's "
                          f"{memory / 2**30:,.0f} GiB")


def _check_embedded_workers_fit(config: Config) -> None:
    """The embedded cluster's worker processes all run on this machine: more than its memory holds would start
    for minutes and then die one by one (Dask gives each its share of the memory as its limit)."""
    workers = config.cluster.workers
    memory = psutil.virtual_memory().total
    if workers * WORKER_PROCESS_BYTES > memory:
        raise ConfigError(f"{config.source}: cluster.workers = {workers:,} worker processes need at least "
                          f"{workers * WORKER_PROCESS_BYTES / 2**30:,.0f} GiB (each imports torch: "
                          f"{WORKER_PROCESS_BYTES // 2**20} MiB or more), more than this machine's "
                          f"{memory / 2**30:,.0f} GiB; the embedded cluster runs them all here")


def _check_embedded_slots(config: Config) -> None:
    """With [actors] or [learners], the slots the embedded cluster will offer are known before it starts (on a
    machine without GPUs: its worker processes times their threads): a segment needing more is refused now, not
    after a cluster of this machine's cores started for it (`actors.workers = 1000000` was, seconds later). With
    GPUs the count depends on how they are shared, and the check waits for the cluster's own answer."""
    if config.slots_per_segment == 1 or config.cluster.resource == GPU or torch.cuda.device_count():
        return
    layout = worker_layout(config.cluster, 0, os.cpu_count() or 1, config.segment.torch_threads)
    resources = None if config.cluster.resource == "none" else {CPU: 1}
    check_segment_slots(config, Slots(resources, layout.workers * layout.threads))


def _check_network_fits(algorithm: str, hparams: dict[str, Any], env: Any, field: str) -> None:
    """A network that no memory of this machine holds is refused at once: torch would spend minutes allocating
    it (`hidden = [1000000000]`) before it failed. What is counted is a floor that any agent needs: one network
    from the observation through `hidden` to one output, in float32, and its optimiser's two moments (Adam). An
    ensemble of `num_critics` critics (DDPG, TD3, SAC) is that many such networks: `num_critics = 1000000` with
    `hidden = [128, 128]` is 17 billion weights, which the config's check asked torch for on the client."""
    hidden = hparams.get("hidden") or _algorithm_defaults(algorithm).get("hidden")
    critics = hparams.get("num_critics")
    if not hidden or not (hparams.get("hidden") or _is_count(critics)):
        return
    try:
        observation = gymnasium.spaces.flatdim(env.single_observation_space)
    except (TypeError, ValueError, NotImplementedError, AttributeError):  # a team's spaces: count its widths only
        observation = 1
    widths = [observation, *hidden, 1]
    floor = 3 * 4 * sum(a * b for a, b in zip(widths, widths[1:]))
    memory = psutil.virtual_memory().total
    if floor > memory:
        raise ConfigError(f"{field}.hidden = {list(hidden)} makes one network of {floor // 12:,} weights: with its "
                          f"optimiser's moments at least {floor / 2**30:,.0f} GiB, more than this machine's "
                          f"{memory / 2**30:,.0f} GiB")
    if _is_count(critics) and critics * floor > memory:
        raise ConfigError(f"{field}.num_critics = {critics:,} critics of hidden = {list(hidden)} make at least "
                          f"{critics * floor // 12:,} weights: with their optimiser's moments at least "
                          f"{critics * floor / 2**30:,.0f} GiB, more than this machine's {memory / 2**30:,.0f} GiB")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _algorithm_defaults(algorithm: str) -> dict[str, Any]:
    """The defaults of `algorithm`'s hyper-parameters ({} for a name the registry does not know: refused later)."""
    try:
        config_cls = algorithm_info(algorithm).config_cls
    except ValueError:
        return {}
    return {f.name: f.default for f in dataclasses.fields(config_cls) if f.default is not dataclasses.MISSING}


STEP_BYTES = 15
"""Bytes a step of one env takes besides its observation and action: its float32 reward, bool terminated and
truncated, and evaluation's float64 return and bool still-running flag."""


def _check_envs_fit(env_name: str, env: Any, count: Any, field: str) -> None:
    """`count` envs (a segment's `num_envs`, or the `eval_episodes` it scores on, one env each) that no memory of
    this machine holds are refused at once: a worker built them after the cluster started, and every segment failed
    after its training (`eval_episodes = 1000000000` on Pendulum: 8 GB resident on a worker under a 12 GB limit
    before it failed; 100,000 of MuJoCo's MjData are 48 GB). What is counted is a floor: one step's observation
    and action of each env in float32, its reward, flags and return, and the state the env says each of its envs
    keeps (`bytes_per_env`: MuJoCo's MjData)."""
    if not _is_count(count):  # the hparams' own checks name it
        return
    try:
        widths = gymnasium.spaces.flatdim(env.single_observation_space) + \
            gymnasium.spaces.flatdim(env.single_action_space)
    except (TypeError, ValueError, NotImplementedError, AttributeError):  # a space of no fixed width
        widths = 0
    per_env = 4 * widths + STEP_BYTES + int(getattr(env, "bytes_per_env", 0))
    memory = psutil.virtual_memory().total
    if count * per_env > memory:
        raise ConfigError(f"{field} = {count:,} envs of {env_name!r} need at least {count * per_env / 2**30:,.1f} "
                          f"GiB ({per_env:,} bytes each), more than this machine's {memory / 2**30:,.1f} GiB")


def _check_agent_count(group: str, algorithm: str, env_name: str, env) -> None:
    """A single-agent algorithm on a multi-agent env, or the reverse, is refused in one line naming both."""
    team, multi = algorithm_info(algorithm).multi_agent, is_multi_agent(env)
    if team != multi:
        kind = {True: "multi-agent", False: "single-agent"}
        raise ConfigError(f"group {group!r}: algorithm {algorithm!r} is {kind[team]} but env {env_name!r} is "
                          f"{kind[multi]}; pair a {kind[multi]} algorithm with it (see docs/multi_agent.md)")


def _built(env: str, kwargs: dict, field: str, given: dict | None = None):
    """The env built with `kwargs`; a ConfigError naming `field` and what it gave (`given`, else `kwargs`)."""
    try:
        return make_vec_env(env, 1, device="cpu", **kwargs)
    except (TypeError, ValueError) as e:  # an unknown keyword; a value the env refuses, named here for the eval env's
        if not kwargs or isinstance(e, ConfigError) or (isinstance(e, ValueError) and given is None):
            raise
        raise ConfigError(f"{field} {kwargs if given is None else given} do not fit {env!r}: {first_line(e)}") \
            from None


def check_store_fits(config: Config) -> None:
    """Refuse to resume a store's tournament with a config that cannot continue it, before anything runs.

    Its checkpoints were trained on one env, by agents of named groups: a config for another env, or
    one that lacks a group its agents or entries belong to (or gives that group another algorithm),
    would fail every segment that starts from them. A store with a run going on it, from another client, is
    refused too (population/run_lease.py), and so is a store that cannot be created where it is named, or held
    (a read-only one, one `podracer gc` holds). The store is only read, but for its lock file.
    """
    url = config.store_url
    if not PodracerStore.exists(url):
        PodracerStore.check_creatable(url)
        return
    store = PodracerStore(url)
    board, state = store.read_leaderboard(), store.read_run_state()
    check_no_run_going(url, state)
    with store.hold_run():  # held, and let go: a store this process cannot write, or `podracer gc` holds, is
        pass                # refused here, not once the embedded cluster has started (the run holds it again then)
    recorded = state.get("env") or next((e["env"] for e in board if e.get("env")), None)
    again = "resume it with the config that started it, or give another store (--store)"
    if recorded is not None and recorded != config.run.env:
        raise ConfigError(f"store '{url}' holds a tournament on {recorded!r}, and run.env is "
                          f"{config.run.env!r}: {again}")
    recorded_kwargs = state.get("env_kwargs", next((e.get("env_kwargs", {}) for e in board), {}))
    for key in sorted(DATA_PIN_KEYS):
        then, now = recorded_kwargs.get(key), config.run.env_kwargs.get(key)
        if recorded is not None and then is not None and now is not None and then != now:
            raise ConfigError(f"store '{url}' holds a tournament on {recorded!r} trained on data whose content has "
                              f"changed since ({key} {then[:12]}..., now {now[:12]}...: env_kwargs "
                              f"{config.run.env_kwargs}): restore the file, or give another store (--store)")
    if recorded is not None and not same_env(recorded_kwargs, config.run.env_kwargs):
        raise ConfigError(f"store '{url}' holds a tournament on {recorded!r} with env_kwargs {recorded_kwargs}, "
                          f"and run.env_kwargs is {config.run.env_kwargs}: {again}")
    _check_scored_alike(store, url, config, state, board, again)
    algorithms = {g.name: g.algorithm for g in config.groups}
    stored = {e["group"]: e.get("algorithm") for e in board if e.get("group")}
    for agent in (state.get("machine") or {}).get("agents", []):
        stored.setdefault(agent["group"], None)
    for group, algorithm in sorted(stored.items()):
        if group not in algorithms:
            raise ConfigError(f"store '{url}' holds agents of group {group!r}, which this config does not declare "
                              f"(its groups: {', '.join(sorted(algorithms))}): {again}")
        if algorithm is not None and algorithm != algorithms[group]:
            raise ConfigError(f"store '{url}' holds {algorithm} agents in group {group!r}, and this config makes "
                              f"{group!r} {algorithms[group]}: {again}")
    for entry in board:
        _check_entry_loads(config, entry, url, again)
    _check_config_values_fit(config, state, board, url, again)


def _check_config_values_fit(config: Config, state: dict[str, Any], board: list[dict[str, Any]], url: str,
                             again: str) -> None:
    """A resumed agent's next segment, and one adopting an entry, trains with its own searched and perturbed
    values and the config's for the rest (`tournament.config_values`). A value edited between invocations can
    contradict an agent's own (an `eps_end` above the `eps_start` it drew): every segment of that agent would
    fail, after the cluster started. The config alone passes its checks: only the stored agents show it."""
    agents = (state.get("machine") or {}).get("agents", [])
    held = [(f"agent {a['id']}", a["group"], a.get("hparams") or {}) for a in agents]
    held += [(f"entry {e['key']}", e["group"], e["hparams"]) for e in board if e.get("group") and "hparams" in e]
    groups = {g.name: g for g in config.groups}
    for who, name, own in held:
        if name not in groups:  # refused above; a stored group the config lacks
            continue
        values = config_values(config, name)
        edited = {key: value for key, value in values.items() if _plain(own.get(key)) != _plain(value)}
        if not edited:
            continue
        config_cls = algorithm_info(groups[name].algorithm).config_cls
        fields = {f.name for f in dataclasses.fields(config_cls)}
        try:
            config_cls(**{**{k: v for k, v in own.items() if k in fields}, **values})
        except (ValueError, TypeError) as e:
            setting = ", ".join(f"hparams.{key} = {json.dumps(_plain(value))}" for key, value in sorted(edited.items()))
            raise ConfigError(f"store '{url}' holds {name!r} {who}, which cannot train with this config's {setting} "
                              f"(set for every agent; its searched and perturbed values are its own): {e}; "
                              f"{again}") from None


def _check_scored_alike(store: PodracerStore, url: str, config: Config, state: dict[str, Any],
                        board: list[dict[str, Any]], again: str) -> None:
    """The board's scores were measured on the evaluation env of `run.eval_env_kwargs` (a trading env's validation
    dates): new results scored on another one would be ranked against them, and adopted or not by them, as if alike.
    The run state records what the entries were scored with; a store written before it did, the top entry's
    checkpoint."""
    scored = _recorded_eval_kwargs(store, state, board)
    if scored is not None and not same_env(scored, config.run.eval_env_kwargs):
        raise ConfigError(f"store '{url}' holds a leaderboard scored with run.eval_env_kwargs {scored}, and "
                          f"run.eval_env_kwargs is {config.run.eval_env_kwargs}: their scores could not be ranked "
                          f"together; {again}")


def _recorded_eval_kwargs(store: PodracerStore, state: dict[str, Any],
                          board: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the store's entries were scored with: None where nothing says (no entry; a checkpoint gone)."""
    if "eval_env_kwargs" in state:
        return state["eval_env_kwargs"]
    for entry in board:
        try:
            return store.checkpoint_attrs(entry["key"]).get("eval_env_kwargs", {})
        except StoreError:  # deleted or half written: the next entry's checkpoint says the same
            continue
    return None


NETWORK_SHAPING = ("hidden", "normalize_observations", "dueling", "share_parameters", "centralised_critic")
"""Hyper-parameters a checkpoint's networks are built by (their sizes, what they take as input): an agent
with other values cannot load it."""


def _check_entry_loads(config: Config, entry: dict[str, Any], url: str, again: str) -> None:
    """A new agent of the entry's group may start from the entry (tournament adoption, pbt copies): refuse a
    config whose agents of that group are built with other networks."""
    group = next((g for g in config.groups if g.name == entry.get("group")), None)
    if group is None or "hparams" not in entry:
        return
    defaults = {f.name: f.default for f in dataclasses.fields(algorithm_info(group.algorithm).config_cls)}
    for name in NETWORK_SHAPING:
        if name not in defaults or name in group.search:  # a searched value is each agent's own
            continue
        stored, configured = (_plain(h.get(name, defaults[name])) for h in (entry["hparams"], group.hparams))
        if stored != configured:
            raise ConfigError(f"store '{url}' holds {group.name!r} entry {entry['key']} trained with hparams.{name} "
                              f"= {json.dumps(stored)}, and this config gives {group.name!r} {name} = "
                              f"{json.dumps(configured)}: its new agents could not load it; {again}")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def check_resources(client: Client, slots: Slots, requested: str) -> None:
    """A named resource that the cluster's workers exist but none offers is refused before anything runs.

    A cluster with no worker yet (an adaptive one, starting empty) is given `cluster.capacity_timeout`
    to grow instead: the orchestrator waits that long for a slot, then stops with a clear error.
    Segments sharing a GPU as threads need as many threads on its worker (`check_gpu_threads`).
    """
    check_gpu_threads(client, slots)
    if requested in ("auto", "none") or slots.count > 0:
        return
    workers = list(client.scheduler_info(n_workers=-1)["workers"].values())
    if workers:
        offered = ", ".join(f"{w.get('name')}: {w.get('resources') or {}}" for w in workers)
        raise ClusterError(f"cluster.resource is {requested!r} but no worker offers it (workers: {offered}); "
                           f"start workers with --resources \"{requested}=1\" or set cluster.resource")


def check_gpu_threads(client: Client, slots: Slots) -> None:
    """With `cluster.gpu_sharing = "threads"` each segment asks for a share of a GPU (GPU=1/segments_per_gpu):
    a worker advertising a GPU with fewer threads than its shares would run fewer segments at once than the
    config says, so it is refused, naming the worker and the `--nthreads` it needs. Workers that join later
    are counted by their threads (`cluster.worker_slots`)."""
    share = (slots.resources or {}).get(GPU, 1)
    if share >= 1:
        return
    for w in client.scheduler_info(n_workers=-1)["workers"].values():
        gpus, threads = w.get("resources", {}).get(GPU, 0), int(w.get("nthreads", 1))
        shares = int(gpus / share + 1e-9)
        if threads < shares:
            raise ClusterError(f"worker {w.get('name')} offers GPU={gpus:g} with {threads} thread(s): it would run "
                               f"{threads} of the {shares} segments cluster.segments_per_gpu = {round(1 / share)} "
                               f"(gpu_sharing = \"threads\") puts on it at once; start it with --nthreads {shares}, "
                               f"or set cluster.gpu_sharing = \"processes\" and start a worker per segment")


def _probe_worker(config: Config) -> str | None:
    """On a worker: what keeps it from running this config's segments, in one line; None when nothing does."""
    import uuid

    from dask_podracer.population.worker_slot import worker_device

    try:
        PodracerStore(config.store_url).check_access(uuid.uuid4().hex[:12])
    except StoreError as e:
        return f"cannot use the store '{config.store_url}': {first_line(e)}"
    device = worker_device() if config.segment.device == "auto" else config.segment.device
    try:
        usable_device(device)
    except ValueError as e:
        return f"cannot use segment.device {config.segment.device!r}: {e}"
    try:
        check_constructs(config)
    except (ValueError, ImportError, TypeError) as e:
        return f"cannot build env {config.run.env!r} and its agents: {type(e).__name__}: {first_line(e)}"
    return None


def check_workers(client: Client, config: Config) -> None:
    """Every worker writes to the store, places a tensor on the segments' device and builds the env and
    agents, before any segment runs.

    A path that only the client can see (a local directory on a multi-machine cluster, a ``memory://``
    store), `segment.device = "cuda"` on workers without a GPU, or an env a worker cannot build
    (gymnasium's MuJoCo missing there) fails here, once, naming the worker, not in every segment.
    """
    if config.slots_per_segment > 1:
        check_segment_slots(config, cluster_slots(client, wait_seconds=0, requested=config.cluster.resource,
                                                gpu_share=gpu_share_of(config.cluster)))
    answers = client.run(_probe_worker, config, on_error="return")
    for worker, answer in sorted(answers.items()):
        if isinstance(answer, str):
            raise ClusterError(f"worker {worker} {answer}")
        if isinstance(answer, BaseException) and not isinstance(answer, OSError):  # OSError: it died meanwhile
            raise ClusterError(f"worker {worker} failed its preflight: {type(answer).__name__}: "
                               f"{first_line(answer)}")


def check_segment_slots(config: Config, slots: Slots) -> None:
    """With [actors] or [learners], every segment in the pool needs all its slots at once (its learners, and its
    actors): a cluster that cannot place them is refused in one line naming the field (a learner would wait on
    peers that never start). A cluster with no slot yet (an adaptive one, starting empty) is left to grow."""
    need = config.slots_per_segment
    if need == 1 or slots.count == 0:
        return
    kind = next(iter(slots.resources or {"thread": 1}))
    if config.actors is not None:
        field, value, parts = "actors.workers", config.actors.workers, f"a learner and {config.actors.workers} actors"
    else:
        field, value, parts = "learners.workers", need, f"{need} learners"
    if need > slots.count:
        raise ConfigError(f"{config.source}: {field} = {value} needs {need} slots per segment ({parts}) but the "
                          f"cluster offers {slots.count} ({kind}); lower {field} or add workers")
    pool = config.tournament.pool_size
    if pool * need > slots.count:
        raise ConfigError(f"{config.source}: tournament.pool_size = {pool} with {field} = {value} needs {pool * need} "
                          f"slots but the cluster offers {slots.count} ({kind}); lower tournament.pool_size (0 fits "
                          f"the pool to the cluster)")


def first_line(error: BaseException) -> str:
    """An error's first line (torch's carry a C++ stack after it), or its type's name when it says nothing."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__
