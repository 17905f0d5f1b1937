"""`check_vec_env(env)`: does an env keep the VecEnv contract that the rest of dask_podracer relies on?

Each check raises `VecEnvCheckError` naming the env and what broke. The checks, in order:
attributes and spaces; reset's shapes, dtypes and device; every step's
shapes, dtypes and device; the auto-reset contract (`final_obs` equals `obs` where
nothing ended and differs from it where something did, equals what the dynamics led to
where the env can be copied, the clock restarts, episode statistics add up, truncation
only at the time limit and never together with termination); and what a step hands out (obs, reward, flags,
`final_obs`, episode statistics) stays as it was when the env steps again; then seeding determinism
(two seeded runs repeat each other through every env's first auto-reset; whether another seed changes the run
is reported, not required).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import VEC_ENV_MEMBERS, TorchVecEnv, VecEnv

Policy = Callable[[Tensor], Tensor]


class VecEnvCheckError(AssertionError):
    """An env broke the VecEnv contract."""


@dataclass(frozen=True)
class CheckReport:
    """What `check_vec_env` stepped through: the auto-reset paths its checks actually covered."""

    steps: int
    """Steps of the contract check (not counting the seeding replays)."""
    terminations: int
    """Env-steps that ended in termination."""
    truncations: int
    """Env-steps that ended at the time limit."""
    seed_matters: bool | None = None
    """Whether another seed changed the run (its start, or anything the same actions led to); None where seeding
    was not checked. False is no fault: an env whose start and dynamics are fixed gives every seed the same run, as
    does one that ignores reset's seed, which this check cannot tell apart."""


def _require(ok: bool, env: VecEnv, message: str) -> None:
    if not ok:
        raise VecEnvCheckError(f"{type(env).__name__}: {message}")


def sample_actions(env: VecEnv, generator: torch.Generator) -> Tensor:
    """A batch `[B, *act_shape]` (or `[B]` for discrete) of uniformly random actions, on the env's device."""
    space, n = env.single_action_space, env.num_envs
    if isinstance(space, gym.spaces.Discrete):
        return (torch.randint(0, int(space.n), (n,), generator=generator) + int(space.start)).to(env.device)
    if isinstance(space, gym.spaces.Box):
        low = torch.as_tensor(np.nan_to_num(space.low, neginf=-1.0), dtype=torch.float32)
        high = torch.as_tensor(np.nan_to_num(space.high, posinf=1.0), dtype=torch.float32)
        u = torch.rand((n, *space.shape), generator=generator)
        return (low + (high - low) * u).to(env.device)
    raise VecEnvCheckError(f"{type(env).__name__}: action space {space} is neither Discrete nor Box")


def _actor(env: VecEnv, seed: int, policy: Policy | None) -> Policy:
    """obs -> actions: `policy`, or random actions from a generator of our own (never torch's global one)."""
    if policy is not None:
        return policy
    gen = torch.Generator().manual_seed(seed)
    return lambda obs: sample_actions(env, gen)


