"""Pins: checkpoints the retention policy never deletes (an exported champion, one a user chose).

One small group per pinned key, ``pins/<key>``, so pinning writes a file of its own: it never
rewrites a file the orchestrator may be rewriting at the same moment (a checkpoint's metadata, a
table), and a workflow may pin while a run is going.
"""

from __future__ import annotations

from datetime import datetime, timezone

from zarr.abc.store import Store

from ._zarrio import list_children, sync
from .format import validate_key
from .tables import write_attrs

PINS = "pins"


def pin(store: Store, key: str, reason: str) -> None:
    write_attrs(store, f"{PINS}/{key}", {"reason": reason, "pinned_at": datetime.now(timezone.utc).isoformat()})


def unpin(store: Store, key: str) -> None:
    sync(store.delete_dir(f"{PINS}/{key}"))


def pinned(store: Store) -> set[str]:
    keys = set()
    for name in list_children(store, PINS):
        try:
            keys.add(validate_key(name))
        except ValueError:  # zarr.json, transient *.partial files
            continue
    return keys
