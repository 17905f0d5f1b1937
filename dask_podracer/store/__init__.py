"""The tournament's persistent state in one Zarr (v3) store; the only package that imports zarr.

Everything is plain arrays and JSON: no pickle anywhere, and loading never runs code.
A local directory is the usual store; any URL zarr/fsspec accepts (``memory://``, ``s3://``) works too.

The Zarr tree (format_version 2; version 1 stores and checkpoints are read too)::

    <root>/                      group  {"format": "dask_podracer", "format_version": 2}
      checkpoints/               group  created with the store, never rewritten afterwards
        <key>/                   group  {} while being written; once published:
                                        {"complete": true, "checksum": "<sha256 hex>",
                                         "saved_at": "<ISO 8601 UTC>", "format_version": 2,
                                         "arrays": [<array names, sorted>], "attrs": {<user metadata>}}
          <escaped array name>/  array  one chunk, no compression, native byte order
      leaderboard/               group  {"entries": [{...}, ...]}   ranked, replaced as a whole
      history/                   group
        <block, 8 digits>/       group  {"records_json": "[{...}, ...]"}   up to 100 records each, in order
      run/                       group  {"state_json": "{...}"}     the orchestrator's run state
      pins/                      group  <key>/ {"reason": ..., "pinned_at": ...}: kept by retention

docs/store-format.md has the whole format, what older versions wrote, and how their stores are upgraded.

Keys match ``[A-Za-z0-9_.-]+``. Array names are arbitrary strings; as node names, characters
outside ``[A-Za-z0-9_.]`` are written ``-XX`` per UTF-8 byte (``"a/b-c"`` -> ``"a-2Fb-2Dc"``),
and the ``arrays`` attribute keeps the original names.

A checkpoint is visible only once its group's attributes say ``complete: true``; that attribute
write is the last step of a save and replaces one file atomically (see ``_zarrio`` for what
zarr's LocalStore guarantees). Its checksum is a sha256 over every array (name, dtype, shape,
bytes) and the canonical JSON of its attrs (see ``format.checksum``); loading verifies it.

Changelog: 2 - history as `records_json`, shared replay (`replay_base`); the first write of this version to an
older store raises its root's version (PodracerStore._upgrade_root). 1 - first version.
"""

from .checkpoints import Checkpoint
from .format import FORMAT_VERSION, CheckpointNotFound, ChecksumError, StoreError
from ._zarrio import resolve_url
from .podracer_store import PodracerStore

__all__ = [
    "FORMAT_VERSION",
    "Checkpoint",
    "CheckpointNotFound",
    "ChecksumError",
    "PodracerStore",
    "StoreError",
    "resolve_url",
]
