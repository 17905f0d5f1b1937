"""Prioritised replay (agents/prioritized_replay.py, `prioritized = true`): draws, weights, beta, priority updates,
checkpoints, the agents' weighted losses, and DQN learning CartPole with it."""

import pytest
import torch
from helpers import score, train_agent

from dask_podracer.agents import algorithm_info, make_agent
from dask_podracer.agents.ladders import epsilon_ladder, noise_ladder
from dask_podracer.agents.prioritized_replay import PrioritizedReplayBuffer, annealed_beta
from dask_podracer.agents.replay import ReplayBuffer
from dask_podracer.envs import make_vec_env
from dask_podracer.train.state import flatten_state, unflatten_state

CPU = torch.device("cpu")
TINY = {"hidden": (16, 16), "num_envs": 2, "learning_starts": 32, "batch_size": 16, "buffer_size": 1000,
        "prioritized": True}


def filled(n=8, capacity=8, cls=PrioritizedReplayBuffer, **kwargs):
    """A buffer whose row i has obs [i], reward i."""
    buffer = cls(capacity, 1, 1, CPU, **kwargs)
    for i in range(n):  # one at a time, so n may exceed the capacity (the ring wraps)
        row = torch.tensor([float(i)])
        buffer.add(row[:, None], torch.zeros(1, 1), row, row[:, None], torch.zeros(1))
    return buffer


def draw_counts(buffer, draws=200, batch=100, seed=0):
    torch.manual_seed(seed)
    counts = torch.zeros(buffer.capacity)
    for _ in range(draws):
        counts += torch.bincount(buffer.sample(batch)["index"], minlength=buffer.capacity)
    return counts


def test_new_rows_get_the_largest_priority_so_far_or_the_actors():
    buffer = filled(4, capacity=8)
    assert buffer.priority[:4].tolist() == [1.0] * 4  # nothing learned yet: 1 each
    buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([3.0, -0.5]))
    assert buffer.priority[:2].tolist() == pytest.approx([3.0 + 1e-6, 0.5 + 1e-6])
    buffer.add(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.zeros(1, 1), torch.zeros(1))
    assert float(buffer.priority[4]) == pytest.approx(3.0 + 1e-6)  # the max so far
    buffer.add(torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2), torch.zeros(2, 1), torch.zeros(2),
               priority=torch.tensor([-7.0, 0.25]))  # an actor's TD errors
    assert buffer.priority[5:7].tolist() == pytest.approx([7.0 + 1e-6, 0.25 + 1e-6])
    assert float(buffer.max_priority) == pytest.approx(7.0 + 1e-6)


def test_draws_follow_priority_to_the_alpha():
    buffer = filled(4, capacity=4, alpha=0.5)
    buffer.update_priorities(torch.arange(4), torch.tensor([1.0, 4.0, 9.0, 0.0]))
    counts = draw_counts(buffer)
    # p^0.5 = 1, 2, 3, ~0.001: the fourth row is (nearly) never drawn.
    expected = torch.tensor([1.0, 2.0, 3.0, 1e-3]) / 6.001 * counts.sum()
    assert torch.allclose(counts, expected, rtol=0.05, atol=30), (counts, expected)
    uniform = filled(4, capacity=4, alpha=0.0)
    uniform.update_priorities(torch.arange(4), torch.tensor([1.0, 4.0, 9.0, 0.0]))
    assert torch.allclose(draw_counts(uniform), torch.full((4,), 5000.0), rtol=0.05)  # alpha = 0: uniform


def test_importance_weights_by_hand():
    # Priorities 1, 3 with alpha = 1: P = 1/4, 3/4; N = 2. w = (N P)^-beta / max w.
    # beta = 1: (0.5)^-1 = 2 and (1.5)^-1 = 2/3 -> 1 and 1/3.  beta = 0.5: sqrt(2), sqrt(2/3) -> 1 and sqrt(1/3).
    buffer = filled(2, capacity=2, alpha=1.0, beta_start=0.5, beta_updates=10, epsilon=1e-9)
    buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0, 3.0]))
    torch.manual_seed(0)
    for updates, low in ((0, 3 ** -0.5), (5, 3 ** -0.75), (10, 1 / 3), (1000, 1 / 3)):
        batch = buffer.sample(64, updates=updates)
        expected = torch.where(batch["index"] == 0, torch.tensor(1.0), torch.tensor(low))
        torch.testing.assert_close(batch["weight"], expected.float())
        assert set(batch["index"].tolist()) == {0, 1}
    # The batch's rows are the drawn ones.
    torch.testing.assert_close(batch["reward"], batch["index"].float())
    torch.testing.assert_close(batch["obs"][:, 0], batch["index"].float())


