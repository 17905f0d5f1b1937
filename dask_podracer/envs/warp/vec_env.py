"""`WarpVecEnv`: B copies of a MuJoCo model simulated by MuJoCo Warp as one batch, observed and rewarded by a task.

MuJoCo Warp (extra `warp`: `mujoco-warp`, `warp-lang`) runs MuJoCo's pipeline as Warp kernels over
all worlds at once, on CUDA or (slowly, for tests) on the CPU. Its arrays are shared with torch
without copies (`views.SimView`), so a task's observation, reward and termination are torch code
(`tasks.py`). Kernels compile on first use (~25-60 s on a 2-core CPU, ~80 s for CUDA) and are
cached in ~/.cache/warp. Differences from gymnasium's envs are listed in docs/envs.md; in short:
float32 instead of float64 physics, MuJoCo Warp's own solver and contact code (Newton where a
model asks for PGS), reset noise from torch's generator instead of numpy's.
"""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import ResetRows, TorchVecEnv
from dask_podracer.envs.warp.launch import CapturedCall, WarpLaunches
from dask_podracer.envs.warp.model import load_mujoco_model
from dask_podracer.envs.warp.tasks import LocomotionTask
from dask_podracer.envs.warp.views import SimView


class WarpVecEnv(TorchVecEnv):
    """`num_envs` worlds of `task`'s model on `device`; the task's observation, reward and termination.

    A step writes the actions into `ctrl`, runs `frame_skip` MuJoCo steps and `rne_postconstraint`
    (for `cfrc_ext`, as gymnasium's `mj_rnePostConstraint`), then asks the task. A reset puts the
    chosen worlds where gymnasium's reset does: `mj_resetData`, noisy qpos/qvel, then the
    kinematics of `mj_forward` (positions, centre-of-mass frames, velocities) with zero
    `cfrc_ext` and `qfrc_actuator`. `nconmax`/`njmax`: MuJoCo Warp's contact and constraint
    capacity per world (its defaults when None).
    """

    copyable = False  # the physical state lives in Warp arrays, which a deep copy does not duplicate

    def __init__(self, task: LocomotionTask, num_envs: int, device: str | torch.device = "cpu",
                 seed: int | None = None, nconmax: int | None = None, njmax: int | None = None) -> None:
        try:
            import mujoco_warp as mjw
            import warp  # noqa: F401  (its absence is the error to report)
        except ImportError as e:
            raise ImportError(f"the Warp version of {task.gym_id} needs MuJoCo Warp: "
                              f"pip install 'dask-podracer[warp]' ({e})") from e

        for key, value in (("nconmax", nconmax), ("njmax", njmax)):
            # 0 is taken by MuJoCo Warp and drops every contact (nconmax) or constraint (njmax): the bodies fall
            # through the floor, silently for nconmax, while the run trains on
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
                raise ValueError(f"the Warp version of {task.gym_id}: {key} must be an integer >= 1 (per world; "
                                 f"unset: MuJoCo Warp's default for the model), got {value!r}")
        super().__init__(num_envs, device, seed, torch.float32)  # MuJoCo Warp computes in float32
        self._mjw = mjw
        self._task = task
        self.max_episode_steps = task.max_episode_steps
        self._launches = WarpLaunches(self.device)
        mjm = load_mujoco_model(task.xml_file)
        self.dt = float(mjm.opt.timestep) * task.frame_skip
        with self._launches.wp.ScopedDevice(self._launches.wp_device):
            self.model = mjw.put_model(mjm)
            self.data = mjw.make_data(mjm, nworld=self.num_envs, nconmax=nconmax, njmax=njmax)
        self.sim = SimView.of(self.data, mjm, self.device)
        self.init_qpos = torch.as_tensor(mjm.qpos0, dtype=torch.float32, device=self.device)
        self.init_qvel = torch.zeros(mjm.nv, dtype=torch.float32, device=self.device)
        self._advance = CapturedCall(self._physics_step, self._launches)
        # What the last step or reset led to, per world: the observation, and the forward position
        # that the next step's velocity starts from. Kept, not re-read, because a reset recomputes
        # the kinematics of every world, and the others must keep what their step led to.
        self._obs = task.observe(self.sim)
        self._position = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (self._obs.shape[-1],), np.float32)
        low, high = mjm.actuator_ctrlrange.T.astype(np.float32)
        self.single_action_space = gym.spaces.Box(low, high, dtype=np.float32)

    @property
    def task(self) -> LocomotionTask:
        """The task definition (its fields are gymnasium's keyword arguments); fixed for the env's life."""
        return self._task

    def _physics_step(self) -> None:
        """One env step of physics: `frame_skip` MuJoCo steps, then cfrc_ext. Warp launches only (captured)."""
        for _ in range(self._task.frame_skip):
            self._mjw.step(self.model, self.data)
        self._mjw.rne_postconstraint(self.model, self.data)

    def _kinematics(self) -> None:
        """What gymnasium's `mj_forward` after a reset leaves for the tasks to read: xpos, xipos, cinert, cvel."""
        self._mjw.kinematics(self.model, self.data)
        self._mjw.com_pos(self.model, self.data)
        self._mjw.com_vel(self.model, self.data)

    def _place(self, mask: Tensor, qpos: Tensor, qvel: Tensor) -> None:
        """Reset the worlds in `mask` [B] to `qpos` [B, nq] and `qvel` [B, nv] (rows outside the mask ignored)."""
        wp, sim = self._launches.wp, self.sim
        # reset_data clears each chosen world (time, warm start, forces, ctrl) as mj_resetData does.
        self._launches.run(lambda: self._mjw.reset_data(self.model, self.data, reset=wp.from_torch(mask.contiguous())))
        rows = mask.unsqueeze(-1)
        # Written in place: the views are the Warp arrays.
        sim.qpos.copy_(torch.where(rows, qpos, sim.qpos))
        sim.qvel.copy_(torch.where(rows, qvel, sim.qvel))
        # mj_resetData zeroes these and mj_forward leaves cfrc_ext alone and computes qfrc_actuator from ctrl = 0.
        sim.cfrc_ext.masked_fill_(rows.unsqueeze(-1), 0.0)
        sim.qfrc_actuator.masked_fill_(rows, 0.0)
        self._launches.run(self._kinematics)  # every world: the others' kept observation is not re-read
        self._obs = torch.where(rows, self._task.observe(sim), self._obs)
        self._position = torch.where(mask, self._task.forward_position(sim), self._position)

    def _reset_where(self, rows: ResetRows) -> None:
        s, nq, nv = self._task.reset_noise_scale, self.init_qpos.numel(), self.init_qvel.numel()
        # Drawn for all B rows only on a GPU (rows.ids None); on the CPU for the k that reset.
        qpos = self.init_qpos + self._uniform(-s, s, rows.shape(nq))
        if self._task.normal_qvel_noise:
            qvel = self.init_qvel + s * torch.randn(rows.shape(nv), generator=self.generator, device=self.device)
        else:
            qvel = self.init_qvel + self._uniform(-s, s, rows.shape(nv))
        self._place(rows.mask, rows.put(self.sim.qpos, qpos), rows.put(self.sim.qvel, qvel))

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        actions = actions.reshape(self.num_envs, -1).to(torch.float32)
        self.sim.ctrl.copy_(actions)
        self._advance()
        position = self._task.forward_position(self.sim).clone()  # may be a view of the Warp array, which moves on
        x_velocity = (position - self._position) / self.dt
        self._position = position
        self._obs = self._task.observe(self.sim)
        return self._task.outcome(self.sim, x_velocity, actions)

    def _observe(self) -> Tensor:
        return self._obs.clone()

    def set_state(self, qpos: Tensor, qvel: Tensor) -> Tensor:
        """Place every world in a given state, as gymnasium's reset then `set_state` do; return its observation.

        qpos [B, nq], qvel [B, nv]; the observation [B, obs_dim]. For step-for-step comparisons: the
        episode clocks are not restarted.
        """
        mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._place(mask, torch.as_tensor(qpos, dtype=torch.float32, device=self.device).reshape(self.sim.qpos.shape),
                    torch.as_tensor(qvel, dtype=torch.float32, device=self.device).reshape(self.sim.qvel.shape))
        return self._observe()


def make_warp_env(task: type[LocomotionTask], num_envs: int, device: str | torch.device = "cpu",
                  seed: int | None = None, nconmax: int | None = None, njmax: int | None = None,
                  **task_kwargs: Any) -> WarpVecEnv:
    """`task` (a class of `tasks.py`) with `task_kwargs` replacing its defaults, as `num_envs` Warp worlds."""
    return WarpVecEnv(task.configured(**task_kwargs), num_envs, device=device, seed=seed, nconmax=nconmax,
                      njmax=njmax)
