"""Captured learner updates (agents/captured.py) against the eager reference.

On the CPU the captured update is `torch.compile` (inductor); compiling takes about a minute per algorithm on
two cores, so each algorithm is compiled once, in a module-scoped fixture, on tiny networks. Inductor is told to
draw random numbers with aten's generator (`fallback_random`), so SAC's and TD3's noise is eager's and the two
paths can be compared number for number. The CUDA tests (one CUDA graph per update) skip without CUDA.
"""

from __future__ import annotations

import copy
import gc

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config

from dask_podracer.agents import captured
from dask_podracer.agents.base import make_agent
from dask_podracer.agents.pipeline import PipelinedLoop
from dask_podracer.envs import make_vec_env

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
TINY = {"hidden": (16, 16), "batch_size": 32}
UPDATES = 4
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def batches(n: int, device: str = "cpu", batch_size: int = 32) -> list[dict[str, torch.Tensor]]:
    """`n` fixed random batches shaped like the replay's (obs [B, 3], action [B, 1], reward and terminated [B])."""
    g = torch.Generator().manual_seed(7)
    out = []
    for _ in range(n):
        b = {"obs": torch.randn(batch_size, 3, generator=g), "action": torch.rand(batch_size, 1, generator=g) * 4 - 2,
             "reward": torch.randn(batch_size, generator=g), "next_obs": torch.randn(batch_size, 3, generator=g),
             "terminated": (torch.rand(batch_size, generator=g) < 0.1).float()}
        out.append({k: v.to(device) for k, v in b.items()})
    return out


def optimizers(agent) -> dict[str, dict]:
    return {name: captured.saved_optimizer(getattr(agent, name)) for name in vars(agent) if name.endswith("_optim")}


def assert_same_state(eager, capt, atol: float = 1e-5) -> None:
    """Networks, parameter tensors and optimiser states (moments and step counts) agree."""
    for name in ("actor", "critic", "critic_target", "actor_target"):
        if hasattr(eager, name):
            for (key, a), (_, b) in zip(getattr(eager, name).state_dict().items(),
                                        getattr(capt, name).state_dict().items()):
                torch.testing.assert_close(b, a, atol=atol, rtol=1e-4, msg=f"{name}.{key}")
    if hasattr(eager, "log_alpha"):
        torch.testing.assert_close(capt.log_alpha, eager.log_alpha, atol=atol, rtol=1e-4)
    eager_opt, capt_opt = optimizers(eager), optimizers(capt)
    assert eager_opt.keys() == capt_opt.keys()
    for name in eager_opt:
        for index, state in eager_opt[name]["state"].items():
            for key, value in state.items():
                torch.testing.assert_close(capt_opt[name]["state"][index][key].cpu(), value.cpu(), atol=atol,
                                           rtol=1e-4, msg=f"{name}[{index}].{key}")


def run_both(eager, capt, data, seed: int = 100) -> list[tuple[dict, dict]]:
    """The same batches through both agents, each update from the same RNG state; the losses as floats."""
    out = []
    for i, batch in enumerate(data):
        torch.manual_seed(seed + i)
        le = {k: float(v) for k, v in eager.update(batch).items()}
        torch.manual_seed(seed + i)
        lc = {k: float(v) for k, v in capt.update(batch).items()}
        out.append((le, lc))
    return out


def assert_same_losses(pairs, rel: float = 1e-4) -> None:
    for le, lc in pairs:
        assert le.keys() == lc.keys()
        for k in le:
            assert lc[k] == pytest.approx(le[k], rel=rel, abs=1e-5), k


def pair(algorithm: str, hparams: dict, device: str = "cpu"):
    torch.manual_seed(0)
    eager = make_agent(algorithm, OBS, ACT, {**hparams, "compile": "off"}, device)  # "auto" captures on CUDA
    torch.manual_seed(0)
    capt = make_agent(algorithm, OBS, ACT, {**hparams, "compile": "on"}, device)
    return eager, capt


@pytest.fixture(scope="module")
def aten_random():
    """Inductor draws random numbers as eager does, so stochastic updates compare exactly."""
    old = inductor_config.fallback_random
    inductor_config.fallback_random = True
    yield
    inductor_config.fallback_random = old