def test_beta_anneals_linearly_to_one():
    assert annealed_beta(0, 0.4, 100) == pytest.approx(0.4)
    assert annealed_beta(50, 0.4, 100) == pytest.approx(0.7)
    assert annealed_beta(100, 0.4, 100) == 1.0
    assert annealed_beta(10_000, 0.4, 100) == 1.0


def test_the_config_checks_the_new_fields():
    config_cls = algorithm_info("dqn").config_cls
    config = config_cls()
    assert (config.prioritized, config.priority_alpha, config.priority_beta_start) == (False, 0.6, 0.4)
    for field, bad, allowed in (("priority_alpha", -1.0, ">= 0"), ("priority_beta_start", 1.5, r"in \[0, 1\]"),
                                ("priority_beta_updates", 0, ">= 1"), ("priority_epsilon", 0.0, "> 0")):
        with pytest.raises(ValueError, match=f"{field} must be {allowed}"):
            config_cls(**{field: bad})
    assert type(make_agent("sac", *_spaces("Pendulum"), {}).replay) is ReplayBuffer  # off by default
    assert isinstance(make_agent("sac", *_spaces("Pendulum"), {"prioritized": True}).replay, PrioritizedReplayBuffer)


def test_save_load_round_trip_keeps_priorities_and_draws():
    buffer = filled(6, capacity=4)  # wrapped: rows 4, 5 overwrote 0, 1
    buffer.update_priorities(torch.tensor([0, 1, 2, 3]), torch.tensor([5.0, 1.0, 2.0, 3.0]))
    state = buffer.state_dict()
    # Oldest first, like the other fields: rows 2, 3, 0 (obs 4), 1 (obs 5).
    assert state["obs"][:, 0].tolist() == [2.0, 3.0, 4.0, 5.0]
    assert state["priority"].tolist() == pytest.approx([2.0, 3.0, 5.0, 1.0])
    clone = PrioritizedReplayBuffer(4, 1, 1, CPU)
    clone.load_state_dict(state)
    assert clone.state_dict()["priority"].tolist() == state["priority"].tolist()
    assert float(clone.max_priority) == pytest.approx(5.0 + 1e-6)
    # Each transition keeps its share of the draws (the rows are renumbered oldest first).
    def shares(b):
        return {float(b.data["obs"][i, 0]): float(b.tree.get(torch.tensor([i]))[0] / b.tree.total()) for i in range(4)}

    assert shares(clone) == pytest.approx(shares(buffer))
    # A smaller buffer keeps the newest rows and their priorities.
    small = PrioritizedReplayBuffer(2, 1, 1, CPU)
    small.load_state_dict(state)
    assert small.state_dict()["priority"].tolist() == pytest.approx([5.0, 1.0])


def test_a_checkpoint_without_priorities_loads_and_a_plain_buffer_ignores_them():
    plain = filled(5, capacity=8, cls=ReplayBuffer)
    buffer = PrioritizedReplayBuffer(8, 1, 1, CPU)
    buffer.load_state_dict(plain.state_dict())  # an old checkpoint, or one of a run without prioritized
    assert buffer.size == 5 and buffer.priority[:5].tolist() == [1.0] * 5 and buffer.priority[5:].sum() == 0
    assert float(buffer.tree.total()) == pytest.approx(5.0)
    assert set(buffer.sample(200)["index"].tolist()) == set(range(5))  # only stored rows, uniformly
    back = ReplayBuffer(8, 1, 1, CPU)
    back.load_state_dict(filled(5, capacity=8).state_dict())
    assert back.size == 5


