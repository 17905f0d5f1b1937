"""hparams.normalize_observations: the agent keeps running observation statistics, its networks see normalised
observations, everything outside it hands it raw ones; the statistics travel in checkpoints and exports.
hparams.normalize_rewards: the agent scales rewards by the running std of the discounted return; reported
returns stay raw."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import train_in

from dask_podracer.agents import make_agent
from dask_podracer.agents.normalization import CLIP, EPSILON, RewardNormalizer
from dask_podracer.agents.loop import sample_batch
from dask_podracer.envs import make_vec_env
from dask_podracer.envs.wrappers import VecEnvWrapper
from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentError, SegmentSpec, evaluate, load_agent, run_segment
from dask_podracer.train.state import flatten_state, unflatten_state

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"


class BadlyScaled(VecEnvWrapper):
    """Observations multiplied and shifted far from unit scale (as raw sensor readings may be); records every
    observation it hands out, in order."""

    def __init__(self, env, scale: list[float], offset: list[float]) -> None:
        super().__init__(env)
        self.scale, self.offset = torch.tensor(scale), torch.tensor(offset)
        self.handed_out: list[torch.Tensor] = []

    def _map(self, obs):
        return obs * self.scale + self.offset

    def reset(self, *, seed=None):
        obs, info = self.env.reset(seed=seed)
        self.handed_out.append(self._map(obs))
        return self.handed_out[-1], info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.handed_out.append(self._map(obs))
        return self.handed_out[-1], reward, terminated, truncated, {**info, "final_obs": self._map(info["final_obs"])}


PENDULUM = ([100.0, 100.0, 50.0], [500.0, -300.0, 0.0])
CARTPOLE = ([100.0, 100.0, 1000.0, 100.0], [300.0, 0.0, -200.0, 0.0])


def scaled(name: str, num_envs: int, seed: int) -> BadlyScaled:
    return BadlyScaled(make_vec_env(name, num_envs, seed=seed), *(PENDULUM if name == "Pendulum" else CARTPOLE))


def train(algorithm: str, hparams: dict, env_steps: int, env: str = "Pendulum", seed: int = 0):
    """An agent trained on the badly scaled `env`, and that env (what it handed out)."""
    torch.manual_seed(seed)
    train_env = scaled(env, hparams.get("num_envs", 4), seed)
    return train_in(train_env, algorithm, hparams, env_steps, seed), train_env


FAST_SAC = {"hidden": (64, 64), "num_envs": 4, "utd_ratio": 1.0, "learning_starts": 500}


def test_sac_learns_a_badly_scaled_pendulum_only_with_normalised_observations():
    scores = {}
    for normalize in (False, True):
        agent, _ = train("sac", {**FAST_SAC, "normalize_observations": normalize}, env_steps=3000)
        scores[normalize] = evaluate(agent, scaled("Pendulum", 10, seed=123), seed=123)
    # On the unscaled env the same budget reaches about -150 (tests/test_sac.py); random is about -1250.
    assert scores[True] > -400, scores
    assert scores[False] < -900, scores  # inputs in the hundreds: the same agent learns nothing in this budget


CASES = [
    ("sac", {"hidden": (32, 32), "num_envs": 4, "learning_starts": 40, "batch_size": 32}, "Pendulum"),
    ("sac", {"hidden": (32, 32), "num_envs": 4, "learning_starts": 40, "batch_size": 32, "pipeline": True},
     "Pendulum"),
    ("td3", {"hidden": (32, 32), "num_envs": 4, "learning_starts": 40, "batch_size": 32}, "Pendulum"),
    ("ddpg", {"hidden": (32, 32), "num_envs": 4, "learning_starts": 40, "batch_size": 32}, "Pendulum"),
    ("dqn", {"hidden": (32, 32), "num_envs": 4, "learning_starts": 40, "batch_size": 32}, "CartPole"),
    ("d3qn", {"hidden": (32, 32), "num_envs": 4, "learning_starts": 40, "batch_size": 32}, "CartPole"),
    ("ppo", {"hidden": (32, 32), "num_envs": 4, "rollout_steps": 8, "num_minibatches": 2}, "Pendulum"),
    ("a2c", {"hidden": (32, 32), "num_envs": 4}, "CartPole"),
]
CASE_IDS = [f"{a}-{e}" + ("-pipeline" if h.get("pipeline") else "") for a, h, e in CASES]


@pytest.mark.parametrize("algorithm, hparams, env", CASES, ids=CASE_IDS)
def test_the_statistics_are_of_every_observation_acted_on_and_travel_in_the_state(algorithm, hparams, env):
    hparams = {**hparams, "normalize_observations": True}
    agent, train_env = train(algorithm, hparams, env_steps=160, env=env)
    state = agent.state_dict()  # in pipeline mode: after the learner's owed updates
    acted_on = torch.cat(train_env.handed_out[:-1]).double()  # the last obs is the next iteration's
    torch.testing.assert_close(agent.obs_norm.rms.mean, acted_on.mean(0), rtol=1e-5, atol=1e-3)
    # (the statistics start from a prior of weight 1e-4 at mean 0, as gymnasium's do: a mean of 300 moves the
    # variance by 300² · 1e-4 / n, here about 0.06)
    torch.testing.assert_close(agent.obs_norm.rms.var, acted_on.var(0, unbiased=False), rtol=1e-2, atol=1e-3)
    assert float(agent.obs_norm.rms.count) == pytest.approx(len(acted_on), abs=1e-3)

    raw = train_env.handed_out[-1]
    normalised = agent.obs_norm(raw)
    assert normalised.abs().max() <= CLIP and normalised.abs().max() < 5  # unit scale, where raw is in hundreds
    if hasattr(agent, "replay"):  # raw in the buffer, normalised in the batches the learner gets
        assert agent.replay.data["obs"][: agent.replay.size].abs().max() > 100
        assert sample_batch(agent)["next_obs"].abs().max() <= CLIP

    clone = make_agent(algorithm, train_env.single_observation_space, train_env.single_action_space, hparams)
    clone.load_state_dict(unflatten_state(*flatten_state(state)[::-1]))  # as the store keeps it
    torch.testing.assert_close(clone.obs_norm.rms.mean, agent.obs_norm.rms.mean)
    assert torch.equal(clone.act(raw), agent.act(raw))

    plain = make_agent(algorithm, train_env.single_observation_space, train_env.single_action_space,
                       {**hparams, "normalize_observations": False})
    with pytest.raises(ValueError, match=rf"this {algorithm} checkpoint was trained with observation "
                                         rf"normalisation, and hparams.normalize_observations is false"):
        plain.load_state_dict(state)
    with pytest.raises(ValueError, match=r"trained without observation normalisation, and "
                                         r"hparams.normalize_observations is true"):
        clone.load_state_dict(plain.state_dict())


def test_evaluation_does_not_move_the_statistics():
    agent, _ = train("sac", {**FAST_SAC, "learning_starts": 40, "normalize_observations": True}, env_steps=80)
    before = agent.obs_norm.rms.state_dict()
    evaluate(agent, scaled("Pendulum", 4, seed=1), seed=1)
    after = agent.obs_norm.rms.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def parent_and_child(tmp_path, setting: str):
    """SAC segments "parent" (100 env steps) and "child" of it (100 more) with `setting` on, in a fresh store;
    the store, the segments' hparams and common spec fields, and both agents loaded back."""
    store = PodracerStore(tmp_path / "n.zarr", create=True)
    hparams = {"hidden": [16, 16], "num_envs": 2, "learning_starts": 50, "batch_size": 32, setting: True}
    common = {"store_url": store.url, "env": "Pendulum-v1", "algorithm": "sac", "env_step_budget": 100,
              "eval_episodes": 3}
    run_segment(SegmentSpec(key="parent", seed=1, hparams=hparams, **common))
    run_segment(SegmentSpec(key="child", parent="parent", seed=2, hparams=hparams, generation=1, **common))
    return store, hparams, common, load_agent(store, "parent", replay=False), load_agent(store, "child", replay=False)


