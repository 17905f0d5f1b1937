"""What the docs promise a new user, checked on real parts (a LocalCluster, a Zarr store on disk)."""

from dask_podracer.config import config_from_dict
from dask_podracer.population import run_tournament


def test_progress_counts_the_segment_that_replaces_a_finished_one(tmp_path, cpu_client):
    """docs/monitoring.md: a plain line's `running` is the segments training now. With a pool of 2, the line
    of a finished segment counts its replacement too (`running 2`), not only the other segment (it said 1)."""
    config = config_from_dict({
        "run": {"env": "Pendulum-v1", "algorithm": "sac", "store": str(tmp_path / "run.zarr"), "budget": "5m",
                "max_segments": 4, "seed": 0},
        "tournament": {"pool_size": 2},
        "segment": {"env_steps": 64, "eval_episodes": 2},
        "hparams": {"num_envs": 4, "learning_starts": 32, "batch_size": 16, "hidden": [16, 16]}})
    progress = []
    summary = run_tournament(config, cpu_client, on_progress=progress.append)
    assert summary.segments_completed == 4, summary
    # segments 0 and 1 run; each of the first two to end is replaced (max_segments 4), the last two are not
    assert [p.running for p in progress] == [2, 2, 1, 0]
