"""Torch devices as the config and the command line name them: "auto", "cpu", "cuda", "cuda:N", "mps"."""

from __future__ import annotations

import os

import psutil
import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """"auto" is this process's GPU if it has one, else the CPU; any other name is torch's."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def usable_device(device: str | torch.device) -> torch.device:
    """`resolve_device(device)`, once a tensor has been placed on it; a one-line ValueError where this process
    cannot use it (a name torch does not know, a device this machine lacks, a CPU build of torch)."""
    try:
        resolved = resolve_device(device)
        torch.empty(1, device=resolved)
    # AssertionError: torch built without CUDA; NotImplementedError: a backend this build lacks (mps on Linux);
    # TypeError: not a device name at all
    except (RuntimeError, AssertionError, NotImplementedError, TypeError) as e:
        line = str(e).splitlines()[0] if str(e) else type(e).__name__
        # torch's missing-backend errors run on with a list of every backend: its first sentence says it
        raise ValueError(line.split(". ")[0] if len(line) > 200 else line) from None
    return resolved


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory of `device` (this machine's RAM for the CPU); None where it cannot be told."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    if device.type != "cpu":
        return None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that tells
        return None


def available_memory(device: torch.device) -> int | None:
    """Bytes `device` can give a new buffer now: the RAM the kernel counts available (free and reclaimable) for the
    CPU, the free memory plus what torch's caching allocator holds unused for a GPU; None where it cannot be told."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type != "cpu":
        return None
    try:
        return int(psutil.virtual_memory().available)
    except (OSError, AttributeError):  # a system psutil cannot read
        return device_memory(device)


def check_buffer_fits(nbytes: int, device: torch.device, what: str) -> None:
    """A MemoryError naming `what` (the hyper-parameters or env arguments that size it) when a buffer of `nbytes` is
    more than `device` has, or more than it has available now. torch zero-fills a buffer as it allocates it: one
    larger than the RAM but within what the allocator grants got the process OOM-killed, the client's too (`podracer
    train` died with no message), and so did one within the RAM but beyond what the machine's other processes left
    (`buffer_size` of 20 GiB on a 24 GiB machine with 10 GiB in use). Agents' buffers, envs' per-env state (MuJoCo's
    MjData) and a generated market are checked with it."""
    memory = device_memory(device)
    if memory is not None and nbytes > memory:
        raise MemoryError(f"{what} needs at least {nbytes / 2**30:,.1f} GiB, more than the "
                          f"{memory / 2**30:,.1f} GiB of {device}")
    available = available_memory(device)
    if available is not None and nbytes > available:
        raise MemoryError(f"{what} needs at least {nbytes / 2**30:,.1f} GiB, more than the "
                          f"{available / 2**30:,.1f} GiB of {device} available now"
                          f"{f' (of {memory / 2**30:,.1f} GiB in all)' if memory else ''}")
