"""workflows/clusters.py's deployments, built with the real dask-jobqueue, dask-kubernetes and dask-cuda.

Nothing is submitted or deployed: SLURMCluster writes its sbatch script (its scheduler runs in
this process, on 127.0.0.1), dask-kubernetes' `make_cluster_spec` builds the DaskCluster resource,
and LocalCUDACluster's arguments are checked against its signature (constructing it needs a GPU).
Each deployment must ask for the GPU for its workers only, start them with a command the installed
distributed ships, and have them advertise what segments ask for: that is found by the project's
own `cluster_slots`, on an in-process cluster whose worker advertises the same resources.
"""

import importlib.metadata
import importlib.util
import inspect
import json
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from distributed import Client, LocalCluster, Nanny

from dask_podracer.config import ClusterConfig
from dask_podracer.population.cluster import GPU, cluster_slots

ROOT = Path(__file__).resolve().parents[1]
PRELOAD = "dask_podracer.population.dashboard_preload"
KUBERNETES_GPU = "nvidia.com/gpu"  # the resource NVIDIA's device plugin gives pods


def load_clusters():
    spec = importlib.util.spec_from_file_location("clusters", ROOT / "workflows" / "clusters.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


clusters = load_clusters()


def help_text(command: list[str]) -> str:
    """What `command --help` prints, run for real: the command exists and starts."""
    run = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    return run.stdout


def dask_subcommand(words: list[str]) -> tuple[click.Command, list[str]]:
    """The installed command that `dask SUBCOMMAND ARGS...` runs, and its ARGS.

    `dask` is dask's console script; its subcommands are the `dask_cli` entry points (distributed's
    `worker` and `scheduler`). `python -m dask SUBCOMMAND --help` runs that same CLI, as a check.
    """
    assert words[0] == "dask", words
    assert [ep.value for ep in importlib.metadata.entry_points(group="console_scripts", name="dask")] == [
        "dask.__main__:main"]
    (entry_point,) = importlib.metadata.entry_points(group="dask_cli", name=words[1])
    assert entry_point.dist.name == "distributed"
    assert f"dask {words[1]} [OPTIONS]" in help_text([sys.executable, "-m", "dask", words[1]])
    return entry_point.load(), words[2:]


def python_module_command(words: list[str]) -> tuple[click.Command, list[str]]:
    """The installed command that `PYTHON -m MODULE ARGS...` runs, and its ARGS."""
    python, flag, module = words[:3]
    assert Path(python).exists() and flag == "-m"
    assert importlib.util.find_spec(module) is not None, f"{module} is not in the installed distributed"
    assert "Usage:" in help_text([python, "-m", module])
    return importlib.import_module(module).main, words[3:]


def parsed_options(command: click.Command, args: list[str]) -> dict:
    """`args` as the installed command parses them; nothing runs."""
    params = command.make_context(command.name, list(args)).params
    # distributed's worker and scheduler take unknown options as preload arguments: none must be left over
    assert params["preload_argv"] == (), f"options {command.name} does not know: {params['preload_argv']}"
    return params


def advertised_resources(option: str | None) -> dict[str, float]:
    """A worker's `--resources` option turned into its resources, as distributed/cli/dask_worker.py does."""
    pairs = (option or "").replace(",", " ").split()
    return {name: float(amount) for name, amount in (pair.split("=") for pair in pairs)}


def assert_segments_run_on(advertised: dict[str, float]) -> None:
    """A worker advertising `advertised` offers one GPU slot, and a segment's request runs on it.

    The request is the orchestrator's: `cluster_slots` with the default `cluster.resource` and with
    "GPU" (what an adaptive cluster names), then `client.submit(..., resources=slots.resources)`.
    """
    # in this process (inproc://, no dashboard): nothing listens on a network
    with (LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                       resources=advertised) as cluster, Client(cluster) as client):
        for requested in (ClusterConfig().resource, GPU):
            slots = cluster_slots(client, wait_seconds=10, requested=requested)
            assert slots.resources == {GPU: 1} and slots.count == 1, (requested, slots)
            assert client.submit(sum, [1, 2], resources=slots.resources, pure=False).result(timeout=30) == 3