def test_a_child_segment_continues_its_parents_statistics_and_the_export_carries_them(tmp_path):
    store, hparams, common, parent, child = parent_and_child(tmp_path, "normalize_observations")
    assert float(parent.obs_norm.rms.count) == pytest.approx(100, abs=1e-3)
    assert float(child.obs_norm.rms.count) == pytest.approx(200, abs=1e-3)  # the parent's 100, then its own

    with pytest.raises(SegmentError, match=r"trained with observation normalisation, and "
                                           r"hparams.normalize_observations is false"):
        run_segment(SegmentSpec(key="other", parent="parent", seed=3, generation=1,
                                hparams={**hparams, "normalize_observations": False}, **common))

    out = tmp_path / "champion"
    exported = subprocess.run([sys.executable, str(WORKFLOWS / "export_champion.py"), store.url, str(out), "--key",
                               "child", "--episodes", "3"], capture_output=True, text=True, check=False)
    assert exported.returncode == 0, exported.stderr
    card = json.loads((out / "card.json").read_text())
    assert card["evaluation"]["score"] == pytest.approx(card["score"], abs=1e-3)  # the same frozen statistics
    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript (2.11 does not warn); the card promises it
        warnings.filterwarnings("ignore", "`torch.jit.load` is deprecated", DeprecationWarning)
        policy = torch.jit.load(str(out / "policy.pt"))
    obs = make_vec_env("Pendulum-v1", 8, seed=5).reset(seed=5)[0]  # raw observations, as any user has them
    torch.testing.assert_close(policy(obs), child.act(obs))


