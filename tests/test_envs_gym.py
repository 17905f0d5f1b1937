"""The gymnasium adapter: `make_vec_env("gym:<id>", ...)` over gymnasium's sync and async vector envs."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from dask_podracer.envs import VecEnv, canonical_env_name, make_vec_env


def test_same_step_autoreset_gives_the_true_final_obs():
    env = make_vec_env("gym:CartPole-v1", 4, seed=0)
    assert isinstance(env, VecEnv) and canonical_env_name("gym:CartPole-v1") == "gym:CartPole-v1"
    obs, _ = env.reset()
    pushes = torch.ones(4, dtype=torch.int64)  # always right: every pole falls within ~10-30 steps
    for t in range(60):
        prev = obs
        obs, reward, terminated, truncated, info = env.step(pushes)
        done = terminated | truncated
        if done.any():
            break
    # Seeded: env 0's pole falls past 12° on step 8, the others' later; nothing reaches the 500-step limit.
    assert t == 7 and terminated.tolist() == [True, False, False, False] and not truncated.any()
    assert reward.dtype == torch.float32 and obs.dtype == torch.float32
    final = info["final_obs"]
    # The final obs continues the episode (pushed right, the pole falls left past -12°, the cart
    # still near the middle); obs starts a new one.
    assert final[0, 2] < -12 * 2 * np.pi / 360 and final[0, 0].abs() < 2.4
    assert torch.all(obs[done].abs() <= 0.05)  # gymnasium's CartPole resets within ±0.05
    assert torch.equal(final[~done], obs[~done])
    assert torch.equal(info["episode_length"][done], torch.full((int(done.sum()),), t + 1))
    assert torch.allclose(info["episode_return"][done], torch.full((int(done.sum()),), float(t + 1)))
    assert not torch.equal(prev, obs)
    env.close()


def test_a_step_that_terminates_at_the_time_limit_is_terminated_not_truncated():
    """gymnasium's TimeLimit flags such a step (True, True); our protocol forbids both at once.

    Pushing right, seeded env 0's pole falls on step 8 and env 1's on step 9: with an 8-step
    limit, env 0 terminates exactly at the limit and env 1 is cut short by it.
    """
    raw = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync", max_episode_steps=8,
                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    raw.reset(seed=0)
    env = make_vec_env("gym:CartPole-v1", 2, seed=0, max_episode_steps=8)
    env.reset()
    for t in range(8):
        _, _, g_term, g_trunc, _ = raw.step(np.ones(2, dtype=np.int64))
        _, _, terminated, truncated, info = env.step(torch.ones(2, dtype=torch.int64))
        if t < 7:
            assert not (terminated | truncated).any() and not (g_term | g_trunc).any()
    assert g_term.tolist() == [True, False] and g_trunc.tolist() == [True, True]  # gymnasium: both for env 0
    assert terminated.tolist() == [True, False] and truncated.tolist() == [False, True]  # ours: one each
    assert info["episode_length"].tolist() == [8, 8]
    raw.close()
    env.close()


def test_async_mode_runs_envs_in_processes_and_matches_sync():
    actions = torch.tensor([[0.5], [-1.0]])

    def trace(mode):
        env = make_vec_env("gym:Pendulum-v1", 2, seed=3, vectorization_mode=mode)
        obs = [env.reset()[0]] + [env.step(actions)[0] for _ in range(5)]
        env.close()
        return torch.stack(obs)

    assert torch.equal(trace("sync"), trace("async"))
    with pytest.raises(ValueError, match="vectorization_mode"):
        make_vec_env("gym:Pendulum-v1", 2, vectorization_mode="threads")


@pytest.mark.parametrize("env_id, obs_dim, act_dim", [
    ("Ant-v5", 105, 8), ("HalfCheetah-v5", 17, 6), ("Hopper-v5", 11, 3), ("Humanoid-v5", 348, 17),
])
def test_mujoco_envs_step_through_the_adapter(env_id, obs_dim, act_dim):
    pytest.importorskip("mujoco")
    env = make_vec_env(f"gym:{env_id}", 2, seed=0)
    obs, _ = env.reset()
    assert obs.shape == (2, obs_dim) and env.single_action_space.shape == (act_dim,)
    assert env.max_episode_steps == 1000
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        obs, reward, terminated, _truncated, info = env.step(torch.rand(2, act_dim, generator=gen) * 2 - 1)
        assert obs.shape == (2, obs_dim) and reward.shape == (2,) and terminated.dtype == torch.bool
        assert torch.isfinite(obs).all() and torch.isfinite(reward).all()
    np.testing.assert_array_equal(info["episode_length"].numpy(), [5, 5])
    env.close()


def test_kwargs_reach_gymnasium_make_and_the_time_limit_follows():
    env = make_vec_env("gym:Pendulum-v1", 2, seed=0, max_episode_steps=7)
    assert env.max_episode_steps == 7
    env.reset()
    for _ in range(7):
        _, _, _, truncated, info = env.step(torch.zeros(2, 1))
    assert truncated.all() and info["episode_length"].tolist() == [7, 7]
    with pytest.raises(ValueError, match="gym:<id>"):
        make_vec_env("Pendulm", 2)


def test_ant_in_worker_processes_matches_ant_in_process():
    pytest.importorskip("mujoco")
    actions = torch.rand(2, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1

    def trace(mode):
        env = make_vec_env("gym:Ant-v5", 2, seed=4, vectorization_mode=mode)
        obs = [env.reset()[0]] + [env.step(actions)[0] for _ in range(3)]
        env.close()
        return torch.stack(obs)

    assert torch.equal(trace("sync"), trace("async"))


def test_an_unknown_id_and_a_missing_mujoco_are_named_in_one_line():
    import subprocess
    import sys

    with pytest.raises(ValueError, match=r"^gym:Foo-v0: Environment `Foo` doesn't exist"):
        make_vec_env("gym:Foo-v0", 1)
    # an id without its version names the ids it may mean (gymnasium says only "No registered env with id")
    with pytest.raises(ValueError, match=r"^gym:CartPole: .*; write it with a version: gym:CartPole-v1, "
                                         r"gym:CartPole-v0 \(newest first\)$"):
        make_vec_env("gym:CartPole", 1)
    # MuJoCo's absence, as gymnasium meets it (an import that fails), in a fresh interpreter
    code = ("import sys; sys.modules['mujoco'] = None\n"
            "from dask_podracer.envs import make_vec_env\n"
            "try:\n    make_vec_env('gym:HalfCheetah-v5', 1)\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.startswith("gym:HalfCheetah-v5 cannot be made here: MuJoCo is not installed")
    assert out.rstrip().endswith("(MuJoCo ids: pip install 'dask-podracer[mujoco]')")


def test_mujoco_warnings_are_shown_once_and_leave_no_log_file(tmp_path):
    import subprocess
    import sys

    # gymnasium's HalfCheetah model uses an attribute MuJoCo 4 deprecates: a warning at every compile
    code = ("from dask_podracer.envs import make_vec_env\n"
            "for _ in range(3):\n    make_vec_env('gym:HalfCheetah-v5', 2, seed=0).reset()\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         check=True)
    assert "settotalmass" not in run.stdout  # MuJoCo's own handler prints every one
    assert run.stderr.count("UserWarning: MuJoCo: compiler attribute 'settotalmass' is deprecated") == 1
    assert list(tmp_path.iterdir()) == []  # and appends it to ./MUJOCO_LOG.TXT
