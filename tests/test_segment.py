"""run_segment on a real Zarr store: fresh and child segments, exact checkpoint round trips."""

import json
import subprocess
import sys

import pytest
import torch

from dask_podracer.store import PodracerStore
from dask_podracer.train import SegmentError, SegmentSpec, load_agent, run_segment
from dask_podracer.train.state import flatten_state, unflatten_state

HPARAMS = {"hidden": [32, 32], "num_envs": 2, "learning_starts": 50, "batch_size": 32, "buffer_size": 1000}


def spec(store, key, parent=None, **changes):
    fields = dict(key=key, store_url=store.url, env="Pendulum-v1", algorithm="sac", hparams=HPARAMS,
                  parent=parent, seed=1, env_step_budget=100, eval_episodes=3)
    return SegmentSpec(**{**fields, **changes})


@pytest.fixture
def store(tmp_path):
    return PodracerStore(tmp_path / "store.zarr", create=True)


def test_fresh_then_child_segment(store):
    first = run_segment(spec(store, "a"))
    assert first.parent is None and first.segment_env_steps == 100 and first.lineage_env_steps == 100
    assert -2000 < first.score < 0 and first.generation == 0
    child = run_segment(spec(store, "b", parent="a", generation=1, hparams={**HPARAMS, "actor_lr": 3e-4}))
    assert child.parent == "a" and child.lineage_env_steps == 200 and child.generation == 1
    assert store.checkpoint_keys() == ["a", "b"]
    attrs = store.checkpoint_attrs("b")
    assert attrs["parent"] == "a" and attrs["hparams"]["actor_lr"] == 3e-4 and attrs["env_steps"] == 200
    agent = load_agent(store, "b")
    assert agent.actor_optim.param_groups[0]["lr"] == 3e-4  # the child's rate, though the parent saved 1e-3
    assert agent.replay.size == 200  # the parent's transitions came along


def test_checkpoint_round_trip_is_exact_also_in_a_fresh_process(store):
    run_segment(spec(store, "a"))
    agent = load_agent(store, "a")
    arrays, _ = flatten_state(agent.state_dict())
    checkpoint = store.load_checkpoint("a")
    assert sorted(arrays) == sorted(checkpoint.arrays)
    for name, array in arrays.items():
        assert array.dtype == checkpoint.arrays[name].dtype and array.shape == checkpoint.arrays[name].shape, name
        assert (array == checkpoint.arrays[name]).all(), name
    obs = torch.linspace(-1, 1, 30).reshape(10, 3)
    expected = agent.act(obs).flatten().tolist()
    code = (
        "import json, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from dask_podracer.store import PodracerStore\n"
        "from dask_podracer.train import load_agent\n"
        f"agent = load_agent(PodracerStore({store.url!r}), 'a')\n"
        "obs = torch.linspace(-1, 1, 30).reshape(10, 3)\n"
        "print(json.dumps(agent.act(obs).flatten().tolist()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == expected  # bit for bit


def test_state_flattening_keeps_int_keys_tuples_and_scalars():
    state = {"optim": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.99),
             "params": [0], "maximize": False, "foreach": None}]}, "log_alpha": torch.tensor(-1.5)}
    arrays, skeleton = flatten_state(state)
    back = unflatten_state(json.loads(json.dumps(skeleton)), arrays)
    assert back["optim"]["state"][0]["step"].shape == () and back["log_alpha"].item() == -1.5
    assert back["optim"]["param_groups"] == state["optim"]["param_groups"]


def test_non_finite_training_is_failed_and_not_saved(store):
    with pytest.raises(SegmentError, match="non-finite"):
        run_segment(spec(store, "nan", hparams={**HPARAMS, "critic_lr": 1e30, "actor_lr": 1e30}, env_step_budget=400))
    assert store.checkpoint_keys() == []


def test_parent_of_another_algorithm_or_env_is_refused(store):
    run_segment(spec(store, "a"))
    with pytest.raises(SegmentError, match="parent a is sac on Pendulum-v1, not ppo on Pendulum-v1"):
        run_segment(spec(store, "b", parent="a", algorithm="ppo", hparams={}))


def test_env_kwargs_build_the_env_are_recorded_and_must_match_the_parents(store):
    pendulum = {"env": "gym:Pendulum-v1", "eval_episodes": 2}
    run_segment(spec(store, "a", env_kwargs={"g": 4.0}, **pendulum))
    assert store.checkpoint_attrs("a")["env_kwargs"] == {"g": 4.0}
    agent = load_agent(store, "a", replay=False)  # rebuilds the env it needs from the attrs
    assert agent.updates > 0
    with pytest.raises(SegmentError, match=r"parent a trained on gym:Pendulum-v1 with env_kwargs \{'g': 4.0\}, "
                                           r"not \{'g': 9.0\}"):
        run_segment(spec(store, "b", parent="a", env_kwargs={"g": 9.0}, **pendulum))
    child = run_segment(spec(store, "c", parent="a", env_kwargs={"g": 4.0}, **pendulum))
    assert child.env_kwargs == {"g": 4.0} and child.lineage_env_steps == 200
    # how the envs are stepped is not what they are: a child may step its parent's env another way
    stepped = run_segment(spec(store, "d", parent="c", env_kwargs={"g": 4.0, "vectorization_mode": "sync"},
                               **pendulum))
    assert stepped.lineage_env_steps == 300


