"""gymnasium's v5 MuJoCo locomotion envs as one VecEnv stepped on every core: `make_vec_env("MujocoAnt-v5", 16)`.

The same models, the same MuJoCo calls and float64 physics as gymnasium's Ant-v5,
HalfCheetah-v5, Hopper-v5, Walker2d-v5 and Humanoid-v5, without gymnasium's per-env Python:
`envs/mujoco_threads.py` steps the simulations on threads, `envs/mujoco_tasks.py` computes
observations, rewards and terminations over the whole batch with numpy. Each env draws its
reset noise from a numpy generator seeded as gymnasium's vector envs seed env i (seed + i),
so a seeded batch repeats "gym:Ant-v5"'s episodes, resets included (tests/test_envs_mujoco_batched.py).

Not "gym:" names: those go through gymnasium's own vector envs, and these are a
reimplementation of the envs around the same physics (docs/envs.md).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.utils.seeding import np_random
from torch import Tensor

from dask_podracer.envs.base import StepResult, canonical_device
from dask_podracer.envs.devices import check_buffer_fits
from dask_podracer.envs.gym_adapter import MJDATA_BYTES, relay_mujoco_warnings
from dask_podracer.envs.mujoco_tasks import TASKS, MujocoTask, check_task_fields
from dask_podracer.envs.mujoco_threads import ThreadedSimulations

_NUMPY_DTYPES = {torch.float32: np.float32, torch.bool: np.bool_, torch.int64: np.int64}
"""The numpy dtype of each tensor dtype `MujocoVecEnv` returns."""


def available_cores() -> int:
    """The cores this process may run on (a Dask worker's affinity, a container's cpuset)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def model_path(xml_file: str) -> str:
    """A model file of gymnasium's MuJoCo envs: the file gymnasium.make loads."""
    import gymnasium.envs.mujoco as gym_mujoco  # needs the `mujoco` extra

    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", xml_file)


