"""Ant on MuJoCo Warp: `nworld` Ant models simulated as one batch, observed and rewarded like gymnasium's Ant-v5.

MuJoCo Warp (`pip install mujoco-warp`, extra `warp`) runs MuJoCo's pipeline as Warp
kernels over all worlds at once, on CUDA or (slowly, for tests) on the CPU. Its arrays
are shared with torch without copies (`wp.to_torch`), so the rest is torch code like our
other envs. Kernels compile on first use (~45 s on a 2-core CPU) and are cached in
~/.cache/warp. Differences from gymnasium's Ant-v5 are listed in docs/envs.md; in short:
float32 instead of float64 physics, MuJoCo Warp's own solver and contact code, reset noise
from torch's generator instead of numpy's.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from dask_podracer.envs.base import ResetRows, TorchVecEnv


def ant_xml_path() -> str:
    """gymnasium's ant.xml: the same model file Ant-v5 loads."""
    import gymnasium.envs.mujoco as gym_mujoco  # imported here: needs the `mujoco` extra

    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", "ant.xml")


class WarpAntVecEnv(TorchVecEnv):
    """`num_envs` Ants (gymnasium Ant-v5 defaults: frame_skip 5, 1000-step episodes, cfrc_ext in the obs).

    Observation `[B, 105]`: qpos[2:] (13), qvel (14), clip(cfrc_ext[1:], -1, 1) (13 bodies × 6).
    Action `[B, 8]`: joint torques in [-1, 1]. Reward: x velocity + 1 (if healthy)
    − 0.5·|a|² − 5e-4·|clip(cfrc_ext)|². Terminated when unhealthy (z outside [0.2, 1] or non-finite state).
    """

    frame_skip = 5
    ctrl_cost_weight = 0.5
    contact_cost_weight = 5e-4
    healthy_reward = 1.0
    healthy_z_range = (0.2, 1.0)
    reset_noise_scale = 0.1
    max_episode_steps = 1000
    copyable = False  # the physical state lives in Warp arrays, which a deep copy does not duplicate

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 nconmax: int | None = None, njmax: int | None = None) -> None:
        try:
            import mujoco
            import mujoco_warp as mjw
            import warp as wp
        except ImportError as e:
            raise ImportError(f"WarpAnt-v0 needs MuJoCo Warp: pip install 'dask-podracer[warp]' ({e})") from e

        super().__init__(num_envs, device, seed, torch.float32)  # Warp's MuJoCo computes in float32
        self._mjw, self._wp = mjw, wp
        self._wp_device = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index or 0}"
        mjm = mujoco.MjModel.from_xml_path(ant_xml_path())
        self.dt = float(mjm.opt.timestep) * self.frame_skip
        with wp.ScopedDevice(self._wp_device):
            self.model = mjw.put_model(mjm)
            self.data = mjw.make_data(mjm, nworld=self.num_envs, nconmax=nconmax, njmax=njmax)
        # Zero-copy torch views of the Warp arrays we read and write.
        view = wp.to_torch
        self.qpos, self.qvel, self.ctrl = view(self.data.qpos), view(self.data.qvel), view(self.data.ctrl)
        self.xpos, self.cfrc_ext = view(self.data.xpos), view(self.data.cfrc_ext)
        self.init_qpos = torch.as_tensor(mjm.qpos0, dtype=torch.float32, device=self.device)
        self.init_qvel = torch.zeros(mjm.nv, dtype=torch.float32, device=self.device)
        # The torso's xy as gymnasium sees it before a step: data.xpos, which lags qpos by one
        # substep (mj_step computes xpos before it integrates), or the new qpos right after a reset.
        self._xy_before = torch.zeros(self.num_envs, 2, dtype=torch.float32, device=self.device)
        obs_dim = (mjm.nq - 2) + mjm.nv + (mjm.nbody - 1) * 6
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        low, high = mjm.actuator_ctrlrange.T.astype(np.float32)
        self.single_action_space = gym.spaces.Box(low, high, dtype=np.float32)
        self._steps_taken = 0
        self._advance_graph: Any = None  # on CUDA, _advance captured as one CUDA graph after the first step

    def _warp_scope(self) -> Any:
        """Where Warp launches: on CUDA, torch's current stream, so Warp kernels run after the
        torch ops that wrote ctrl/qpos and before those that read the results, with no host sync."""
        wp = self._wp
        if self.device.type == "cpu":
            return wp.ScopedDevice("cpu")
        return wp.ScopedStream(wp.stream_from_torch(torch.cuda.current_stream(self.device)), sync_enter=False)

    def _reset_where(self, rows: ResetRows) -> None:
        mask, nq, nv = rows.mask, self.init_qpos.numel(), self.init_qvel.numel()
        s = self.reset_noise_scale
        qpos = self.init_qpos + self._uniform(-s, s, rows.shape(nq))
        qvel = self.init_qvel + s * torch.randn(rows.shape(nv), generator=self.generator, device=self.device)
        # reset_data clears each chosen world (time, warm start, forces) as mj_resetData does.
        with self._warp_scope():
            self._mjw.reset_data(self.model, self.data, reset=self._wp.from_torch(mask.contiguous()))
        # Written in place: qpos and qvel are views of the Warp arrays.
        self.qpos.copy_(rows.put(self.qpos, qpos))
        self.qvel.copy_(rows.put(self.qvel, qvel))
        # gymnasium's reset runs mj_forward, which leaves cfrc_ext at zero and xpos at the new qpos.
        self.cfrc_ext.masked_fill_(mask.view(self.num_envs, 1, 1), 0.0)
        self._xy_before = torch.where(mask.unsqueeze(-1), self.qpos[:, :2], self._xy_before)

    def _advance(self) -> None:
        """One env step of physics: `frame_skip` MuJoCo steps, then cfrc_ext."""
        for _ in range(self.frame_skip):
            self._mjw.step(self.model, self.data)
        self._mjw.rne_postconstraint(self.model, self.data)  # cfrc_ext, as gymnasium's mj_rnePostConstraint

    def _advance_on_cuda(self) -> None:
        """`_advance` as one CUDA graph launch on torch's current stream.

        Launched eagerly, each MuJoCo step is hundreds of kernel launches from Python, and
        its solver loop reads its convergence flag back to the host every iteration: an H100
        took ~0.26 s per env step whatever the number of worlds. Captured, the solver loop
        is a conditional graph node and the whole env step one launch. The first step runs
        eagerly, so every kernel is compiled and loaded before the capture. The graph reads
        and writes the same Warp arrays (ctrl in, qpos/qvel/xpos/cfrc_ext out) on each launch.
        """
        wp = self._wp
        if self._advance_graph is None and self._steps_taken > 0:
            # Captured on Warp's own stream: torch's default stream is the legacy one, which
            # cannot be captured. Capturing runs nothing; the launch below does.
            with wp.ScopedCapture(device=self._wp_device) as capture:
                self._advance()
            self._advance_graph = capture.graph
        if self._advance_graph is None:
            with self._warp_scope():
                self._advance()
        else:
            wp.capture_launch(self._advance_graph, stream=wp.stream_from_torch(torch.cuda.current_stream(self.device)))

    def _dynamics(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        actions = actions.reshape(self.num_envs, -1).to(torch.float32)
        self.ctrl.copy_(actions)
        if self.device.type == "cpu":
            with self._warp_scope():
                self._advance()
        else:
            self._advance_on_cuda()
        self._steps_taken += 1
        xy_after = self.xpos[:, 1, :2].clone()
        x_velocity = (xy_after[:, 0] - self._xy_before[:, 0]) / self.dt
        self._xy_before = xy_after
        contact = self.cfrc_ext.clamp(-1.0, 1.0)
        state = torch.cat([self.qpos, self.qvel], dim=-1)
        z = self.qpos[:, 2]
        healthy = torch.isfinite(state).all(-1) & (z >= self.healthy_z_range[0]) & (z <= self.healthy_z_range[1])
        reward = (x_velocity + self.healthy_reward * healthy.to(torch.float32)
                  - self.ctrl_cost_weight * (actions**2).sum(-1)
                  - self.contact_cost_weight * (contact**2).sum((-1, -2)))
        return reward, ~healthy

    def _observe(self) -> Tensor:
        contact = self.cfrc_ext[:, 1:].clamp(-1.0, 1.0).reshape(self.num_envs, -1)
        return torch.cat([self.qpos[:, 2:], self.qvel, contact], dim=-1).clone()

    def set_state(self, qpos: Tensor, qvel: Tensor) -> None:
        """Place every world in a given state (as gymnasium's `set_state`): for step-for-step comparisons."""
        self._reset_where(ResetRows(torch.ones(self.num_envs, dtype=torch.bool, device=self.device)))
        self.qpos.copy_(torch.as_tensor(qpos, dtype=torch.float32, device=self.device).reshape(self.qpos.shape))
        self.qvel.copy_(torch.as_tensor(qvel, dtype=torch.float32, device=self.device).reshape(self.qvel.shape))
        self._xy_before = self.qpos[:, :2].clone()


def make_warp_ant(num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                  **kwargs: object) -> WarpAntVecEnv:
    """Registry factory for "WarpAnt-v0"."""
    return WarpAntVecEnv(num_envs, device=device, seed=seed, **kwargs)