def test_a_store_whose_entries_another_normalisation_or_width_built_is_not_resumed(tmp_path, capsys):
    from dask_podracer.cli import main
    from dask_podracer.config import ConfigError, config_from_dict
    from dask_podracer.population import check_store_fits

    store = PodracerStore(tmp_path / "s.zarr", create=True)
    entry = {"key": "s000001-ab", "group": "sac", "algorithm": "sac", "env": "Pendulum-v1", "score": -150.0,
             "hparams": {"hidden": [32, 32], "normalize_observations": True, "actor_lr": 3e-4}}
    store.write_leaderboard([entry])
    store.write_run_state({"env": "Pendulum-v1", "env_kwargs": {}, "machine": {"agents": []}})

    def config(**hparams):
        return config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "store": store.url},
                                 "hparams": {"hidden": [32, 32], "normalize_observations": True, **hparams}})

    check_store_fits(config(actor_lr=1e-3))  # a tunable one may differ: the entry still loads
    with pytest.raises(ConfigError, match=r"store '.*' holds 'sac' entry s000001-ab trained with "
                                          r"hparams.normalize_observations = true, and this config gives 'sac' "
                                          r"normalize_observations = false: its new agents could not load it"):
        check_store_fits(config(normalize_observations=False))
    with pytest.raises(ConfigError, match=r"trained with hparams.hidden = \[32, 32\], and this config gives 'sac' "
                                          r"hidden = \[64, 64\]"):
        check_store_fits(config(hidden=[64, 64]))
    searched = config_from_dict({"run": {"env": "Pendulum-v1", "algorithm": "sac", "store": store.url},
                                 "hparams": {"normalize_observations": True},
                                 "search": {"hidden": {"choice": [[32, 32], [64, 64]]}}})
    check_store_fits(searched)  # each agent draws its own: nothing to compare
    toml = tmp_path / "plain.toml"
    toml.write_text(f'[run]\nenv = "Pendulum-v1"\nalgorithm = "sac"\nstore = "{store.url}"\n'
                    f'[hparams]\nhidden = [32, 32]\n')
    assert main(["train", str(toml)]) == 2  # before a cluster starts; nothing written
    assert "normalize_observations = true, and this config gives 'sac' normalize_observations = false" in \
        capsys.readouterr().err
    assert store.read_leaderboard() == [entry]


# -- reward normalisation -------------------------------------------------------------------------------

class RewardsTimes(VecEnvWrapper):
    """Rewards multiplied by `factor`; records every step's (scaled) rewards and where episodes ended."""

    def __init__(self, env, factor: float = 1.0) -> None:
        super().__init__(env)
        self.factor = factor
        self.rewards: list[torch.Tensor] = []
        self.dones: list[torch.Tensor] = []

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.rewards.append(reward * self.factor)
        self.dones.append(terminated | truncated)
        return obs, self.rewards[-1], terminated, truncated, info


def reference_scales(rewards: list[torch.Tensor], dones: list[torch.Tensor], gamma: float):
    """What each step's rewards should be divided by (the std of every discounted return so far, the current
    ones included, under the statistics' prior of weight 1e-4 at mean 0, variance 1), written out plainly."""
    prior, returns, seen, scales = 1e-4, torch.zeros_like(rewards[0], dtype=torch.float64), [], []
    for reward, done in zip(rewards, dones):
        returns = gamma * returns + reward.double()
        seen.append(returns.clone())
        g = torch.cat(seen)
        total = prior + len(g)
        mean, mean_square = g.sum() / total, (prior + (g ** 2).sum()) / total
        scales.append(torch.sqrt(mean_square - mean ** 2 + EPSILON))
        returns = torch.where(done, 0.0, returns)
    return scales