@pytest.fixture(scope="module")
def sac_run(aten_random):
    """SAC compiled once for the module: an eager and a captured agent through the same UPDATES batches."""
    captured.clear_cache()
    torch.set_num_threads(1)
    eager, capt = pair("sac", TINY)
    pairs = run_both(eager, capt, batches(UPDATES))
    return {"eager": eager, "captured": capt, "pairs": pairs,
            "graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"]}


# -- settings ------------------------------------------------------------------------------------

def test_compile_setting_is_checked_and_resolved():
    with pytest.raises(ValueError, match=r"^hparams.compile must be one of \('auto', 'on', 'off'\), got 'yes'$"):
        make_agent("sac", OBS, ACT, {"compile": "yes"})
    assert captured.use_capture("on", torch.device("cpu"))
    assert not captured.use_capture("auto", torch.device("cpu"))
    assert captured.use_capture("auto", torch.device("cuda"))
    assert not captured.use_capture("off", torch.device("cuda"))
    assert make_agent("sac", OBS, ACT, {"compile": "auto"})._captured is None  # auto is eager on a CPU
    assert {make_agent(a, OBS, ACT, {}).config.compile for a in ("sac", "td3", "ppo")} == {"auto"}  # the default


def test_captured_checkpoint_loads_into_an_eager_agent_and_back():
    """A checkpoint does not say which mode wrote it: float learning rates, eager optimiser flags."""
    torch.manual_seed(0)
    capt = make_agent("td3", OBS, ACT, {**TINY, "compile": "on", "actor_lr": 3e-4})
    state = capt.state_dict()
    assert all(isinstance(g["lr"], float) and g["fused"] and not g["capturable"]
               for name in ("actor_optim", "critic_optim") for g in state[name]["param_groups"])
    eager = make_agent("td3", OBS, ACT, {**TINY, "actor_lr": 1e-4})
    eager.load_state_dict(state)
    assert_same_state(capt, eager, atol=0)
    assert eager.actor_optim.param_groups[0]["lr"] == 1e-4  # the child's rate wins
    back = make_agent("td3", OBS, ACT, {**TINY, "compile": "on", "actor_lr": 2e-4})
    back.load_state_dict(eager.state_dict())
    assert float(back.actor_optim.param_groups[0]["lr"]) == pytest.approx(2e-4)
    assert_same_state(eager, back, atol=0)


# -- SAC on the CPU (torch.compile) ---------------------------------------------------------------

def test_sac_captured_update_equals_eager(sac_run):
    """Several consecutive updates: the same losses, parameters and optimiser states (float tolerance)."""
    assert_same_losses(sac_run["pairs"])
    assert_same_state(sac_run["eager"], sac_run["captured"])
    assert sac_run["captured"]._captured.runs == UPDATES


def test_sac_child_learning_rate_takes_effect_in_the_reused_graph(sac_run):
    """The worker's next segment: a child with perturbed learning rates and gamma loads its parent and adopts the
    cached workspace; its updates equal an eager child's, and nothing is recompiled."""
    parent_state = copy.deepcopy(sac_run["captured"].state_dict())  # as saved: the workspace will move on
    update = sac_run["captured"]._captured
    del sac_run["captured"]
    gc.collect()
    child_hp = {**TINY, "actor_lr": 3e-3, "critic_lr": 2e-4, "alpha_lr": 5e-3, "gamma": 0.9}
    eager = make_agent("sac", OBS, ACT, child_hp)
    eager.load_state_dict(parent_state)
    child = make_agent("sac", OBS, ACT, {**child_hp, "compile": "on"})
    child.load_state_dict(parent_state)
    assert child._captured is update  # the same compiled update: one workspace for the key
    assert list(captured.cache_info().values()) == [1]
    assert float(child.actor_optim.param_groups[0]["lr"]) == pytest.approx(3e-3)
    assert_same_losses(run_both(eager, child, batches(UPDATES), seed=200))
    assert_same_state(eager, child)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == sac_run["graphs"]  # no recompile