def test_slurm_jobs_ask_for_one_gpu_and_start_a_worker_that_advertises_it():
    with clusters.slurm_cluster({"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}) as cluster:
        script = cluster.job_script()  # what `scale(jobs=N)` would hand sbatch N times
        scheduler_address = cluster.scheduler_address
        preloads = [preload.name for preload in cluster.scheduler.preloads]
    # the scheduler runs here, not in a job: only the workers' jobs ask Slurm for anything
    assert preloads == [PRELOAD]
    directives = [line.removeprefix("#SBATCH ").strip() for line in script.splitlines() if line.startswith("#SBATCH")]
    (gres,) = [d.removeprefix("--gres=") for d in directives if d.startswith("--gres=")]
    kind, count = gres.split(":")

    worker_line = script.strip().splitlines()[-1]
    command, args = python_module_command(shlex.split(worker_line))
    options = parsed_options(command, args)
    advertised = advertised_resources(options["resources"])
    assert kind == "gpu" and float(count) == advertised[GPU] == 1  # the one GPU it asks for is the one it advertises
    assert options["scheduler"] == scheduler_address
    assert_segments_run_on(advertised)


def test_kubernetes_spec_gives_the_gpu_to_worker_pods_only_and_starts_commands_distributed_ships():
    spec = clusters.kubernetes_cluster_spec(3, image="podracer:test")
    (worker,) = spec["spec"]["worker"]["spec"]["containers"]
    (scheduler,) = spec["spec"]["scheduler"]["spec"]["containers"]
    assert spec["spec"]["worker"]["replicas"] == 3 and worker["image"] == scheduler["image"] == "podracer:test"

    assert KUBERNETES_GPU not in json.dumps(spec["spec"]["scheduler"])
    gpus = worker["resources"]["limits"][KUBERNETES_GPU]  # a limit alone is also the request, for devices
    assert "command" not in worker and "command" not in scheduler  # args are the whole command line

    options = parsed_options(*dask_subcommand(worker["args"]))
    advertised = advertised_resources(options["resources"])
    assert int(gpus) == advertised[GPU] == 1 and options["nthreads"] == 1
    assert_segments_run_on(advertised)

    scheduler_options = parsed_options(*dask_subcommand(scheduler["args"]))
    assert scheduler_options["preload"] == (PRELOAD,) and scheduler_options["host"] == "0.0.0.0"  # in its pod


def test_dask_cuda_arguments_fit_local_cuda_cluster_and_advertise_the_gpu_segments_ask_for():
    dask_cuda = pytest.importorskip("dask_cuda")  # rapids-dask-dependency pins an older dask than this project's
    # Constructing a LocalCUDACluster needs a GPU (NVML), so the arguments are checked against the signatures
    # they go to: LocalCUDACluster's own parameters, then LocalCluster's (it passes on what it does not name),
    # then the worker's (LocalCluster passes on the rest; LocalCUDACluster's workers are always Nannies).
    kwargs = clusters.cuda_cluster_kwargs()
    layers = [dask_cuda.LocalCUDACluster, LocalCluster, Nanny]
    taker = {name: next((layer for layer in layers if name in inspect.signature(layer).parameters), None)
             for name in kwargs}
    assert None not in taker.values(), f"parameters of none of {layers}: {taker}"
    assert taker["resources"] is Nanny  # each worker advertises them
    assert "n_workers" not in kwargs and "CUDA_VISIBLE_DEVICES" not in kwargs  # one worker per visible GPU
    assert kwargs["host"] == "127.0.0.1" and kwargs["dashboard_address"].startswith("127.0.0.1:")
    assert PRELOAD in kwargs["scheduler_kwargs"]["preload"]
    assert_segments_run_on(kwargs["resources"])