@pytest.mark.parametrize("algorithm, hparams, env", CASES, ids=CASE_IDS)
def test_rewards_are_scaled_by_the_std_of_every_discounted_return_so_far(algorithm, hparams, env):
    hparams = {**hparams, "normalize_rewards": True}
    torch.manual_seed(0)
    train_env = RewardsTimes(make_vec_env(env, hparams["num_envs"], seed=0), factor=3.0)
    agent = train_in(train_env, algorithm, hparams, env_steps=160)
    state = agent.state_dict()  # in pipeline mode: after the learner's owed updates
    gamma = agent.config.gamma
    scales = reference_scales(train_env.rewards, train_env.dones, gamma)
    torch.testing.assert_close(agent.reward_norm.rms.var.sqrt(), scales[-1], rtol=1e-6, atol=0)
    assert float(agent.reward_norm.rms.count) == pytest.approx(160, abs=1e-3)

    if hasattr(agent, "replay"):  # raw rewards in the buffer; the learner's batches scaled by the latest std
        size = agent.replay.size
        torch.testing.assert_close(agent.replay.data["reward"][:size], torch.cat(train_env.rewards))
        torch.manual_seed(7)
        raw = agent.replay.sample(agent.config.batch_size)["reward"]
        torch.manual_seed(7)
        expected = (raw.double() / scales[-1]).clamp(-CLIP, CLIP).float()
        torch.testing.assert_close(sample_batch(agent)["reward"], expected, rtol=1e-5, atol=1e-6)
    else:  # the last rollout is stored scaled, each step by the std of the moment, then times reward_scale
        steps = agent.config.rollout_steps
        expected = torch.stack([(r.double() / s).clamp(-CLIP, CLIP) for r, s in
                                zip(train_env.rewards[-steps:], scales[-steps:])]).float()
        torch.testing.assert_close(agent.buffer.rewards, expected * agent.config.reward_scale, rtol=1e-5, atol=1e-6)

    clone = make_agent(algorithm, train_env.single_observation_space, train_env.single_action_space, hparams)
    clone.load_state_dict(unflatten_state(*flatten_state(state)[::-1]))  # as the store keeps it
    torch.testing.assert_close(clone.reward_norm.rms.var, agent.reward_norm.rms.var)
    # The other setting loads: no network depends on it. Off, the statistics are dropped; on, they start afresh.
    plain = make_agent(algorithm, train_env.single_observation_space, train_env.single_action_space,
                       {**hparams, "normalize_rewards": False})
    plain.load_state_dict(state)
    assert "reward_norm" not in plain.state_dict()
    fresh = make_agent(algorithm, train_env.single_observation_space, train_env.single_action_space, hparams)
    fresh.load_state_dict(plain.state_dict())
    assert float(fresh.reward_norm.rms.count) == pytest.approx(1e-4)


def test_the_normalised_rewards_do_not_depend_on_the_rewards_scale():
    rewards = [torch.tensor([-3.0, -1.0, 0.5]), torch.tensor([-2.0, 4.0, 0.0]), torch.tensor([1.0, -1.0, 2.0])]
    done = [torch.tensor([False, True, False]), torch.tensor([False, False, False]), torch.tensor([True] * 3)]
    normalised = {}
    for factor in (1.0, 1000.0):
        normalizer = RewardNormalizer(3, 0.99, True, torch.device("cpu"))
        out = []
        for r, d in zip(rewards, done):
            normalizer.update(r * factor, d)
            out.append(normalizer(r * factor))
        normalised[factor] = torch.stack(out)
    # equal up to the prior's weight of 1e-4 in the statistics
    torch.testing.assert_close(normalised[1.0], normalised[1000.0], rtol=1e-4, atol=0)
    with pytest.raises(ValueError, match=r"a step of 4 rewards, and the agent normalises the returns of "
                                         r"num_envs = 3 envs"):
        RewardNormalizer(3, 0.99, True, torch.device("cpu")).update(torch.zeros(4), torch.zeros(4, dtype=torch.bool))


def test_ppo_learns_pendulum_with_rewards_a_hundred_times_larger_only_with_normalised_rewards():
    scores = {}
    for normalize in (False, True):
        torch.manual_seed(0)
        env = RewardsTimes(make_vec_env("Pendulum", 64, seed=0), factor=100.0)
        agent = train_in(env, "ppo", {"reward_scale": 1.0, "normalize_rewards": normalize}, env_steps=40_960)
        scores[normalize] = evaluate(agent, make_vec_env("Pendulum", 10, seed=123), seed=123)  # raw rewards
    # PPO's default reward_scale of 0.1 is tuned for Pendulum's own rewards; normalised, the scale is the env's
    # no longer (the same agent on the unscaled env with reward_scale 1 and no normalisation stays near random)
    assert scores[True] > -400, scores
    assert scores[False] < -900, scores


def test_a_child_segment_continues_its_parents_reward_statistics_and_may_switch_them_off(tmp_path):
    store, hparams, common, parent, child = parent_and_child(tmp_path, "normalize_rewards")
    assert float(parent.reward_norm.rms.count) == pytest.approx(100, abs=1e-3)
    assert float(child.reward_norm.rms.count) == pytest.approx(200, abs=1e-3)  # the parent's 100, then its own
    off = run_segment(SegmentSpec(key="off", parent="child", seed=3, generation=2,
                                  hparams={**hparams, "normalize_rewards": False}, **common))
    assert off.lineage_env_steps == 300 and "reward_norm" not in load_agent(store, "off", replay=False).state_dict()