def test_sac_captured_trains_in_both_loops(sac_run):
    """The sequential loop and the pipelined one (updates in the learner thread) drive the captured update; each
    makes every update it owes, and the metrics are finite. The sequential loop's worker acts through the captured
    explore step too: its training equals eager's."""
    def train(compile: str, pipeline: bool):
        torch.manual_seed(1)
        env = make_vec_env("Pendulum-v1", 4, seed=0)
        agent = make_agent("sac", env.single_observation_space, env.single_action_space,
                           {**TINY, "compile": compile, "pipeline": pipeline, "learning_starts": 32})
        # the workspaces are cached across agents and their `runs` never reset: count this agent's calls only
        runs_before = {name: getattr(getattr(agent, name, None), "runs", 0)
                       for name in ("_captured", "_captured_explore")}
        obs, _ = env.reset(seed=0)
        for _ in range(12):
            obs, _, metrics = agent.train_iteration(env, obs)
        agent.finish()
        return agent, metrics, runs_before

    eager = train("off", False)[0]
    gc.collect()  # the earlier tests' agents give the cached workspace back
    for pipeline in (False, True):
        agent, metrics, runs_before = train("on", pipeline)
        assert isinstance(agent.loop, PipelinedLoop) == pipeline  # PipelinedLoop subclasses SequentialLoop
        assert agent.updates == eager.updates > 0
        if not pipeline:
            assert agent._captured_explore.runs > runs_before["_captured_explore"]  # this agent acted captured
            assert_same_state(eager, agent, atol=1e-4)
        assert agent._captured.runs - runs_before["_captured"] == agent.updates  # every update, and only these
        assert all(np.isfinite(v) for v in metrics.values())
        del agent
        gc.collect()


def test_a_second_live_agent_gets_its_own_workspace(sac_run):
    first = make_agent("sac", OBS, ACT, {**TINY, "compile": "on", "batch_size": 8})
    second = make_agent("sac", OBS, ACT, {**TINY, "compile": "on", "batch_size": 8})
    assert first._captured is not second._captured
    assert first.actor is not second.actor


# -- TD3 (and with it DDPG) on the CPU ---------------------------------------------------------------

@pytest.mark.slow
def test_td3_captured_update_equals_eager(aten_random):
    """Both of TD3's graphs (critic alone; critic, delayed actor and targets), target smoothing noise included."""
    torch.set_num_threads(1)
    eager, capt = pair("td3", TINY)
    assert_same_losses(run_both(eager, capt, batches(UPDATES)))
    assert_same_state(eager, capt)
    assert {k: v.runs for k, v in capt._captured.items()} == {False: UPDATES // 2, True: UPDATES // 2}
    obs = torch.randn(4, 3)  # the worker's exploring actions, captured
    torch.manual_seed(5)
    expected = eager.explore(obs, eager.actor)
    torch.manual_seed(5)
    torch.testing.assert_close(capt.explore(obs, capt.actor), expected, atol=1e-5, rtol=1e-4)
    assert capt._captured_explore.runs == 1


# -- CUDA (one CUDA graph per update) ----------------------------------------------------------------

@cuda
def test_ddpg_cuda_graph_equals_eager_and_takes_a_child_learning_rate():
    """DDPG's update draws no random numbers, so the graph and eager agree step for step; a child reuses the
    graph (one capture) with its own learning rates."""
    captured.clear_cache()
    hp = {**TINY, "num_critics": 2}
    eager, capt = pair("ddpg", hp, "cuda")
    assert_same_losses(run_both(eager, capt, batches(UPDATES, "cuda")))
    assert_same_state(eager, capt)
    state = copy.deepcopy(capt.state_dict())
    graphs = capt._captured
    del capt
    gc.collect()
    child_hp = {**hp, "actor_lr": 3e-3, "critic_lr": 1e-4, "tau": 0.05}
    eager = make_agent("ddpg", OBS, ACT, {**child_hp, "compile": "off"}, "cuda")
    eager.load_state_dict(state)
    child = make_agent("ddpg", OBS, ACT, {**child_hp, "compile": "on"}, "cuda")
    child.load_state_dict(state)
    assert child._captured[True] is graphs[True]
    assert_same_losses(run_both(eager, child, batches(UPDATES, "cuda")))
    assert_same_state(eager, child)
    # policy_delay 1: every update is an actor step, so the critic-only graph is never needed, nor captured
    assert graphs[True].captures == 1 and graphs[False].captures == 0


@cuda
def test_sac_cuda_graph_trains_and_is_captured_once():
    """SAC's graph draws its noise from the graph-safe generator (not eager's sequence): finite losses, one
    capture, and the parameters move."""
    captured.clear_cache()
    torch.manual_seed(0)
    agent = make_agent("sac", OBS, ACT, {**TINY, "compile": "auto"}, "cuda")
    assert agent._captured is not None
    before = [p.detach().clone() for p in agent.actor.parameters()]
    for batch in batches(UPDATES, "cuda"):
        losses = agent.update(batch)
        assert all(torch.isfinite(v).all() for v in losses.values())
    assert agent._captured.captures == 1 and agent._captured.runs == UPDATES
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))


