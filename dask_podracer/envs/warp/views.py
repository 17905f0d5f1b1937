"""Torch views of the MuJoCo Warp arrays that tasks read: the same memory, so a task's formulas are torch code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class SimView:
    """The state of B worlds as tensors over MuJoCo Warp's own arrays (`wp.to_torch`: no copies).

    Reading one sees the simulation as it is now; writing one writes the simulation. After a
    step, the position-dependent quantities (`xpos`, `xipos`, `cinert`, `cvel`, `qfrc_actuator`)
    are those of the last substep's start, as MuJoCo's `mj_step` leaves them, and `qpos`/`qvel`
    those after it.
    """

    qpos: Tensor
    """[B, nq] joint positions."""
    qvel: Tensor
    """[B, nv] joint velocities."""
    ctrl: Tensor
    """[B, nu] actuator controls (the actions, as written)."""
    xpos: Tensor
    """[B, nbody, 3] body frame origins."""
    xipos: Tensor
    """[B, nbody, 3] body centres of mass."""
    cinert: Tensor
    """[B, nbody, 10] body inertias in the centre-of-mass frame (MuJoCo's layout)."""
    cvel: Tensor
    """[B, nbody, 6] body velocities in the centre-of-mass frame (rotation, then translation)."""
    qfrc_actuator: Tensor
    """[B, nv] actuator forces in joint space."""
    cfrc_ext: Tensor
    """[B, nbody, 6] external (contact) forces on each body, from `rne_postconstraint`."""
    body_mass: Tensor
    """[nbody] body masses (the model's, the same in every world)."""

    @classmethod
    def of(cls, data: Any, mjm: Any, device: torch.device) -> SimView:
        """Views of MuJoCo Warp `data`'s arrays, and `mjm`'s (the `mujoco.MjModel`'s) body masses on `device`."""
        import warp as wp

        arrays = {name: wp.to_torch(getattr(data, name)) for name in (
            "qpos", "qvel", "ctrl", "xpos", "xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext")}
        return cls(**arrays, body_mass=torch.as_tensor(mjm.body_mass, dtype=torch.float32, device=device))
