"""What every algorithm provides, and the registry that maps a config's name to it.

An agent is a worker (acts in a VecEnv, fills its buffer) and a learner (updates
networks from that buffer) behind one small interface, so a training segment can
drive any algorithm the same way. Its whole state is `state_dict()`: nested dicts
and lists of tensors and plain values, which the store keeps as named arrays.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import torch
from torch import Tensor, nn

from dask_podracer.envs import VecEnv
from dask_podracer.typed_fields import ConfigError, dataclass_from

Metrics = dict[str, float]


class Agent(Protocol):
    algorithm: ClassVar[str]
    config: Any  # the algorithm's frozen hyper-parameter dataclass

    def act(self, obs: Tensor, deterministic: bool = True) -> Tensor:
        """Actions `[B, *act_shape]` for observations `[B, *obs_shape]`, in the env's action bounds."""
        ...

    def train_iteration(self, env: VecEnv, obs: Tensor) -> tuple[Tensor, int, Metrics]:
        """Collect some transitions from `env` starting at `obs`, learn from them.

        Returns the env's current observation, the env steps taken (summed over envs)
        and scalar metrics of this iteration (losses, entropy, ...).
        """
        ...

    def finish(self) -> None:
        """Bring the agent to rest after its last `train_iteration`: work it still owes is done and stopped
        (a pipelined learner makes its outstanding updates and ends), so the parameters are final. A no-op for an
        agent that does all its work inside `train_iteration` (PPO, A2C)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore networks, optimizers and buffers; keep *this* agent's hyper-parameters.

        A child segment may have changed learning rates: they win over the ones stored
        in the parent's optimizer state.
        """
        ...


class Peers(Protocol):
    """The learners that train one agent together (`[learners]`, train/learners.py), as an agent sees them: what
    must come out the same on every learner is reduced here, identically on each (`ALONE`: one learner)."""

    size: int
    """How many learners, this one included."""

    def mean(self, value: Tensor) -> Tensor:
        """`value`'s mean over the learners, the same tensor on each."""
        ...

    def gather(self, value: Tensor) -> Tensor:
        """`[size, *value.shape]`: every learner's `value`, in rank order, the same on each."""
        ...


class Alone:
    """One learner: `Peers` that reduce nothing."""

    size = 1

    def mean(self, value: Tensor) -> Tensor:
        return value

    def gather(self, value: Tensor) -> Tensor:
        return value.unsqueeze(0)


ALONE = Alone()


AgentFactory = Callable[[gym.spaces.Space, gym.spaces.Space, Any, torch.device], Agent]