def discrete_batches(device: str = "cpu") -> list[dict[str, torch.Tensor]]:
    """`batches` with actions of a 3-way discrete space."""
    data = batches(UPDATES, device)
    for batch in data:
        batch["action"] = torch.randint(0, 3, (32, 1), generator=torch.Generator().manual_seed(1)).float().to(device)
    return data


# -- the DQN family on the CPU -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["d3qn"])
def test_dqn_captured_update_equals_eager(algorithm):
    """Double DQN with dueling heads, the gradient clip and a target update every other step (both graphs)."""
    torch.set_num_threads(1)
    discrete = gym.spaces.Discrete(3)
    hp = {**TINY, "target_update_interval": 2}
    torch.manual_seed(0)
    eager = make_agent(algorithm, OBS, discrete, hp)
    torch.manual_seed(0)
    capt = make_agent(algorithm, OBS, discrete, {**hp, "compile": "on"})
    assert_same_losses(run_both(eager, capt, discrete_batches()))
    for a, b in zip(eager.q_net.parameters(), capt.q_net.parameters()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    for a, b in zip(eager.q_target.parameters(), capt.q_target.parameters()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    assert {k: v.runs for k, v in capt._captured.items()} == {False: UPDATES // 2, True: UPDATES // 2}


# -- PPO's minibatch step on the CPU (A2C is the same step, one minibatch) ------------------------------

def minibatches(n: int, size: int, device: str = "cpu") -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    data = [{"obs": torch.randn(size, 3, generator=g), "actions": torch.randn(size, 1, generator=g),
             "log_probs": torch.randn(size, generator=g) - 1, "values": torch.randn(size, generator=g),
             "advantages": torch.randn(size, generator=g), "returns": torch.randn(size, generator=g)}
            for _ in range(n)]
    return [{k: v.to(device) for k, v in mb.items()} for mb in data]


def compare_ppo(a, b, data) -> None:
    """Minibatch steps of two PPO agents through the same minibatches: the same losses, networks and Adam state."""
    for mb in data:
        la = {k: float(v) for k, v in a._update(mb).items()}
        lb = {k: float(v) for k, v in b._update(mb).items()}
        assert_same_losses([(la, lb)])
    for name in ("actor", "critic"):
        for x, y in zip(getattr(a, name).parameters(), getattr(b, name).parameters()):
            torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-4)
    for x, y in zip(captured.saved_optimizer(a.optimizer)["state"].values(),
                    captured.saved_optimizer(b.optimizer)["state"].values()):
        for k in x:
            torch.testing.assert_close(y[k].cpu(), x[k].cpu(), atol=1e-5, rtol=1e-4)
    assert float(b.optimizer.param_groups[0]["lr"]) == pytest.approx(float(a.optimizer.param_groups[0]["lr"]),
                                                                      rel=1e-6)


@pytest.mark.slow
def test_ppo_captured_minibatch_step_equals_eager_and_takes_a_child_rate():
    """Consecutive minibatch steps agree (losses, networks, Adam state); then a child with a perturbed learning
    rate and clip_coef, and the adaptive schedule, adopts the workspace and still agrees with an eager child,
    without a recompile: the schedule's rate changes in the tensor the compiled step reads."""
    torch.set_num_threads(1)
    captured.clear_cache()
    hp = {"num_envs": 4, "rollout_steps": 8, "num_minibatches": 2, "hidden": (16, 16)}
    torch.manual_seed(0)
    eager = make_agent("ppo", OBS, ACT, hp)
    torch.manual_seed(0)
    capt = make_agent("ppo", OBS, ACT, {**hp, "compile": "on"})

    compare_ppo(eager, capt, minibatches(UPDATES, 16))
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    state = copy.deepcopy(capt.state_dict())
    update = capt._captured
    del capt
    gc.collect()
    child_hp = {**hp, "learning_rate": 3e-3, "clip_coef": 0.1, "lr_schedule": "adaptive", "desired_kl": 0.05}
    eager = make_agent("ppo", OBS, ACT, child_hp)
    eager.load_state_dict(state)
    child = make_agent("ppo", OBS, ACT, {**child_hp, "compile": "on"})
    child.load_state_dict(state)
    assert child._captured is update
    compare_ppo(eager, child, minibatches(UPDATES, 16))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    assert update.runs == 2 * UPDATES


# -- CUDA: the algorithms whose updates draw no random numbers agree with eager step for step -----------

@cuda
def test_d3qn_cuda_graph_equals_eager():
    """Double DQN with dueling heads on CUDA: both graphs (with and without the target update) agree with eager."""
    captured.clear_cache()
    discrete = gym.spaces.Discrete(3)
    hp = {**TINY, "target_update_interval": 2}
    torch.manual_seed(0)
    eager = make_agent("d3qn", OBS, discrete, {**hp, "compile": "off"}, "cuda")
    torch.manual_seed(0)
    capt = make_agent("d3qn", OBS, discrete, {**hp, "compile": "on"}, "cuda")
    assert_same_losses(run_both(eager, capt, discrete_batches("cuda")))
    for a, b in zip([*eager.q_net.parameters(), *eager.q_target.parameters()],
                    [*capt.q_net.parameters(), *capt.q_target.parameters()]):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    assert {k: (v.runs, v.captures) for k, v in capt._captured.items()} == {False: (2, 1), True: (2, 1)}


@cuda
def test_ppo_cuda_graph_minibatch_step_equals_eager_and_takes_a_child_rate():
    """PPO's minibatch step on CUDA (A2C's is the same step): consecutive steps agree with eager; a child with a
    perturbed learning rate and clip_coef, and the adaptive schedule, replays the same graph and agrees with an eager
    child."""
    captured.clear_cache()
    hp = {"num_envs": 4, "rollout_steps": 8, "num_minibatches": 2, "hidden": (16, 16)}
    torch.manual_seed(0)
    eager = make_agent("ppo", OBS, ACT, {**hp, "compile": "off"}, "cuda")
    torch.manual_seed(0)
    capt = make_agent("ppo", OBS, ACT, {**hp, "compile": "on"}, "cuda")
    compare_ppo(eager, capt, minibatches(UPDATES, 16, "cuda"))
    state = copy.deepcopy(capt.state_dict())
    update = capt._captured
    del capt
    gc.collect()
    child_hp = {**hp, "learning_rate": 3e-3, "clip_coef": 0.1, "lr_schedule": "adaptive", "desired_kl": 0.05}
    eager = make_agent("ppo", OBS, ACT, {**child_hp, "compile": "off"}, "cuda")
    eager.load_state_dict(state)
    child = make_agent("ppo", OBS, ACT, {**child_hp, "compile": "on"}, "cuda")
    child.load_state_dict(state)
    assert child._captured is update
    compare_ppo(eager, child, minibatches(UPDATES, 16, "cuda"))
    assert update.captures == 1 and update.runs == 2 * UPDATES


@cuda
def test_td3_cuda_graphs_train_and_are_captured_once_each():
    """TD3's two graphs (critic alone; critic, delayed actor and targets) on CUDA: its smoothing noise comes from
    the graph-safe generator, so it is checked as SAC's is: finite losses, one capture each, the actor moves."""
    captured.clear_cache()
    torch.manual_seed(0)
    agent = make_agent("td3", OBS, ACT, {**TINY, "compile": "auto"}, "cuda")
    before = [p.detach().clone() for p in agent.actor.parameters()]
    for batch in batches(UPDATES, "cuda"):
        assert all(torch.isfinite(v).all() for v in agent.update(batch).values())
    assert {k: (v.runs, v.captures) for k, v in agent._captured.items()} == {False: (2, 1), True: (2, 1)}
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))