def _spaces(env):
    env = make_vec_env(env, 1)
    return env.single_observation_space, env.single_action_space


@pytest.mark.parametrize("algorithm, env", [("dqn", "CartPole"), ("d3qn", "CartPole"), ("ddpg", "Pendulum"),
                                            ("td3", "Pendulum"), ("sac", "Pendulum")])
@pytest.mark.parametrize("pipeline", [False, True])
def test_updates_set_the_drawn_rows_priorities_to_their_td_errors(algorithm, env, pipeline):
    agent = train_agent(algorithm, {**TINY, "pipeline": pipeline}, env_steps=96, env=env)
    agent.finish()
    assert agent.updates > 0
    replay = agent.replay
    learned = replay.priority[:replay.size] != 1.0  # rows some update drew (all started at the max, 1)
    assert learned.any()
    # The tree holds p^alpha of every stored row, and nothing else.
    torch.testing.assert_close(replay.tree.leaves()[:replay.size],
                               replay.priority[:replay.size].double().pow(agent.config.priority_alpha))
    assert float(replay.tree.total()) == pytest.approx(float(replay.tree.leaves().sum()))
    # One more update by hand: the drawn rows' priorities become |TD error| + epsilon.
    torch.manual_seed(0)
    batch = replay.sample(16, updates=agent.updates)
    losses = agent.update(batch)
    assert losses["td_error"].shape == (16,)
    replay.update_priorities(batch["index"], losses["td_error"])
    last = {i: abs(e) for i, e in zip(batch["index"].tolist(), losses["td_error"].tolist())}
    for i, e in last.items():
        assert float(replay.priority[i]) == pytest.approx(e + 1e-6, rel=1e-5)


@pytest.mark.parametrize("algorithm, env, loss", [("sac", "Pendulum", "critic_loss"),
                                                  ("td3", "Pendulum", "critic_loss"), ("dqn", "CartPole", "loss")])
def test_importance_weights_scale_the_critic_loss(algorithm, env, loss):
    obs_space, act_space = _spaces(env)
    agent = make_agent(algorithm, obs_space, act_space, {**TINY, "prioritized": False})
    other = make_agent(algorithm, obs_space, act_space, {**TINY, "prioritized": False})
    other.load_state_dict(agent.state_dict())
    g = torch.Generator().manual_seed(0)
    obs_dim = obs_space.shape[0]
    action = (torch.randint(0, 2, (16, 1), generator=g).float() if env == "CartPole"
              else torch.rand(16, 1, generator=g) * 4 - 2)
    batch = {"obs": torch.randn(16, obs_dim, generator=g), "action": action,
             "reward": torch.randn(16, generator=g), "next_obs": torch.randn(16, obs_dim, generator=g),
             "terminated": torch.zeros(16)}
    torch.manual_seed(1)
    plain = agent.update(dict(batch))
    torch.manual_seed(1)
    weighted = other.update({**batch, "index": torch.arange(16), "weight": torch.full((16,), 0.5)})
    # The same networks, target and TD errors: weights of 0.5 halve the loss (DQN's Huber, the critics' squares).
    assert float(weighted[loss]) == pytest.approx(0.5 * float(plain[loss]), rel=1e-5)
    assert "td_error" not in plain and weighted["td_error"].shape == (16,)


def test_prioritized_off_is_the_uniform_buffer():
    # The default draws uniformly from the plain buffer: same seed, same parameters as a config without the field.
    a = train_agent("dqn", {**TINY, "prioritized": False, "num_envs": 4}, env_steps=128, env="CartPole")
    b = train_agent("dqn", {k: v for k, v in TINY.items() if k != "prioritized"} | {"num_envs": 4},
                    env_steps=128, env="CartPole")
    c = train_agent("dqn", {**TINY, "num_envs": 4}, env_steps=128, env="CartPole")
    flat = [flatten_state(x.state_dict())[0] for x in (a, b, c)]
    assert all((flat[0][k] == flat[1][k]).all() for k in flat[0])
    assert any(not (flat[0][k] == flat[2][k]).all() for k in flat[0] if k in flat[2])  # prioritized differs
    assert "replay.priority" in flat[2] and "replay.priority" not in flat[0]