class MujocoVecEnv:
    """`num_envs` simulations of a gymnasium MuJoCo task (`envs/mujoco_tasks.py`), as our VecEnv.

    `threads` (default: every core this process may use) step the physics; results do not depend
    on it. Observations, rewards and `final_obs` are float32 tensors on `device`; the physics and
    the reward arithmetic stay float64, as in gymnasium.
    """

    def __init__(self, task: MujocoTask, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 threads: int | None = None, max_episode_steps: int = 1000) -> None:
        try:
            import mujoco
        except ImportError as e:
            raise ImportError(f"Mujoco{task.gym_id} needs MuJoCo: pip install 'dask-podracer[mujoco]' ({e})") from e
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        # threads = 0 was taken as "unset" (every core), silently. No upper bound: the preflight builds the env on
        # the client, whose cores need not be the workers' (more threads than cores only share them)
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, numbers.Integral)
                                    or threads < 1):
            raise ValueError(f"Mujoco{task.gym_id}: threads must be an integer >= 1 (or unset: every core this "
                             f"process may use), got {threads!r}")
        if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, numbers.Integral) \
                or max_episode_steps < 1:
            raise ValueError(f"Mujoco{task.gym_id}: max_episode_steps must be an integer >= 1, got "
                             f"{max_episode_steps!r}")
        relay_mujoco_warnings()  # HalfCheetah's model warns when compiled, as through gymnasium
        self.task = task
        self.num_envs = int(num_envs)
        self.device = canonical_device(device)
        self.max_episode_steps = int(max_episode_steps)
        self.model = mujoco.MjModel.from_xml_path(model_path(task.xml_file))
        self.dt = float(self.model.opt.timestep) * task.frame_skip
        # each env is an MjData, 450-480 KB resident whatever the model: `eval_episodes = 100000` asks a worker for
        # 48 GB, after the cluster started (under a 12 GB limit: `FatalError: Could not allocate memory`). The
        # preflight counts `bytes_per_env` too
        self.bytes_per_env = max(MJDATA_BYTES, int(mujoco.MjData(self.model).nbuffer))
        check_buffer_fits(self.num_envs * self.bytes_per_env, torch.device("cpu"), f"Mujoco{task.gym_id}: the MjData "
                          f"of {self.num_envs:,} envs ({self.bytes_per_env:,} bytes each)")
        self.sims = ThreadedSimulations(self.model, self.num_envs, task.frame_skip, threads or available_cores(),
                                        task.fields, task.post_constraint)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (task.observation_size(self.model),),
                                                       np.float32)
        low, high = self.model.actuator_ctrlrange.T.astype(np.float32)
        self.single_action_space = gym.spaces.Box(low, high, dtype=np.float32)
        # gymnasium's init_qpos/qvel: MjData's values before any step (qpos0, zeros)
        self._init_qpos = self.model.qpos0.copy()
        self._init_qvel = np.zeros(self.model.nv)
        self._rngs = self._generators(seed)
        self._x = np.zeros(self.num_envs)  # x_position before the next step, per env
        self._episode_return = np.zeros(self.num_envs)
        self._episode_length = np.zeros(self.num_envs, dtype=np.int64)
        self._needs_reset = True

    @property
    def threads(self) -> int:
        """How many threads step the physics (at most one per env)."""
        return self.sims.threads

    def _generators(self, seed: int | None) -> list[np.random.Generator]:
        """One generator per env, seeded seed + i as gymnasium's vector envs seed theirs (OS entropy without one)."""
        return [np_random(None if seed is None else int(seed) + i)[0] for i in range(self.num_envs)]

    def _tensor(self, array: np.ndarray, dtype: torch.dtype) -> Tensor:
        # numpy makes the one copy, already in the tensor's dtype (float64 -> float32 rounds as torch's cast does)
        tensor = torch.from_numpy(np.array(array, dtype=_NUMPY_DTYPES[dtype]))
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _restart(self, ids: np.ndarray) -> np.ndarray:
        """Restart envs `ids` `[k]` from gymnasium's noisy initial state; their observations `[k, obs_dim]`."""
        nq, nv = self.model.nq, self.model.nv
        noise = [self.task.reset_noise(self._rngs[i], nq, nv) for i in ids]
        self.sims.reset(ids, self._init_qpos + np.array([q for q, _ in noise]),
                        self._init_qvel + np.array([v for _, v in noise]))
        rows = {name: values[ids] for name, values in self.sims.fields.items()}
        self._x[ids] = self.task.x_position(self.model, rows)
        self._episode_return[ids] = 0.0
        self._episode_length[ids] = 0
        return self.task.observe(rows)

    def reset(self, *, seed: int | None = None) -> tuple[Tensor, dict[str, Any]]:
        if seed is not None:
            self._rngs = self._generators(seed)
        obs = self._restart(np.arange(self.num_envs))
        self._needs_reset = False
        return self._tensor(obs, torch.float32), {}

    def step(self, actions: Tensor) -> StepResult:
        if self._needs_reset:
            raise RuntimeError(f"Mujoco{self.task.gym_id}.step() called before reset()")
        # float32, as gymnasium's envs receive actions from a float32 Box (their control costs are float32 sums)
        action = torch.as_tensor(actions).detach().cpu().numpy().astype(np.float32).reshape(self.num_envs, -1)
        self.sims.step(action)
        fields = self.sims.fields
        x = np.array(self.task.x_position(self.model, fields))  # a copy: the task may give a view of the fields
        x_velocity = (x - self._x) / self.dt
        self._x = x
        final_obs = self.task.observe(fields)
        reward, terminated = self.task.reward(fields, x_velocity, action)
        self._episode_return += reward
        self._episode_length += 1
        truncated = (self._episode_length >= self.max_episode_steps) & ~terminated
        info: dict[str, Any] = {
            "final_obs": self._tensor(final_obs, torch.float32),
            "episode_return": self._tensor(self._episode_return, torch.float32),
            "episode_length": self._tensor(self._episode_length, torch.int64),
        }
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            final_obs[ended] = self._restart(ended)  # final_obs is already a tensor: this array is now obs
        return (self._tensor(final_obs, torch.float32), self._tensor(reward, torch.float32),
                self._tensor(terminated, torch.bool), self._tensor(truncated, torch.bool), info)

    def close(self) -> None:
        self.sims.close()


def mujoco_factory(name: str) -> Callable[..., MujocoVecEnv]:
    """The registry's constructor for `name` ("MujocoAnt-v5", ...): its kwargs are `threads`,
    `max_episode_steps` and the task's (gymnasium's keyword arguments for that env)."""
    task_class = TASKS[name]

    def make(num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, threads: int | None = None,
             max_episode_steps: int = 1000, **task_kwargs: Any) -> MujocoVecEnv:
        try:
            task = task_class(**task_kwargs)
        except TypeError as e:
            raise ValueError(f"{name}: {e}") from e
        check_task_fields(task, name)
        return MujocoVecEnv(task, num_envs, device=device, seed=seed, threads=threads,
                            max_episode_steps=max_episode_steps)

    return make
