"""run_tournament from a Jupyter notebook: a real IPython kernel (jupyter_client, as a notebook server drives it),
a real embedded LocalCluster and a Zarr store in tmp_path; the notebook's stop button is `interrupt_kernel`
(SIGINT to the kernel's process group)."""

import queue
import textwrap
import time

import pytest

pytest.importorskip("nbclient")  # with it: jupyter_client; the kernel itself is ipykernel's
pytest.importorskip("ipykernel")
psutil = pytest.importorskip("psutil")

from jupyter_client import KernelManager  # noqa: E402

SETUP = textwrap.dedent("""
    import os, psutil
    from IPython.display import display
    from dask_podracer.config import config_from_dict
    from dask_podracer.population import run_tournament
    from dask_podracer.population.preflight import check_without_cluster
    from dask_podracer.store import PodracerStore

    config = config_from_dict({
        "run": {"env": "Pendulum-v1", "algorithm": "sac", "store": "runs/nb.zarr", "budget": "2m", "seed": 0,
                "max_segments": 3},
        "tournament": {"pool_size": 1}, "segment": {"env_steps": 200, "eval_episodes": 2},
        "cluster": {"workers": 1, "dashboard_address": "127.0.0.1:0"},
        "hparams": {"num_envs": 2, "learning_starts": 100, "batch_size": 32, "hidden": [16, 16]}})
    check_without_cluster(config, embedded=True)  # torch and the agents imported before any interrupt

    def listening():
        return sorted(c.laddr.port for c in psutil.Process().net_connections() if c.status == "LISTEN")

    def workers():
        return [p.pid for p in psutil.Process().children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]

    ports_before = listening()
""")


class Kernel:
    """An IPython kernel whose cells run one at a time, their outputs collected."""

    def __init__(self, cwd):
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(cwd))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)
        self.pid = self.manager.provisioner.process.pid

    def run(self, code, timeout=240, interrupt_when=None, again_every=None):
        """The cell's outputs as (kind, text) pairs, "error" for its exception; `interrupt_when(outputs so far)`
        is asked while the cell runs, and the kernel interrupted once it says so (and every `again_every` seconds
        after that until the cell ends, as an impatient user presses stop)."""
        msg_id = self.client.execute(code)
        outputs, interrupted, deadline = [], None, time.monotonic() + timeout
        self.interrupts, last = 0, 0.0
        while True:
            if interrupt_when is not None and (interrupted is None and interrupt_when(outputs) or interrupted
                                               and again_every and time.monotonic() - last > again_every):
                self.manager.interrupt_kernel()
                interrupted, last = interrupted or time.monotonic(), time.monotonic()
                self.interrupts += 1
            try:
                msg = self.client.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                assert time.monotonic() < deadline, f"cell still running after {timeout}s: {outputs}"
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                outputs.append((content["name"], content["text"]))
            elif kind in ("display_data", "update_display_data", "execute_result"):
                outputs.append((kind, content["data"].get("text/plain", "")))
            elif kind == "error":
                outputs.append(("error", content["ename"]))
                self.error = content["evalue"]
            elif kind == "status" and content["execution_state"] == "idle":
                self.seconds_after_interrupt = None if interrupted is None else time.monotonic() - interrupted
                return outputs

    def value(self, expression):
        """The value of `expression` in the kernel, as its repr evaluates."""
        outputs = self.run(f"print(repr(({expression})))")
        assert outputs and outputs[0][0] == "stdout", outputs
        return eval("".join(text for _, text in outputs))

    def close(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path):
    kernel = Kernel(tmp_path)
    try:
        assert kernel.run(SETUP) == []
        yield kernel
    finally:
        kernel.close()


def _spawned_workers(pid):
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]
    except psutil.Error:
        return []


@pytest.mark.slow
def test_the_stop_button_while_the_embedded_cluster_starts_leaves_no_scheduler_in_the_kernel(kernel, tmp_path):
    """Interrupted while its worker processes started, LocalCluster's start was cancelled half way and never closed:
    the kernel kept its scheduler and dashboard listening (the next run's "Port 8787 is already in use"), and the
    workers, interrupted too (the stop button signals the kernel's process group), printed tracebacks into the cell."""
    outputs = kernel.run("summary = run_tournament(config)",
                         interrupt_when=lambda _: bool(_spawned_workers(kernel.pid)))
    assert outputs[-1] == ("error", "KeyboardInterrupt"), outputs
    assert kernel.seconds_after_interrupt < 60
    assert kernel.value("set(listening()) - set(ports_before), workers(), os.path.exists(config.store_url)") == \
        (set(), [], False)
    assert not [text for kind, text in outputs if kind == "stderr" and "Traceback" in text], outputs


@pytest.mark.slow
def test_a_run_stopped_in_one_cell_resumes_in_the_next(kernel, tmp_path):
    """The notebook's stop button mid-run: the cell ends with KeyboardInterrupt, the store's run state says
    interrupted, no worker process is left, and the next cell continues the run (same kernel, a second embedded
    cluster) to its end, with on_progress updating one display in place."""
    first = kernel.run("handle = display('starting', display_id=True)\n"
                       "run_tournament(config, on_progress=lambda p: handle.update(f'{p.segments_completed} done'))",
                       interrupt_when=lambda outputs: any(kind == "update_display_data" for kind, _ in outputs))
    assert first[0] == ("display_data", "'starting'") and first[-1] == ("error", "KeyboardInterrupt"), first
    assert kernel.value("PodracerStore(config.store_url).read_run_state()['stop_reason'], workers()") == \
        ("interrupted", [])
    second = kernel.run("summary = run_tournament(config)\nprint(summary.stop_reason)")
    assert second[-1] == ("stdout", "max_segments\n"), second
    assert (tmp_path / "runs" / "nb.zarr").is_dir()  # relative to the notebook's working directory
    assert kernel.value("PodracerStore(config.store_url).read_run_state()['invocations'], workers()") == (2, [])


@pytest.mark.slow
def test_the_stop_button_pressed_again_and_again_leaves_no_scheduler_in_the_kernel(kernel):
    """Pressed again while the run closes its cluster, the stop button cancelled the close half way: the kernel kept
    the scheduler and its dashboard listening, for as long as it lived. The run still stops as interrupted."""
    outputs = kernel.run("run_tournament(config, on_progress=print)",
                         interrupt_when=lambda outputs: any(kind == "stdout" for kind, _ in outputs), again_every=0.25)
    assert "KeyboardInterrupt" in outputs[-1][1], outputs  # IPython's own display of it may be interrupted too
    assert kernel.interrupts > 1
    assert kernel.value("set(listening()) - set(ports_before), workers()") == (set(), [])
    assert kernel.value("PodracerStore(config.store_url).read_run_state()['stop_reason']") == "interrupted"
