"""gymnasium's v5 MuJoCo locomotion tasks as batched numpy: observation, reward, termination and reset noise.

Each task reproduces one gymnasium env (`gym_id`) over a batch of simulations: it reads the
MjData fields that env reads after `mj_step` (and `mj_rnePostConstraint`), stacked as `[B, ...]`
float64 arrays, and computes what the env's `step` computes, in the same order and dtypes, so
results agree to the last bit or nearly (see docs/envs.md). Fields are those of the state after
the step: like gymnasium, `xpos`, `xipos`, `cinert`, `cvel` and `qfrc_actuator` are whatever
`mj_step` left in MjData (computed before its last substep's integration, by RK4's last stage
for the RK4 models), and `cfrc_ext` is computed after the step from those.

A task's fields are gymnasium's keyword arguments for that env, with gymnasium's defaults, so
`env_kwargs` carry over from "gym:Ant-v5" (those that choose the model file, the main body or
which parts the observation includes are not supported). The physics itself is run by
`envs/mujoco_threads.py`; `envs/mujoco_batched.py` makes the VecEnv.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol, get_type_hints

import numpy as np

Fields = Mapping[str, np.ndarray]
"""MjData field name -> `[B, *field_shape]` float64 array, one row per simulation (`qpos`, `qvel`, `ctrl`, and
the task's `fields`)."""


class MujocoTask(Protocol):
    """What a gymnasium MuJoCo env computes around its physics, batched."""

    gym_id: ClassVar[str]
    """gymnasium's id of the env this task reproduces."""
    xml_file: ClassVar[str]
    """The model file, in gymnasium's `envs/mujoco/assets`."""
    fields: ClassVar[tuple[str, ...]]
    """MjData fields it reads besides qpos, qvel and ctrl."""
    post_constraint: ClassVar[bool]
    """Whether it reads `cfrc_ext`, which gymnasium computes after every step with `mj_rnePostConstraint`."""
    frame_skip: int
    reset_noise_scale: float

    def observation_size(self, model: Any) -> int:
        """Length of one observation for this `mujoco.MjModel`."""

    def x_position(self, model: Any, f: Fields) -> np.ndarray:
        """`[B]`: the x coordinate whose change per `dt` is the forward velocity rewarded."""

    def observe(self, f: Fields) -> np.ndarray:
        """`[B, obs_dim]` float64 observations."""

    def reward(self, f: Fields, x_velocity: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """reward `[B]` float64 and terminated `[B]` bool after a step with `action` `[B, nu]` float32."""

    def reset_noise(self, rng: np.random.Generator, nq: int, nv: int) -> tuple[np.ndarray, np.ndarray]:
        """One env's noise added to the initial qpos `[nq]` and qvel `[nv]`, drawn as gymnasium draws it."""


def check_task_fields(task: Any, label: str) -> None:
    """Refuse, in one line naming the keyword, a task (a dataclass of gymnasium's keyword arguments) whose values
    gymnasium's formulas cannot use: a field of the wrong type (`frame_skip = 2.5`, `terminate_when_unhealthy =
    "false"`), an integer below 1, a weight that is not finite, a negative `reset_noise_scale`, or a `*_range`
    that is not (low, high) with low <= high (infinite ends are gymnasium's own defaults). Without this, such a
    value was accepted and failed, or turned the rewards NaN, at the first reset or step, after the preflight.
    Shared by the CPU tasks (`MujocoAnt-v5`, ...) and the Warp ones (`WarpAnt-v0`, ...); `label` names the env."""
    hints = get_type_hints(type(task))
    for f in fields(task):
        kind, value = hints[f.name], getattr(task, f.name)
        if kind is bool:
            ok, want = isinstance(value, bool), "true or false"
        elif kind is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1
            want = "an integer >= 1"
        elif kind is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            want = "a finite number"
            if f.name == "reset_noise_scale":
                ok, want = ok and value >= 0, "a finite number >= 0"
        elif kind is str:
            ok, want = isinstance(value, str), "a string"
        else:  # tuple[float, float]: a range; NaN compares false, so it fails `low <= high`
            ok = (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
                  and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
                  and value[0] <= value[1])
            want = "(low, high) with low <= high"
        if not ok:
            raise ValueError(f"{label}: {f.name} must be {want}, got {value!r}")


def _uniform_noise(rng: np.random.Generator, nq: int, nv: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """qpos and qvel both uniform in ±scale (Hopper, Walker2d, Humanoid), qpos drawn first."""
    return rng.uniform(low=-scale, high=scale, size=nq), rng.uniform(low=-scale, high=scale, size=nv)


def _normal_velocity_noise(rng: np.random.Generator, nq: int, nv: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """qpos uniform in ±scale, qvel scale·N(0, 1) (Ant, HalfCheetah), qpos drawn first."""
    return rng.uniform(low=-scale, high=scale, size=nq), scale * rng.standard_normal(nv)


def _action_cost(weight: float, action: np.ndarray) -> np.ndarray:
    """`weight`·|a|² per row, summed in float32 as gymnasium sums the float32 action it was given."""
    return weight * np.sum(np.square(action), axis=1)


@dataclass(frozen=True)
class Ant:
    """gymnasium's Ant-v5: obs qpos[2:], qvel, clip(cfrc_ext[1:]) (105); the torso's xpos gives the velocity."""

    gym_id: ClassVar[str] = "Ant-v5"
    xml_file: ClassVar[str] = "ant.xml"
    fields: ClassVar[tuple[str, ...]] = ("xpos", "cfrc_ext")
    post_constraint: ClassVar[bool] = True
    main_body: ClassVar[int] = 1  # the torso
    frame_skip: int = 5
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.5
    contact_cost_weight: float = 5e-4
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 0.1

    def observation_size(self, model: Any) -> int:
        return model.nq - 2 + model.nv + (model.nbody - 1) * 6

    def x_position(self, model: Any, f: Fields) -> np.ndarray:
        return f["xpos"][:, self.main_body, 0]

    def _contact_forces(self, f: Fields) -> np.ndarray:
        return np.clip(f["cfrc_ext"], *self.contact_force_range)

    def observe(self, f: Fields) -> np.ndarray:
        qpos = f["qpos"]
        contact = self._contact_forces(f)[:, 1:].reshape(len(qpos), -1)
        return np.concatenate((qpos[:, 2:], f["qvel"], contact), axis=1)

    def reward(self, f: Fields, x_velocity: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        qpos, qvel = f["qpos"], f["qvel"]
        z = qpos[:, 2]
        finite = np.isfinite(qpos).all(axis=1) & np.isfinite(qvel).all(axis=1)
        healthy = finite & (self.healthy_z_range[0] <= z) & (z <= self.healthy_z_range[1])
        contact = self._contact_forces(f)
        contact_cost = self.contact_cost_weight * np.sum(np.square(contact.reshape(len(z), -1)), axis=1)
        rewards = x_velocity * self.forward_reward_weight + healthy * self.healthy_reward
        costs = _action_cost(self.ctrl_cost_weight, action) + contact_cost
        return rewards - costs, ~healthy & self.terminate_when_unhealthy

    def reset_noise(self, rng: np.random.Generator, nq: int, nv: int) -> tuple[np.ndarray, np.ndarray]:
        return _normal_velocity_noise(rng, nq, nv, self.reset_noise_scale)


@dataclass(frozen=True)
class HalfCheetah:
    """gymnasium's HalfCheetah-v5: obs qpos[1:], qvel (17); never terminates."""

    gym_id: ClassVar[str] = "HalfCheetah-v5"
    xml_file: ClassVar[str] = "half_cheetah.xml"
    fields: ClassVar[tuple[str, ...]] = ()
    post_constraint: ClassVar[bool] = False
    frame_skip: int = 5
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1

    def observation_size(self, model: Any) -> int:
        return model.nq - 1 + model.nv

    def x_position(self, model: Any, f: Fields) -> np.ndarray:
        return f["qpos"][:, 0]

    def observe(self, f: Fields) -> np.ndarray:
        return np.concatenate((f["qpos"][:, 1:], f["qvel"]), axis=1)

    def reward(self, f: Fields, x_velocity: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        reward = self.forward_reward_weight * x_velocity - _action_cost(self.ctrl_cost_weight, action)
        return reward, np.zeros(len(reward), dtype=bool)

    def reset_noise(self, rng: np.random.Generator, nq: int, nv: int) -> tuple[np.ndarray, np.ndarray]:
        return _normal_velocity_noise(rng, nq, nv, self.reset_noise_scale)


def _inside(low: float, x: np.ndarray, high: float) -> np.ndarray:
    """low < x < high, elementwise (gymnasium's planar walkers use open intervals)."""
    return (low < x) & (x < high)


class _PlanarWalker:
    """What Hopper-v5 and Walker2d-v5 share: observation qpos[1:] and qvel clipped to ±10, forward reward plus a
    healthy reward less the control cost, termination when unhealthy, uniform reset noise. A walker says what
    healthy is (`healthy`) and holds the fields the methods read."""

    forward_reward_weight: float
    ctrl_cost_weight: float
    healthy_reward: float
    terminate_when_unhealthy: bool
    healthy_z_range: tuple[float, float]
    healthy_angle_range: tuple[float, float]
    reset_noise_scale: float

    def healthy(self, f: Fields) -> np.ndarray:
        """Whether each env's height and torso angle are in their ranges (open intervals, as gymnasium's)."""
        qpos = f["qpos"]
        return (_inside(self.healthy_z_range[0], qpos[:, 1], self.healthy_z_range[1])
                & _inside(self.healthy_angle_range[0], qpos[:, 2], self.healthy_angle_range[1]))

    def observation_size(self, model: Any) -> int:
        return model.nq - 1 + model.nv

    def x_position(self, model: Any, f: Fields) -> np.ndarray:
        return f["qpos"][:, 0]

    def observe(self, f: Fields) -> np.ndarray:
        return np.concatenate((f["qpos"][:, 1:], np.clip(f["qvel"], -10, 10)), axis=1)

    def reward(self, f: Fields, x_velocity: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        healthy = self.healthy(f)
        rewards = self.forward_reward_weight * x_velocity + healthy * self.healthy_reward
        return rewards - _action_cost(self.ctrl_cost_weight, action), ~healthy & self.terminate_when_unhealthy

    def reset_noise(self, rng: np.random.Generator, nq: int, nv: int) -> tuple[np.ndarray, np.ndarray]:
        return _uniform_noise(rng, nq, nv, self.reset_noise_scale)


@dataclass(frozen=True)
class Hopper(_PlanarWalker):
    """gymnasium's Hopper-v5: obs qpos[1:], clip(qvel, ±10) (11); unhealthy when the state, height or angle
    leaves its range."""

    gym_id: ClassVar[str] = "Hopper-v5"
    xml_file: ClassVar[str] = "hopper.xml"
    fields: ClassVar[tuple[str, ...]] = ()
    post_constraint: ClassVar[bool] = False
    frame_skip: int = 4
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_state_range: tuple[float, float] = (-100.0, 100.0)
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)
    reset_noise_scale: float = 5e-3

    def healthy(self, f: Fields) -> np.ndarray:
        """Also every state entry after the first two (qpos[2:] and qvel) in `healthy_state_range`."""
        state = np.concatenate((f["qpos"], f["qvel"]), axis=1)[:, 2:]
        low, high = self.healthy_state_range
        return _inside(low, state, high).all(axis=1) & super().healthy(f)


@dataclass(frozen=True)
class Walker2d(_PlanarWalker):
    """gymnasium's Walker2d-v5: obs qpos[1:], clip(qvel, ±10) (17); unhealthy when the height or angle leaves
    its range."""

    gym_id: ClassVar[str] = "Walker2d-v5"
    xml_file: ClassVar[str] = "walker2d_v5.xml"
    fields: ClassVar[tuple[str, ...]] = ()
    post_constraint: ClassVar[bool] = False
    frame_skip: int = 4
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.8, 2.0)
    healthy_angle_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 5e-3


@dataclass(frozen=True)
class Humanoid:
    """gymnasium's Humanoid-v5: obs qpos[2:], qvel, cinert[1:], cvel[1:], qfrc_actuator[6:], cfrc_ext[1:] (348);
    the centre of mass gives the velocity."""

    gym_id: ClassVar[str] = "Humanoid-v5"
    xml_file: ClassVar[str] = "humanoid.xml"
    fields: ClassVar[tuple[str, ...]] = ("xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext")
    post_constraint: ClassVar[bool] = True
    frame_skip: int = 5
    forward_reward_weight: float = 1.25
    ctrl_cost_weight: float = 0.1
    contact_cost_weight: float = 5e-7
    contact_cost_range: tuple[float, float] = (-np.inf, 10.0)
    healthy_reward: float = 5.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (1.0, 2.0)
    reset_noise_scale: float = 1e-2

    def observation_size(self, model: Any) -> int:
        return model.nq - 2 + model.nv + (model.nbody - 1) * (10 + 6 + 6) + model.nv - 6

    def x_position(self, model: Any, f: Fields) -> np.ndarray:
        # gymnasium's mass_center: einsum("b,bj->j", body_mass, xipos) / body_mass.sum(), per simulation
        return np.einsum("b,nbj->nj", model.body_mass, f["xipos"])[:, 0] / model.body_mass.sum()

    def observe(self, f: Fields) -> np.ndarray:
        n = len(f["qpos"])
        return np.concatenate((f["qpos"][:, 2:], f["qvel"], f["cinert"][:, 1:].reshape(n, -1),
                               f["cvel"][:, 1:].reshape(n, -1), f["qfrc_actuator"][:, 6:],
                               f["cfrc_ext"][:, 1:].reshape(n, -1)), axis=1)

    def reward(self, f: Fields, x_velocity: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = f["qpos"][:, 2]
        healthy = _inside(self.healthy_z_range[0], z, self.healthy_z_range[1])
        # Humanoid charges the controls as MjData holds them (float64), not the float32 action
        ctrl_cost = self.ctrl_cost_weight * np.sum(np.square(f["ctrl"]), axis=1)
        contact_cost = self.contact_cost_weight * np.sum(np.square(f["cfrc_ext"].reshape(len(z), -1)), axis=1)
        contact_cost = np.clip(contact_cost, *self.contact_cost_range)
        rewards = self.forward_reward_weight * x_velocity + healthy * self.healthy_reward
        return rewards - (ctrl_cost + contact_cost), ~healthy & self.terminate_when_unhealthy

    def reset_noise(self, rng: np.random.Generator, nq: int, nv: int) -> tuple[np.ndarray, np.ndarray]:
        return _uniform_noise(rng, nq, nv, self.reset_noise_scale)


TASKS: dict[str, type[MujocoTask]] = {
    f"Mujoco{task.gym_id}": task for task in (Ant, HalfCheetah, Hopper, Walker2d, Humanoid)  # type: ignore[misc]
}
"""Our env names ("MujocoAnt-v5", ...) -> the task each builds."""
