"""The VecEnv protocol and a base class for environments written as batched torch code.

A VecEnv is `num_envs` environments stepped together; every observation, action,
reward and flag is a batch-first tensor on one device. Episodes reset themselves
in the same step they end (gymnasium's "same-step" autoreset): the observation
returned for a finished env is the first one of its next episode, and
`info["final_obs"]` holds, for every env, the observation the step really led to,
which is what a critic bootstraps from.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

StepResult = tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Any]]


@runtime_checkable
class VecEnv(Protocol):
    """What the rest of dask_podracer expects of a batch of environments.

    Shapes: obs `[B, *obs_shape]`, actions `[B, *act_shape]` (or `[B]` for discrete),
    reward / terminated / truncated `[B]`. `info["final_obs"]` is `[B, *obs_shape]`;
    observations, rewards and `info["episode_return"]` are float32 whatever dtype an env
    simulates in. `info["episode_return"]` and `info["episode_length"]` (int64) are `[B]` and
    meaningful where `terminated | truncated`. Never both terminated and truncated.

    Optional: `info["episode_score"]` `[B]`, what an episode is ranked by when its return is not the
    measure that matters (the trading env's Sharpe ratio: a return rewards the riskiest bets). Where
    `terminated | truncated` it is the finished episode's; evaluation (train/evaluate.py) scores an
    episode by it instead of the return when an env reports it.
    """

    num_envs: int
    device: torch.device
    single_observation_space: gym.spaces.Space
    single_action_space: gym.spaces.Space
    max_episode_steps: int

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]: ...

    def step(self, actions: Tensor) -> StepResult: ...

    def close(self) -> None: ...


VEC_ENV_MEMBERS = (*VecEnv.__annotations__, "reset", "step", "close")
"""What an object needs to be a VecEnv. Look them up with hasattr rather than `isinstance(env, VecEnv)`:
since Python 3.12 a Protocol check sees only what is defined on the object or its class, so an env
that forwards through __getattr__ (our wrappers do) would fail it."""


def canonical_device(device: str | torch.device) -> torch.device:
    """The device that tensors made on `device` report: "cuda" -> "cuda:<current>", "cpu:0" -> "cpu".

    An env keeps this one, so `obs.device == env.device` holds exactly (index included).
    """
    return torch.empty(0, device=device).device


# torch's elementwise kernels split a tensor across threads only above this many elements (at::internal::GRAIN_SIZE)
TORCH_GRAIN_SIZE = 32768


def array_namespace(device: torch.device, dtype: torch.dtype, num_envs: int) -> ModuleType:
    """The array library an env's elementwise dynamics run fastest in: numpy for float32 batches on the CPU
    that torch would run on one thread, torch otherwise.

    At the sizes envs step (thousands of floats a call) numpy's float32 kernels are 2-3x faster than
    torch's on a CPU (cos 6.7 µs against 18.6 at 16,384 floats; comparisons 1 µs against 7), and it
    reads and writes the tensors' own memory (`Tensor.numpy()` is a view). Dynamics written with
    operators and functions both libraries share (`xp.cos`, `xp.abs`, `xp.divide(a, b, out=c)`,
    `a *= b`) run in either. Torch keeps float64 (numpy's float64 sin is 3x slower), every GPU, and
    batches large enough for torch to use several threads (numpy's ufuncs use one).
    """
    small = num_envs <= TORCH_GRAIN_SIZE
    return np if device.type == "cpu" and dtype == torch.float32 and small else torch


def as_arrays(xp: ModuleType, *tensors: Tensor) -> tuple[Any, ...]:
    """`tensors` as arrays of `xp` over the same memory: numpy views of CPU tensors, or the tensors themselves."""
    return tuple(t.detach().numpy() for t in tensors) if xp is np else tensors


def as_tensor(xp: ModuleType, array: Any) -> Tensor:
    """An array of `xp` back as a tensor over the same memory."""
    return torch.from_numpy(array) if xp is np else array


def constants(xp: ModuleType, dtype: torch.dtype, device: torch.device, **values: float) -> SimpleNamespace:
    """Scalars in the env's dtype for `xp`: numpy scalars, or 0-dim tensors (an op with a Python float
    converts it to a tensor first, every time: ~1 µs, a tenth of a small env's step on a CPU)."""
    if xp is np:
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        return SimpleNamespace(**{name: np_dtype.type(v) for name, v in values.items()})
    return SimpleNamespace(**{name: torch.tensor(v, dtype=dtype, device=device) for name, v in values.items()})


@dataclass(frozen=True)
class ResetRows:
    """The envs a reset concerns: `mask` `[B]` bool, and on the CPU also their indices `ids` `[k]`.

    On the CPU the host already knows which envs ended, so a reset draws and writes only
    those k rows. On a GPU (`ids` None) every row is drawn and the chosen ones are selected
    by mask, so the step never waits for the host to count them.
    """

    mask: Tensor
    ids: Tensor | None = None

    def shape(self, *trailing: int) -> tuple[int, ...]:
        """The shape of the fresh values to draw: `(k, *trailing)` with ids, `(B, *trailing)` without."""
        return (self.mask.numel() if self.ids is None else self.ids.numel(), *trailing)

    def put(self, current: Tensor, fresh: Tensor) -> Tensor:
        """A new `current` `[B, ...]` whose chosen rows are `fresh` (shaped as `shape(...)` says)."""
        if self.ids is not None:
            return current.index_copy(0, self.ids, fresh)
        return torch.where(self.mask.view(-1, *(1,) * (current.dim() - 1)), fresh, current)

    def fill(self, current: Tensor, value: float) -> Tensor:
        """A new `current` `[B, ...]` whose chosen rows are `value`."""
        if self.ids is not None:
            return current.index_fill(0, self.ids, value)
        return current.masked_fill(self.mask.view(-1, *(1,) * (current.dim() - 1)), value)


class EpisodeTally:
    """Each env's return and length in its current episode, for an adapter whose simulator keeps neither
    (Isaac Gym's VecTask, mjlab): `clear` at a reset, `add` every step (it gives the protocol's
    `info["episode_return"]` and `info["episode_length"]`), `end` the envs that finished."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.episode_return = torch.zeros(num_envs, dtype=torch.float32, device=device)
        self.episode_length = torch.zeros(num_envs, dtype=torch.int64, device=device)

    def clear(self) -> None:
        self.episode_return.zero_()
        self.episode_length.zero_()

    def add(self, reward: Tensor) -> dict[str, Tensor]:
        """Count one step of `reward` `[B]`; the episodes so far, copies (the tally goes on changing)."""
        self.episode_return += reward
        self.episode_length += 1
        return {"episode_return": self.episode_return.clone(), "episode_length": self.episode_length.clone()}

    def end(self, done: Tensor) -> None:
        """Start a new episode in the envs where `done` `[B]`."""
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0)


class TorchVecEnv:
    """Base for envs whose dynamics are batched tensor code (no Python loop over envs).

    A subclass keeps its physical state in tensors of shape `[B, ...]` and provides
    `_reset_where(rows)`, `_dynamics(actions) -> (reward, terminated)` and `_observe()`.
    This class owns what every such env shares: the seeded generator, the time limit,
    auto-reset, and episode statistics.
    """

    single_observation_space: gym.spaces.Space
    single_action_space: gym.spaces.Space
    max_episode_steps: int
    # All state is torch tensors and the generator, so `copy.deepcopy` makes an independent
    # twin: check_vec_env steps one with `_dynamics` alone to check `final_obs`.
    copyable: bool = True
    # Whether the CUDA step may be recorded as one CUDA graph (envs/graphed.py): the subclass's `_reset_where`,
    # `_dynamics` and `_observe` are sync-free tensor code on a GPU (no `.item()`, no shapes that depend on data)
    # and keep every piece of state in a tensor attribute of fixed shape. Off unless a subclass says so.
    graph_capturable: bool = False

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = int(num_envs)
        self.device = canonical_device(device)
        self.dtype = dtype
        # Seeded once here; reset() without a seed continues this stream, so a seeded env
        # repeats everything after construction, and an unseeded one draws from OS entropy.
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))
        self._needs_reset = True
        self.elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.episode_return = torch.zeros(num_envs, dtype=dtype, device=self.device)

    # -- subclass hooks -------------------------------------------------------------
    def _reset_where(self, rows: ResetRows) -> None:
        """Draw fresh initial states for the envs in `rows` (with `rows.shape`/`put`/`fill`)."""
        raise NotImplementedError

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Advance every env one step; return reward [B] and terminated [B] (bool)."""
        raise NotImplementedError

    def _observe(self) -> Tensor:
        """The observation [B, *obs_shape] of the current state, float32, in a new tensor.

        New, because the step hands it out (as obs or final_obs) and must not see it change.
        """
        raise NotImplementedError

    # -- the VecEnv protocol --------------------------------------------------------
    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        if seed is not None:
            self.generator.manual_seed(int(seed))
        self._reset_where(ResetRows(torch.ones(self.num_envs, dtype=torch.bool, device=self.device)))
        self.elapsed = torch.zeros_like(self.elapsed)
        self.episode_return = torch.zeros_like(self.episode_return)
        self._needs_reset = False
        return self._observe(), {}

    def step(self, actions: Tensor) -> StepResult:
        if self._needs_reset:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        actions = torch.as_tensor(actions, device=self.device)
        reward, terminated = self._dynamics(actions)
        # Out of place, so info can hold these tensors without a defensive clone.
        self.elapsed = self.elapsed + 1
        self.episode_return = self.episode_return + reward
        truncated = (self.elapsed >= self.max_episode_steps) & ~terminated
        final_obs = self._observe()
        done = terminated | truncated
        info: dict[str, Any] = {
            "final_obs": final_obs,
            "episode_return": self.episode_return.to(torch.float32),
            "episode_length": self.elapsed,
        }
        if self.device.type == "cpu":
            # On the CPU finding the envs that ended costs no sync: reset only those (when any).
            rows = ResetRows(done, torch.from_numpy(np.flatnonzero(done.numpy())))  # 3x faster than nonzero()
            if rows.ids.numel() == 0:
                return final_obs.clone(), reward.to(torch.float32), terminated, truncated, info
        else:
            rows = ResetRows(done)  # by mask: no device sync in the hot path
        self._reset_where(rows)
        self.elapsed = rows.fill(self.elapsed, 0)
        self.episode_return = rows.fill(self.episode_return, 0.0)
        # Rows that did not reset have the state final_obs was observed from: same numbers.
        obs = self._observe()
        return obs, reward.to(torch.float32), terminated, truncated, info

    def close(self) -> None:
        """Nothing to release: the state is plain tensors."""

    def _uniform(self, low: float, high: float, shape: tuple[int, ...]) -> Tensor:
        """Uniform samples in [low, high] from this env's own generator, in this env's dtype and device."""
        # one op (torch.rand and an affine map are three, twice the time of a small reset on a CPU)
        out = torch.empty(shape, device=self.device, dtype=self.dtype)
        return out.uniform_(low, high, generator=self.generator)
