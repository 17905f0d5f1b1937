"""gymnasium's v5 locomotion tasks, as what they add to their MuJoCo model: observation, reward, termination.

Each task is a frozen dataclass whose fields are the gymnasium v5 env's keyword arguments of the
same name and default (those that are numbers in its formulas), plus `max_episode_steps` (1000,
gymnasium's registered limit). Its methods are gymnasium's formulas in torch over a `SimView` of
B worlds; the engine (`vec_env.WarpVecEnv`) steps the physics and keeps the episodes. Read beside
gymnasium's `envs/mujoco/<task>_v5.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch
from torch import Tensor

from dask_podracer.envs.mujoco_tasks import check_task_fields
from dask_podracer.envs.warp.views import SimView

Range = tuple[float, float]


@dataclass(frozen=True, kw_only=True)
class LocomotionTask:
    """What the engine needs of a task; the fields every gymnasium v5 locomotion env has."""

    gym_id: ClassVar[str]
    """The gymnasium env this task follows."""
    normal_qvel_noise: ClassVar[bool] = False
    """Reset noise of qvel: scale·N(0, 1) (Ant, HalfCheetah) or U(±scale) (the others); qpos's is always U(±scale)."""

    xml_file: str
    """The MJCF model: one of gymnasium's assets by name, or an absolute path."""
    frame_skip: int
    """MuJoCo steps per env step."""
    forward_reward_weight: float
    ctrl_cost_weight: float
    reset_noise_scale: float
    max_episode_steps: int = 1000
    """The time limit (gymnasium's registered one; not an env keyword there, a `gymnasium.make` one)."""

    def __post_init__(self) -> None:
        # the CPU tasks' checks: types too (`frame_skip = 2.5`, `terminate_when_unhealthy = "false"` and NaN weights
        # were accepted here and failed, or gave NaN rewards, only once the env stepped)
        check_task_fields(self, f"the Warp version of {self.gym_id}")

    @classmethod
    def configured(cls, **kwargs: Any) -> LocomotionTask:
        """The task with some defaults replaced (a config's `env_kwargs`: TOML arrays become tuples)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"the Warp version of {cls.gym_id} takes no keyword argument {', '.join(unknown)}; "
                            f"it takes {', '.join(sorted(known))}, and nconmax, njmax")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()})

    def forward_position(self, sim: SimView) -> Tensor:
        """[B] the x coordinate whose change over a step, divided by dt, is the rewarded forward velocity."""
        raise NotImplementedError

    def observe(self, sim: SimView) -> Tensor:
        """[B, obs_dim] float32, a new tensor."""
        raise NotImplementedError

    def outcome(self, sim: SimView, x_velocity: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Reward [B] and terminated [B] (bool) of the step that led to `sim`; `actions` [B, nu]."""
        raise NotImplementedError


def _ctrl_cost(weight: float, actions: Tensor) -> Tensor:
    """[B] weight·|a|², gymnasium's control cost."""
    return weight * actions.square().sum(-1)


def _inside(x: Tensor, bounds: Range) -> Tensor:
    """low < x < high, elementwise: gymnasium's health checks are strict, except Ant's."""
    return (bounds[0] < x) & (x < bounds[1])