def _check_tensor(env: VecEnv, name: str, x: object, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    _require(isinstance(x, Tensor), env, f"{name} is {type(x).__name__}, not a torch.Tensor")
    assert isinstance(x, Tensor)
    _require(tuple(x.shape) == shape, env, f"{name} has shape {tuple(x.shape)}, expected {shape}")
    _require(x.dtype == dtype, env, f"{name} has dtype {x.dtype}, expected {dtype}")
    _require(x.device == env.device, env, f"{name} is on {x.device}, the env on {env.device}")
    if dtype.is_floating_point:
        _require(bool(torch.isfinite(x).all()), env, f"{name} has non-finite values")


def _within(space: gym.spaces.Space, obs: Tensor) -> bool:
    """Whether every row of `obs` (float32, as the protocol has it) is in `space`, compared in the space's own dtype:
    a float32 array is never in a Box of uint8 (an image) or in a Discrete, whatever its values, for gymnasium."""
    rows = obs.cpu().numpy()
    if space.dtype is not None and np.issubdtype(space.dtype, np.integer):
        if not np.array_equal(rows, np.round(rows)):  # 3.5 would pass as 3
            return False
        rows = rows.astype(space.dtype)
    return all(space.contains(o if o.ndim else o[()]) for o in rows)


def _outside(space: gym.spaces.Space, obs: Tensor) -> str:
    """Where `obs` first leaves a Box `space` (" (env 3, obs[0] = 3.1525 > high 3.1416)"), so that the user can tell
    an env whose own observations exceed the bounds it declares (gymnasium's BipedalWalker: the hull angle is not
    wrapped to its [-pi, pi]) from a fault of their own; "" for another space, or values the bounds allow."""
    if not isinstance(space, gym.spaces.Box):
        return ""
    rows = obs.cpu().numpy().reshape(obs.shape[0], *space.shape)
    for side, bound, beyond in (("<", "low", rows < space.low), (">", "high", rows > space.high)):
        if beyond.any():
            env_index, *where = np.argwhere(beyond)[0]
            at = tuple(int(i) for i in where)
            index = ",".join(map(str, at))
            return (f" (env {int(env_index)}, obs[{index}] = {rows[(env_index, *at)]:.5g} {side} {bound} "
                    f"{getattr(space, bound)[at]:.5g})")
    return ""


def check_seeding(env: VecEnv, actor: Callable[[], Policy], seed: int, limit: int) -> bool:
    """Same seed, same actions (each run acts with a new `actor()`): the same numbers, through reset and every env's
    first auto-reset; `VecEnvCheckError` when not (the multi-agent checker's rule too). Returns whether `seed + 1`
    with the same actions gave another run (`CheckReport.seed_matters`)."""
    first, again = replay_trace(env, actor(), seed, limit), replay_trace(env, actor(), seed, limit)
    _require(_same(first, again), env,
             "reset(seed=s) followed by the same actions did not repeat the same obs, rewards and flags "
             "(through the auto-resets too: do they draw from the env's own seeded generator?)")
    other, _ = env.reset(seed=seed + 1)
    # identical starts used to be refused, which failed an env whose start is fixed and trains well
    return not torch.equal(first[0], other) or not _same(first, replay_trace(env, actor(), seed + 1, limit))


def _same(trace: list[Tensor], other: list[Tensor]) -> bool:
    return len(trace) == len(other) and all(torch.equal(a, b) for a, b in zip(trace, other))


def replay_trace(env: VecEnv, act: Policy, seed: int, limit: int) -> list[Tensor]:
    """reset(seed), then step with `act` until every env has finished once (or `limit` steps): everything it
    returned (the multi-agent checker replays its envs the same way)."""
    obs, _ = env.reset(seed=seed)
    trace, finished = [obs], torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in range(limit):
        obs, reward, terminated, truncated, info = env.step(act(obs))
        # copies: an env that hands out a buffer it rewrites at the next step must not compare only its last values
        trace += [x.clone() for x in (obs, reward, terminated, truncated, info["final_obs"])]
        finished |= terminated | truncated
        if bool(finished.all()):
            break
    return trace


def _copyable(env: VecEnv) -> bool:
    """Whether a deep copy of `env` is an independent twin whose `_dynamics` we may step."""
    return isinstance(env, TorchVecEnv) and env.copyable


def check_vec_env(env: VecEnv, seed: int = 0, max_steps: int | None = None,
                  policy: Policy | None = None, seeding: bool = True) -> CheckReport:
    """Check `env` against the VecEnv contract; raise `VecEnvCheckError` on the first break.

    Steps until every env has finished at least one episode, or `max_steps`
    (default: the time limit + 1), whichever comes first; the seeding replays go as far.
    `policy` maps obs `[B, *obs_shape]` to actions (default: uniformly random actions),
    e.g. to drive an env to its terminal states. `seeding=False` leaves the seeding replays out (the
    preflight's few steps: an env whose start is fixed is no fault there). Returns what the checks covered.
    """
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"max_steps must be None or an integer >= 1 (0 steps would check nothing), got {max_steps!r}")
    missing = [name for name in VEC_ENV_MEMBERS if not hasattr(env, name)]
    _require(not missing, env, f"lacks the VecEnv members {', '.join(missing)}")
    _require(isinstance(env.num_envs, int) and env.num_envs >= 1, env, f"num_envs = {env.num_envs!r}")
    _require(isinstance(env.device, torch.device), env, f"device is {type(env.device).__name__}, not torch.device")
    _require(isinstance(env.max_episode_steps, int) and env.max_episode_steps >= 1, env, "max_episode_steps")
    for name in ("single_observation_space", "single_action_space"):
        _require(isinstance(getattr(env, name), gym.spaces.Space), env, f"{name} is not a gymnasium space")
    _require(env.single_observation_space.shape is not None, env,
             f"single_observation_space {env.single_observation_space} has no shape: observations must be one tensor "
             f"[B, *obs_shape] (gymnasium.wrappers.FlattenObservation flattens a Tuple or Dict)")
    n, obs_shape = env.num_envs, (env.num_envs, *env.single_observation_space.shape)
    discrete = isinstance(env.single_action_space, gym.spaces.Discrete)
    limit = env.max_episode_steps + 1 if max_steps is None else max_steps

    obs, info = env.reset(seed=seed)
    _check_tensor(env, "reset obs", obs, obs_shape, torch.float32)
    _require(isinstance(info, dict), env, "reset info is not a dict")
    _require(_within(env.single_observation_space, obs), env,
             f"reset obs outside single_observation_space{_outside(env.single_observation_space, obs)}")

    act = _actor(env, seed, policy)
    obs, _ = env.reset(seed=seed)
    length = torch.zeros(n, dtype=torch.int64)
    ret = torch.zeros(n, dtype=torch.float64)
    finished = torch.zeros(n, dtype=torch.bool)
    terminations = truncations = steps = 0
    handed_out: list[tuple[str, Tensor, Tensor]] = []  # the previous step's outputs, and copies of them
    for t in range(limit):
        actions = act(obs)
        _require(tuple(actions.shape) == ((n,) if discrete else (n, *env.single_action_space.shape)), env,
                 f"action shape {tuple(actions.shape)}")
        twin = copy.deepcopy(env) if _copyable(env) else None
        obs, reward, terminated, truncated, info = env.step(actions)
        steps += 1
        _check_tensor(env, "obs", obs, obs_shape, torch.float32)
        _check_tensor(env, "reward", reward, (n,), torch.float32)
        _check_tensor(env, "terminated", terminated, (n,), torch.bool)
        _check_tensor(env, "truncated", truncated, (n,), torch.bool)
        for key, dtype in (("final_obs", torch.float32), ("episode_return", torch.float32),
                           ("episode_length", torch.int64)):
            _require(key in info, env, f"step info has no {key!r}")
            _check_tensor(env, f"info[{key!r}]", info[key], obs_shape if key == "final_obs" else (n,), dtype)
        for name, kept, copy_ in handed_out:
            _require(torch.equal(kept, copy_), env, f"step {t}: the {name} step {t - 1} returned changed when the env "
                     "stepped again; a step must hand out tensors it does not rewrite later (copies of its buffers)")
        handed_out = [(name, x, x.clone()) for name, x in (
            ("obs", obs), ("reward", reward), ("terminated", terminated), ("truncated", truncated),
            *((f"info[{key!r}]", info[key]) for key in ("final_obs", "episode_return", "episode_length")))]
        term, trunc = terminated.cpu(), truncated.cpu()
        done = term | trunc
        _require(not bool((term & trunc).any()), env, f"step {t}: an env is both terminated and truncated")
        final_obs, now = info["final_obs"].cpu().reshape(n, -1), obs.cpu().reshape(n, -1)
        _require(torch.equal(now[~done], final_obs[~done]), env, f"step {t}: final_obs differs from obs where not done")
        _require(bool((now[done] != final_obs[done]).any(-1).all()), env,
                 f"step {t}: final_obs equals the new obs where an env ended; it must be the observation "
                 "the step led to, not the first one of the next episode")
        if twin is not None:  # the dynamics alone, without the auto-reset, on a copy of the env
            twin._dynamics(torch.as_tensor(actions, device=twin.device))
            _require(torch.equal(info["final_obs"], twin._observe()), env,
                     f"step {t}: final_obs is not the observation of the state the dynamics led to")
        length += 1
        ret += reward.cpu().double()
        ep_len, ep_ret = info["episode_length"].cpu(), info["episode_return"].cpu().double()
        _require(torch.equal(ep_len[done], length[done]), env,
                 f"step {t}: episode_length {ep_len[done].tolist()} != steps since reset {length[done].tolist()}")
        _require(torch.allclose(ep_ret[done], ret[done], rtol=1e-4, atol=1e-3), env,
                 f"step {t}: episode_return {ep_ret[done].tolist()} != sum of rewards {ret[done].tolist()}")
        _require(bool((length[trunc] == env.max_episode_steps).all()), env,
                 f"step {t}: truncated before the time limit of {env.max_episode_steps}")
        _require(bool((length[~done] < env.max_episode_steps).all()), env,
                 f"step {t}: an episode ran past max_episode_steps without being truncated")
        _require(_within(env.single_observation_space, obs), env,
                 f"step {t}: obs outside single_observation_space{_outside(env.single_observation_space, obs)}")
        terminations += int(term.sum())
        truncations += int(trunc.sum())
        length[done] = 0
        ret[done] = 0.0
        finished |= done
        if bool(finished.all()):
            break
    _require(max_steps is not None or bool(finished.all()), env,
             f"some envs never finished an episode in {limit} steps")

    if not seeding:
        return CheckReport(steps=steps, terminations=terminations, truncations=truncations)
    # Checked after the steps, which name a wrong shape, dtype or NaN: checked first, such an env only "did not
    # repeat" (NaN != NaN, shapes that change), or failed inside the replay with torch's error (`terminated |
    # truncated` of float flags).
    seed_matters = check_seeding(env, lambda: _actor(env, seed, policy), seed, limit)
    return CheckReport(steps=steps, terminations=terminations, truncations=truncations, seed_matters=seed_matters)
