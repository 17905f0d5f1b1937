"""The thin layer between the store and zarr: open a Zarr store from a URL, read and list raw keys.

Why raw reads: listing checkpoints and reading their attributes only needs each group's
``zarr.json``; reading those bytes directly (concurrently) is cheaper than opening every group,
and skips half-made directories without Zarr's warnings.

Write atomicity (zarr 3.1.6, ``zarr/storage/_local.py``), which the "complete" flag relies on.
It came with zarr-python PR #3412 (merged 2025-08-28); older zarr 3 releases write files in
place, where a reader could see a half-written ``zarr.json`` (we would raise StoreError
"unreadable metadata" rather than misread it), so pin a zarr release that has it.

* ``LocalStore.set`` -> ``_put``: ``mkdir -p`` the parent, write the whole value to a sibling
  temporary file ``<stem>.<uuid4 hex>.partial`` in the same directory, then ``Path.replace``
  (``rename(2)``), which is atomic on POSIX within one file system. A concurrent reader
  (``_get`` = ``Path.read_bytes``) sees the old file or the new one, never a mix.
* ``set_if_not_exists`` (used by ``ensure_parents`` when zarr creates a node: it "creates" every
  ancestor group's ``zarr.json``) writes the temporary file, then ``os.link`` + ``unlink``: the
  link fails with FileExistsError if the target exists, so existing parent metadata (root,
  ``checkpoints/``) is never rewritten by a worker. File systems without hard links would
  raise OSError there.
* No ``fsync`` of file or directory: atomic against concurrent readers and crashed processes,
  not durable across power loss (a renamed file can come back empty on some file systems).
  The checksum and JSON parsing catch that case. A killed writer can leave ``*.partial`` files.
* Object stores via fsspec (S3, GCS) write each object with one PUT, also all-or-nothing.
  NFS renames are atomic on the server, but client attribute caching can delay visibility.

So ``save_checkpoint`` writes and awaits every array (metadata and chunk files) first, and only
then rewrites the checkpoint group's own ``zarr.json`` with ``complete: true``: one atomic file.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore

from .format import StoreError

__all__ = ["sync", "resolve_url", "local_path", "open_zarr_store", "read_json", "read_jsons", "list_children"]


def resolve_url(url: str | Path) -> str:
    """Local paths (and ``file://`` URLs) become absolute paths; other URLs are kept as given.

    A ``file://`` URL is decoded as one: ``Path.as_uri()`` writes ``file:///runs/my%20run.zarr`` for a directory
    with a space, which names ``/runs/my run.zarr``, not a new store under a literal ``%20``."""
    text = str(url)
    if "://" in text and not text.startswith("file://"):
        return text
    if text.startswith("file://"):
        text = text.removeprefix("file://")
        # file://localhost/x is /x; file://~/x and file://runs/x.zarr stay the paths they always were
        text = urllib.parse.unquote(text.removeprefix("localhost") if text.startswith("localhost/") else text)
    return str(Path(text).expanduser().resolve())


def local_path(url: str) -> Path | None:
    """The directory of a resolved local URL, or None for a remote one."""
    return None if "://" in url else Path(url)


def open_zarr_store(url: str, *, read_only: bool = False) -> Store:
    """A zarr Store for a resolved URL. Never creates anything by itself being constructed."""
    path = local_path(url)
    if path is not None:
        return LocalStore(path, read_only=read_only)
    try:
        return FsspecStore.from_url(url, read_only=read_only)
    except ImportError as e:  # fsspec knows the protocol, and names the package it needs ("Install s3fs ...")
        raise StoreError(f"cannot open store '{url}': {e}") from None
    except ValueError as e:  # fsspec does not know the protocol
        raise StoreError(f"cannot open store '{url}': {e} (a local path, or a URL fsspec knows: "
                         f"memory://, s3://, gs://, ...)") from None


async def _read_json(store: Store, key: str, where: str) -> dict[str, Any] | None:
    buf = await store.get(key, prototype=default_buffer_prototype())
    if buf is None:
        return None
    try:
        doc = json.loads(buf.to_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"unreadable metadata '{key}' in store '{where}': {e}") from None
    if not isinstance(doc, dict):
        raise StoreError(f"unreadable metadata '{key}' in store '{where}': not a JSON object")
    return doc


def read_json(store: Store, key: str, where: str) -> dict[str, Any] | None:
    """The JSON object stored at ``key``; None if absent; StoreError naming ``key`` if not JSON."""
    return sync(_read_json(store, key, where))


def read_jsons(store: Store, keys: Sequence[str], where: str) -> list[dict[str, Any] | StoreError | None]:
    """:func:`read_json` for many keys at once, concurrently; errors are returned, not raised."""

    async def gather() -> list[Any]:
        return await asyncio.gather(*(_read_json(store, k, where) for k in keys), return_exceptions=True)

    results = sync(gather())
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, StoreError):
            raise r
    return results


def list_children(store: Store, prefix: str) -> list[str]:
    """Names directly under ``prefix`` (files and directories alike), or [] if there is none."""

    async def collect() -> list[str]:
        return [name async for name in store.list_dir(prefix)]

    return sync(collect())