def test_agent_checkpoint_round_trip_with_priorities():
    agent = train_agent("dqn", {**TINY, "num_envs": 4}, env_steps=128, env="CartPole")
    arrays, skeleton = flatten_state(agent.state_dict())
    clone = make_agent("dqn", *_spaces("CartPole"), {**TINY, "num_envs": 4})
    clone.load_state_dict(unflatten_state(skeleton, arrays))
    torch.testing.assert_close(clone.replay.priority, agent.replay.priority)
    torch.testing.assert_close(clone.replay.tree.tree, agent.replay.tree.tree)
    # A child without prioritized loads it too (and ignores the priorities).
    plain = make_agent("dqn", *_spaces("CartPole"), {**TINY, "num_envs": 4, "prioritized": False})
    plain.load_state_dict(unflatten_state(skeleton, arrays))
    assert plain.replay.size == agent.replay.size


def test_epsilon_ladder_is_apex_formula():
    assert epsilon_ladder(1) == [0.4]
    ladder = epsilon_ladder(8, epsilon=0.4, alpha=7)
    assert ladder == pytest.approx([0.4 ** (1 + 7 * i / 7) for i in range(8)])
    assert ladder[0] == pytest.approx(0.4) and ladder[-1] == pytest.approx(0.4 ** 8)
    assert epsilon_ladder(3, epsilon=0.5, alpha=2) == pytest.approx([0.5, 0.25, 0.125])
    assert all(a > b for a, b in zip(ladder, ladder[1:]))
    with pytest.raises(ValueError, match="n_actors must be >= 1"):
        epsilon_ladder(0)
    noise = noise_ladder(3, largest=0.4, smallest=0.1)
    assert noise == pytest.approx([0.4, 0.2, 0.1])
    assert noise_ladder(1, largest=0.3) == [0.3]
    # The epsilon ladder is the noise ladder from eps to eps^(1 + alpha).
    assert noise_ladder(5, 0.4, 0.4 ** 8) == pytest.approx(epsilon_ladder(5, 0.4, 7))


FAST = {"num_envs": 16, "exploration_steps": 5000, "utd_ratio": 0.25, "learning_rate": 2e-3, "batch_size": 64}


def test_prioritized_dqn_learns_cartpole():
    torch.manual_seed(0)  # an untrained Q-network's greedy policy depends on its initial weights
    random_policy = score(make_agent("dqn", *_spaces("CartPole"), {}), env="CartPole")
    agent = train_agent("dqn", {**FAST, "prioritized": True}, env_steps=12_000, env="CartPole")
    trained = score(agent, env="CartPole")
    assert random_policy < 60
    assert trained > 100, f"prioritized dqn reached {trained:.0f} after 12k env steps (random: {random_policy:.0f})"
    assert float(agent.replay.priority.std()) > 0.01  # priorities were learned, not all the initial max


def test_a_shared_replay_lineage_may_switch_prioritized_on_and_off(tmp_path):
    """`tournament.replay = "share"`: a child holds its parent's rows by reference. A parent saved without
    priorities gives its rows priority 1 to a prioritised child, and a plain grandchild drops the column."""
    from dask_podracer.store import PodracerStore
    from dask_podracer.train import SegmentSpec, load_agent, run_segment

    store = PodracerStore(tmp_path / "s.zarr", create=True)
    plain = {**TINY, "prioritized": False}

    def segment(key, parent, hparams):
        return run_segment(SegmentSpec(key=key, store_url=store.url, env="Pendulum-v1", algorithm="sac",
                                       hparams=hparams, parent=parent, seed=1, env_step_budget=40, eval_episodes=1,
                                       share_replay=parent is not None))

    segment("a", None, plain)
    segment("b", "a", TINY)
    child = load_agent(store, "b")
    assert child.replay.size == 80
    priorities = child.replay.priority[:80]
    assert torch.all(priorities[:40] == 1.0)  # the parent's rows, saved without priorities
    segment("c", "b", plain)  # reads b's rows (with priorities) and a's (without) into a plain buffer
    assert load_agent(store, "c").replay.size == 120