@dataclass(frozen=True, kw_only=True)
class Ant(LocomotionTask):
    """Ant-v5. Observation [B, 105]: qpos[2:] (13), qvel (14), clip(cfrc_ext[1:]) (13 bodies × 6).

    Reward: x velocity of the torso + 1 (if healthy) − 0.5·|a|² − 5e-4·|clip(cfrc_ext)|². Terminated
    when unhealthy: torso z outside [0.2, 1] (inclusive) or a non-finite state.
    """

    gym_id: ClassVar[str] = "Ant-v5"
    normal_qvel_noise: ClassVar[bool] = True
    xml_file: str = "ant.xml"
    frame_skip: int = 5
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.5
    contact_cost_weight: float = 5e-4
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: Range = (0.2, 1.0)
    contact_force_range: Range = (-1.0, 1.0)
    reset_noise_scale: float = 0.1

    def forward_position(self, sim: SimView) -> Tensor:
        # gymnasium reads the torso's xpos, which lags qpos by one substep after a step
        return sim.xpos[:, 1, 0]

    def _contact_forces(self, sim: SimView) -> Tensor:
        return sim.cfrc_ext.clamp(*self.contact_force_range)

    def observe(self, sim: SimView) -> Tensor:
        contact = self._contact_forces(sim)[:, 1:].flatten(1)
        return torch.cat([sim.qpos[:, 2:], sim.qvel, contact], dim=-1)

    def outcome(self, sim: SimView, x_velocity: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        z = sim.qpos[:, 2]
        finite = torch.isfinite(sim.qpos).all(-1) & torch.isfinite(sim.qvel).all(-1)
        healthy = finite & (z >= self.healthy_z_range[0]) & (z <= self.healthy_z_range[1])
        contact_cost = self.contact_cost_weight * self._contact_forces(sim).square().sum((-1, -2))
        reward = (self.forward_reward_weight * x_velocity + self.healthy_reward * healthy.float()
                  - _ctrl_cost(self.ctrl_cost_weight, actions) - contact_cost)
        return reward, ~healthy & self.terminate_when_unhealthy


@dataclass(frozen=True, kw_only=True)
class Humanoid(LocomotionTask):
    """Humanoid-v5. Observation [B, 348]: qpos[2:] (22), qvel (23), cinert[1:] (13 × 10), cvel[1:] (13 × 6),
    qfrc_actuator[6:] (17), cfrc_ext[1:] (13 × 6).

    Reward: 1.25 · x velocity of the centre of mass + 5 (if healthy) − 0.1·|ctrl|²
    − min(5e-7·|cfrc_ext|², 10). Terminated when the torso's z leaves (1, 2).
    """

    gym_id: ClassVar[str] = "Humanoid-v5"
    xml_file: str = "humanoid.xml"
    frame_skip: int = 5
    forward_reward_weight: float = 1.25
    ctrl_cost_weight: float = 0.1
    contact_cost_weight: float = 5e-7
    contact_cost_range: Range = (-math.inf, 10.0)
    healthy_reward: float = 5.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: Range = (1.0, 2.0)
    reset_noise_scale: float = 1e-2

    def forward_position(self, sim: SimView) -> Tensor:
        # gymnasium's mass_center: the mass-weighted mean of the bodies' xipos (lagging a substep, as xpos)
        return (sim.xipos[..., 0] * sim.body_mass).sum(-1) / sim.body_mass.sum()

    def observe(self, sim: SimView) -> Tensor:
        return torch.cat([sim.qpos[:, 2:], sim.qvel, sim.cinert[:, 1:].flatten(1), sim.cvel[:, 1:].flatten(1),
                          sim.qfrc_actuator[:, 6:], sim.cfrc_ext[:, 1:].flatten(1)], dim=-1)

    def outcome(self, sim: SimView, x_velocity: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        healthy = _inside(sim.qpos[:, 2], self.healthy_z_range)
        contact_cost = (self.contact_cost_weight * sim.cfrc_ext.square().sum((-1, -2))).clamp(*self.contact_cost_range)
        # gymnasium charges data.ctrl, which holds the actions as written
        reward = (self.forward_reward_weight * x_velocity + self.healthy_reward * healthy.float()
                  - _ctrl_cost(self.ctrl_cost_weight, sim.ctrl) - contact_cost)
        return reward, ~healthy & self.terminate_when_unhealthy


@dataclass(frozen=True, kw_only=True)
class HalfCheetah(LocomotionTask):
    """HalfCheetah-v5. Observation [B, 17]: qpos[1:] (8), qvel (9). Reward: x velocity − 0.1·|a|². Never terminates."""

    gym_id: ClassVar[str] = "HalfCheetah-v5"
    normal_qvel_noise: ClassVar[bool] = True
    xml_file: str = "half_cheetah.xml"
    frame_skip: int = 5
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1

    def forward_position(self, sim: SimView) -> Tensor:
        return sim.qpos[:, 0]  # the root's x slide joint, after the step (no lag, unlike Ant's xpos)

    def observe(self, sim: SimView) -> Tensor:
        return torch.cat([sim.qpos[:, 1:], sim.qvel], dim=-1)

    def outcome(self, sim: SimView, x_velocity: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        reward = self.forward_reward_weight * x_velocity - _ctrl_cost(self.ctrl_cost_weight, actions)
        return reward, torch.zeros_like(x_velocity, dtype=torch.bool)


@dataclass(frozen=True, kw_only=True)
class _PlanarWalker(LocomotionTask):
    """What Hopper-v5 and Walker2d-v5 share. Observation qpos[1:], clip(qvel, ±10). Reward: x velocity + 1 (if
    healthy) − 1e-3·|a|². Terminated when unhealthy: z (qpos[1]) or the torso angle (qpos[2]) outside its range,
    and whatever else a walker adds to `healthy`."""

    frame_skip: int = 4
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: Range
    healthy_angle_range: Range
    reset_noise_scale: float = 5e-3

    def healthy(self, sim: SimView) -> Tensor:
        return _inside(sim.qpos[:, 1], self.healthy_z_range) & _inside(sim.qpos[:, 2], self.healthy_angle_range)

    def forward_position(self, sim: SimView) -> Tensor:
        return sim.qpos[:, 0]

    def observe(self, sim: SimView) -> Tensor:
        return torch.cat([sim.qpos[:, 1:], sim.qvel.clamp(-10.0, 10.0)], dim=-1)

    def outcome(self, sim: SimView, x_velocity: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        healthy = self.healthy(sim)
        reward = (self.forward_reward_weight * x_velocity + self.healthy_reward * healthy.float()
                  - _ctrl_cost(self.ctrl_cost_weight, actions))
        return reward, ~healthy & self.terminate_when_unhealthy


@dataclass(frozen=True, kw_only=True)
class Hopper(_PlanarWalker):
    """Hopper-v5. Observation [B, 11]: qpos[1:] (5), clip(qvel, ±10) (6). Also unhealthy when any of
    (qpos, qvel)[2:] leaves (−100, 100); z range (0.7, ∞), angle range (−0.2, 0.2)."""

    gym_id: ClassVar[str] = "Hopper-v5"
    xml_file: str = "hopper.xml"
    healthy_state_range: Range = (-100.0, 100.0)
    healthy_z_range: Range = (0.7, math.inf)
    healthy_angle_range: Range = (-0.2, 0.2)

    def healthy(self, sim: SimView) -> Tensor:
        state = torch.cat([sim.qpos, sim.qvel], dim=-1)[:, 2:]
        return _inside(state, self.healthy_state_range).all(-1) & super().healthy(sim)


@dataclass(frozen=True, kw_only=True)
class Walker2d(_PlanarWalker):
    """Walker2d-v5. Observation [B, 17]: qpos[1:] (8), clip(qvel, ±10) (9); z range (0.8, 2), angle range
    (−1, 1)."""

    gym_id: ClassVar[str] = "Walker2d-v5"
    xml_file: str = "walker2d_v5.xml"
    healthy_z_range: Range = (0.8, 2.0)
    healthy_angle_range: Range = (-1.0, 1.0)


TASKS: dict[str, type[LocomotionTask]] = {
    "WarpAnt-v0": Ant,
    "WarpHumanoid-v0": Humanoid,
    "WarpHalfCheetah-v0": HalfCheetah,
    "WarpHopper-v0": Hopper,
    "WarpWalker2d-v0": Walker2d,
}
"""Our env name of each task."""