def test_a_segment_run_twice_returns_the_saved_result_without_training_again(store):
    first = run_segment(spec(store, "a"))
    again = run_segment(spec(store, "a"))  # e.g. Dask re-ran it after its worker died past the save
    assert again.score == first.score and again.lineage_env_steps == first.lineage_env_steps
    assert again.train_seconds == 0.0 and store.checkpoint_keys() == ["a"]


def _lineage(store, prefix, share, parents=3):
    """Three segments, each from the last; a 250-row buffer, so the third one's buffer wraps."""
    hparams = {**HPARAMS, "buffer_size": 250}
    parent = None
    for i in range(parents):
        run_segment(spec(store, f"{prefix}{i}", parent=parent, seed=10 + i, generation=i, hparams=hparams,
                         share_replay=share))
        parent = f"{prefix}{i}"
    return parent


def _bytes(path):
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_shared_replay_gives_the_same_agent_as_copies_and_stores_each_transition_once(tmp_path):
    copies = PodracerStore(tmp_path / "copy.zarr", create=True)
    shared = PodracerStore(tmp_path / "share.zarr", create=True)
    _lineage(copies, "c", share=False)
    _lineage(shared, "s", share=True)
    for i in range(3):  # training saw the same buffers: every checkpoint holds the same networks and data
        a, _ = flatten_state(load_agent(copies, f"c{i}").state_dict())
        b, _ = flatten_state(load_agent(shared, f"s{i}").state_dict())
        assert sorted(a) == sorted(b)
        for name in a:
            assert (a[name] == b[name]).all(), (i, name)
    assert load_agent(shared, "s2").replay.size == 250
    # each shared checkpoint stores only the 100 rows its segment collected; the rest by reference
    for i, base in enumerate([None, {"key": "s0", "rows": 100}, {"key": "s1", "rows": 150}]):
        assert shared.load_checkpoint(f"s{i}").arrays["replay.obs"].shape[0] == 100
        assert shared.checkpoint_attrs(f"s{i}").get("replay_base") == base
    assert copies.load_checkpoint("c2").arrays["replay.obs"].shape[0] == 250
    assert _bytes(tmp_path / "share.zarr" / "checkpoints") < _bytes(tmp_path / "copy.zarr" / "checkpoints")


def test_a_damaged_shared_ancestor_costs_its_transitions_not_the_load(tmp_path):
    store = PodracerStore(tmp_path / "share.zarr", create=True)
    _lineage(store, "s", share=True)
    chunk = next(p for p in (tmp_path / "share.zarr" / "checkpoints" / "s0").rglob("c/*") if p.is_file())
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    agent = load_agent(store, "s2")  # s2 holds 100 rows, s1 gives 100 of the 150 it refers to, s0 is damaged
    assert agent.replay.size == 200
    result = run_segment(spec(store, "s3", parent="s2", seed=20, generation=3, share_replay=True,
                              hparams={**HPARAMS, "buffer_size": 250}))
    assert result.metrics["replay_rows_lost"] == 50.0


def test_an_agent_loaded_to_act_reads_no_shared_ancestor(tmp_path, monkeypatch):
    store = PodracerStore(tmp_path / "share.zarr", create=True)
    _lineage(store, "s", share=True)
    read = []  # the checkpoint each call of the store's checkpoint readers named; the real reader still runs
    for name in ("load_checkpoint", "checkpoint_attrs", "array_names", "array_shape", "has_checkpoint"):
        def spy(self, key, *args, _real=getattr(PodracerStore, name), **kwargs):
            read.append(key)
            return _real(self, key, *args, **kwargs)
        monkeypatch.setattr(PodracerStore, name, spy)
    full = load_agent(store, "s2")
    assert set(read) == {"s0", "s1", "s2"} and full.replay.size == 250  # the spy sees a full load follow s1, s0
    read.clear()
    bare = load_agent(store, "s2", replay=False)
    assert set(read) == {"s2"} and bare.replay.size == 0
    obs = torch.linspace(-1, 1, 30).reshape(10, 3)
    assert torch.equal(full.act(obs), bare.act(obs))
    for ancestor in ("s0", "s1"):  # so gone or damaged ancestors do not matter to an agent that only acts
        store.quarantine(ancestor, "test")
    assert torch.equal(load_agent(store, "s2", replay=False).act(obs), full.act(obs))


def test_eval_env_kwargs_build_the_scoring_env_only(store):
    # gymnasium's Pendulum with max_episode_steps = 20 scores 20-step episodes: returns a tenth of 200 steps'
    pendulum = {"env": "gym:Pendulum-v1", "eval_episodes": 2}
    full = run_segment(spec(store, "a", **pendulum))
    short = run_segment(spec(store, "b", eval_env_kwargs={"max_episode_steps": 20}, **pendulum))
    assert short.score > full.score / 4  # an untrained pendulum loses about as much on each step
    # the training env was the same: the checkpoint records the training kwargs, and the agents are equal
    assert store.checkpoint_attrs("b")["env_kwargs"] == {}
    assert short.lineage_env_steps == full.lineage_env_steps == 100
    trained = [load_agent(store, key).actor.state_dict() for key in ("a", "b")]
    assert all(torch.equal(trained[0][name], trained[1][name]) for name in trained[0])
