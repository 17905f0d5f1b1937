"""A torch env's step replayed as one CUDA graph (envs/graphed.py): the same steps as the eager env.

On a CPU the tests check what the graph records, `pinned_step`, against an eager twin (the state stays at fixed
addresses and nothing changes in what the env does), and where graphing applies. The CUDA tests replay the graph.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from dask_podracer.envs import TorchVecEnv, make_vec_env
from dask_podracer.envs.graphed import GraphedStepEnv, can_graph, graph_steps

CAPTURABLE = ["Pendulum-v1", "CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
              "PointChase-v0"]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def random_actions(env, steps: int, seed: int = 0) -> list[torch.Tensor]:
    """A fixed sequence of valid actions for `env`, the same for its twin."""
    g = torch.Generator().manual_seed(seed)
    space = env.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        out = [torch.randint(0, int(space.n), (env.num_envs,), generator=g) for _ in range(steps)]
    else:
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        out = [low + (high - low) * torch.rand((env.num_envs, *space.shape), generator=g) for _ in range(steps)]
    return [a.to(env.device) for a in out]


def assert_same_step(a, b) -> None:
    for x, y in zip(a[:4], b[:4]):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert a[4].keys() == b[4].keys()
    for key in a[4]:
        torch.testing.assert_close(a[4][key], b[4][key], rtol=0, atol=0)


def state_addresses(env) -> dict[str, int]:
    return {k: v.data_ptr() for k, v in vars(env).items() if torch.is_tensor(v)}


@pytest.mark.parametrize("name", CAPTURABLE)
def test_every_capturable_env_declares_it(name):
    env = make_vec_env(name, 2, seed=0)
    assert isinstance(env, TorchVecEnv) and env.graph_capturable


def test_graph_steps_leaves_a_cpu_env_and_other_envs_alone():
    cpu_env = make_vec_env("Pendulum-v1", 4, seed=0)
    assert graph_steps(cpu_env) is cpu_env and not can_graph(cpu_env)
    trading = make_vec_env("StockTrading-v0", 2, seed=0)
    assert not trading.graph_capturable and graph_steps(trading) is trading


def test_graphed_step_env_refuses_what_is_not_a_torch_env():
    class NotTorch:
        num_envs = 1

    with pytest.raises(TypeError, match="GraphedStepEnv wraps a TorchVecEnv, got NotTorch"):
        GraphedStepEnv(NotTorch())


@pytest.mark.parametrize("name", CAPTURABLE)
def test_the_pinned_step_is_the_eager_step_with_the_state_kept_in_place(name):
    """What the graph records, run eagerly on the CPU: the same observations, rewards, flags and episode statistics
    as an eager twin through resets, and the state never leaves the pinned tensors."""
    eager = make_vec_env(name, 8, seed=3)
    steps = eager.max_episode_steps + 20  # past the time limit: truncations and resets
    wrapped = GraphedStepEnv(make_vec_env(name, 8, seed=3))
    torch.testing.assert_close(eager.reset(seed=3)[0], wrapped.reset(seed=3)[0], rtol=0, atol=0)
    pinned = state_addresses(wrapped.env)
    done = 0
    for action in random_actions(eager, steps):
        expected = eager.step(action)
        got = wrapped.pinned_step(action)
        assert_same_step(expected, got)
        done += int((expected[2] | expected[3]).sum())
        assert state_addresses(wrapped.env) == pinned
    assert done > 0  # the resets were exercised


def test_state_rebound_outside_the_step_is_copied_into_the_pinned_tensors():
    env = GraphedStepEnv(make_vec_env("Pendulum-v1", 3, seed=0))
    env.reset(seed=0)
    theta = env.env.theta
    env.env.set_state(torch.tensor([0.1, 0.2, 0.3]), torch.zeros(3))  # rebinds theta and theta_dot
    env.pin_state()
    assert env.env.theta is theta
    torch.testing.assert_close(theta, torch.tensor([0.1, 0.2, 0.3]))


def test_a_step_before_reset_is_refused_as_the_env_refuses_it():
    env = GraphedStepEnv(make_vec_env("CartPole-v1", 2, seed=0))
    with pytest.raises(RuntimeError, match="called before reset"):
        env.step(torch.zeros(2, dtype=torch.int64))


# -- on CUDA: the graph itself --------------------------------------------------------------------------------

@cuda
@pytest.mark.parametrize("name", CAPTURABLE)
def test_the_graphed_step_equals_the_eager_step_on_cuda(name):
    """One capture, then every step a replay, through truncations, terminations and resets drawn from the env's
    own random stream: the same numbers as an eager twin of the same seed, step for step."""
    eager = make_vec_env(name, 64, device="cuda", seed=5)
    steps = eager.max_episode_steps + 20
    graphed = graph_steps(make_vec_env(name, 64, device="cuda", seed=5))
    assert isinstance(graphed, GraphedStepEnv)
    torch.testing.assert_close(eager.reset(seed=5)[0], graphed.reset(seed=5)[0], rtol=0, atol=0)
    done = 0
    for i, action in enumerate(random_actions(eager, steps)):
        expected = eager.step(action)
        got = graphed.step(action)
        assert_same_step(expected, got)
        done += int((expected[2] | expected[3]).sum())
        if i == steps - 10:  # after the time limit: a seeded reset between replays, the graph goes on from there
            torch.testing.assert_close(eager.reset(seed=11)[0], graphed.reset(seed=11)[0], rtol=0, atol=0)
    assert done > 0
    assert graphed.captures == 1 and graphed.replays == steps


@cuda
def test_graphed_outputs_are_not_overwritten_by_the_next_step():
    env = graph_steps(make_vec_env("Pendulum-v1", 16, device="cuda", seed=0))
    env.reset(seed=0)
    action = torch.zeros(16, 1, device="cuda")
    first = env.step(action)
    kept = first[0].clone()
    env.step(action)
    torch.testing.assert_close(first[0], kept, rtol=0, atol=0)


class _EagerGraph:
    """Stands for a captured CUDA graph on the CPU: a replay runs the pinned step eagerly."""

    def __init__(self, env: GraphedStepEnv) -> None:
        self.env = env

    def replay(self) -> None:
        self.env._outputs = self.env.pinned_step(self.env._actions)


def test_a_tensor_attribute_the_graph_has_not_seen_is_captured_again(monkeypatch):
    """pin_state drops the graph when it pins a new tensor (or one rebound with another shape or dtype); step used
    to check for a graph before pinning, and then replayed None (AttributeError) instead of capturing again."""
    def capture(self, actions):
        self.pin_state()
        self._actions = actions.clone()
        self._graph = _EagerGraph(self)
        self.captures += 1

    monkeypatch.setattr(GraphedStepEnv, "_capture", capture)
    env = GraphedStepEnv(make_vec_env("Pendulum-v1", 3, seed=0))
    env.reset(seed=0)
    env.step(torch.zeros(3, 1))
    env.env.extra = torch.zeros(3)  # e.g. state an env creates lazily
    env.step(torch.zeros(3, 1))
    assert env.captures == 2 and env.env.extra is env._pinned["extra"]
    env.env.theta = env.env.theta.double()  # rebound with another dtype
    env.step(torch.zeros(3, 1))
    assert env.captures == 3
