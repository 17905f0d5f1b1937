"""Where the task running now runs: its worker's host, the slot kind it was given, the GPU it may use.

Called from inside tasks (a segment, an actor, a learner); the tasks a segment starts listen on its host and
ask for its slot kind.
"""

from __future__ import annotations

from distributed import get_worker
from distributed.comm import get_address_host


def current_slot() -> tuple[str, dict[str, float] | None]:
    """The host of the worker running this task, and the slot kind the orchestrator gave the task (CPU or GPU,
    or None): what the tasks it starts listen on and ask for."""
    worker = get_worker()
    running = worker.state.tasks.get(worker.get_current_task())
    resources = dict(running.resource_restrictions) if running and running.resource_restrictions else None
    return get_address_host(worker.address), resources


def worker_device() -> str:
    """This worker's GPU: the only one it sees (dask-cuda), or one chosen by its LocalCluster index."""
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        return "cpu"
    try:
        index = int(get_worker().name) % count
    except (ValueError, TypeError):
        index = 0
    return f"cuda:{index}"