@dataclasses.dataclass(frozen=True)
class AlgorithmInfo:
    name: str
    config_cls: type
    factory: AgentFactory
    tunable: tuple[str, ...]
    """Hyper-parameters a child may change and still load its parent's checkpoint (a generator perturbs them)."""
    choices: Mapping[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    """The options of the categorical (non-numeric) tunable ones."""
    multi_agent: bool = False
    """Whether its agents are teams acting in a multi-agent VecEnv (envs/multi_agent/base.py); a config pairing a
    single-agent algorithm with a multi-agent env, or the reverse, is refused."""
    action_spaces: tuple[type, ...] = (gym.spaces.Discrete, gym.spaces.Box)
    """The kinds of single-agent action space its agents act in: a config pairing it with another kind is refused
    with the algorithms that do fit (`check_action_space`)."""
    data_parallel: bool = False
    """Whether several learners may train one of its agents, averaging gradients every step (`[learners]`,
    train/learners.py): its `train_iteration` makes the same optimiser steps on every learner for the same env
    steps, its optimisers are attributes of the agent, its update is eager (a captured one cannot all-reduce inside
    its graph), and whatever else depends on each learner's own data goes through the `Peers` its
    `join_peers(peers)` is given (PPO and A2C: `target_kl`'s early stop, the running normalisers' statistics), so
    that every learner's whole `state_dict()` stays identical."""


MOST_UPDATES_PER_TRANSITION = 1000.0
"""The largest `utd_ratio` (gradient updates per env transition) a config may ask for. Published replay ratios reach
128 (D'Oro et al. 2023); `utd_ratio = 1e300` passed every check, and each segment then trained forever: a run with a
wall-clock budget ended with 0 segments recorded and nothing said why, one without one never ended."""

MOST_EPOCHS = 1000
"""The most passes over one rollout (PPO and MAPPO's `epochs`; 3 to 30 is usual). `epochs = 10**12` likewise made
every segment train forever on its first rollout."""


_ALGORITHMS: dict[str, AlgorithmInfo] = {}


def register_algorithm(info: AlgorithmInfo) -> None:
    _ALGORITHMS[info.name] = info


def algorithm_info(name: str) -> AlgorithmInfo:
    try:
        return _ALGORITHMS[name]
    except KeyError:
        known = ", ".join(sorted(_ALGORITHMS))
        raise ValueError(f"unknown algorithm {name!r}; known algorithms: {known}") from None


def registered_algorithms() -> list[str]:
    return sorted(_ALGORITHMS)


def make_agent(name: str, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
               hparams: Mapping[str, Any], device: str | torch.device = "cpu") -> Agent:
    """Build a fresh agent of algorithm `name` with hyper-parameters `hparams` (a mapping), each held to its
    field's type and range as a config file's are: a ConfigError naming `hparams.<field>` otherwise."""
    info = algorithm_info(name)
    if not isinstance(hparams, Mapping):
        raise ConfigError(f"hparams must be a mapping of hyper-parameters, got {type(hparams).__name__}")
    config = algorithm_config(name, hparams)
    check_action_space(action_space, name)
    return info.factory(observation_space, action_space, config, torch.device(device))


def algorithm_config(name: str, hparams: Mapping[str, Any], field: str = "hparams") -> Any:
    """Algorithm `name`'s config dataclass of `hparams`, each held to its type and rules (a ConfigError or
    ValueError naming `field`.<key> when one is not)."""
    return dataclass_from(algorithm_info(name).config_cls, hparams, field)


def observation_width(space: gym.spaces.Space, algorithm: str) -> int:
    """The width of the flat observation `algorithm`'s networks take from `space`: a Box's size (a Box of any
    shape is flattened: PPO, A2C and IMPALA as they act, the off-policy agents in `obs_norm`). Any other space is
    refused here: its shape is None, which failed deep inside."""
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"{algorithm} needs a Box observation space, got {space}: flatten it "
                         f"(gymnasium.wrappers.FlattenObservation)")
    return math.prod(space.shape)


def check_action_space(space: gym.spaces.Space, algorithm: str) -> None:
    """Refuse an action space `algorithm` cannot act in, naming the algorithms that can (SAC on CartPole's
    Discrete(2)), and one every algorithm would misread: a Discrete that does not start at 0 (`Discrete(3,
    start=-1)`). Agents pick actions 0 .. n-1, which such an env reads as other actions, or refuses mid-segment."""
    info = algorithm_info(algorithm)
    if not info.multi_agent and not isinstance(space, info.action_spaces):
        kind = " or ".join("a continuous (Box)" if kind is gym.spaces.Box else f"a {kind.__name__}"
                           for kind in info.action_spaces)
        fitting = [name for name, other in sorted(_ALGORITHMS.items())
                   if not other.multi_agent and isinstance(space, other.action_spaces)]
        instead = f"; for {type(space).__name__} actions use {', '.join(fitting)}" if fitting else ""
        raise ValueError(f"{algorithm} needs {kind} action space, got {space}{instead}")
    if isinstance(space, gym.spaces.Discrete) and int(space.start) != 0:
        raise ValueError(f"{algorithm} picks Discrete actions from 0, but the action space is {space}: shift it to "
                         f"start at 0 (a gymnasium.ActionWrapper that adds {int(space.start)})")


def adam(params, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel: on a CPU it is ~5x faster per step than the default loop."""
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)


def regress(optimizer: torch.optim.Optimizer, loss: Tensor, max_grad_norm: float | None = None,
            params: list[nn.Parameter] | None = None) -> None:
    """One optimiser step on `loss` (zero grads, backward, optional global-norm clip, step)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm is not None and params is not None:
        nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Apply `lr` after loading an optimizer state (which carries the parent's rate)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
