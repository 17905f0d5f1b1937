"""A segment's Dask task key: `segment-<checkpoint key>`, written and read in one place.

Imports nothing, so the scheduler's dashboard plugin can use it without loading torch.
"""

from __future__ import annotations

PREFIX = "segment-"


def task_key(segment_key: str) -> str:
    """The Dask key of the task that trains the segment saving checkpoint `segment_key`."""
    return f"{PREFIX}{segment_key}"


def segment_key(key: object) -> str | None:
    """The checkpoint key a Dask task key belongs to, or None for a task that is not a segment."""
    return key.removeprefix(PREFIX) if isinstance(key, str) and key.startswith(PREFIX) else None
