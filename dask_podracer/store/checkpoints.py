"""Checkpoints: one Zarr group per key, one Zarr array per named tensor, published last.

A checkpoint is written by the Dask worker that trained it, under a fresh key, while other
workers write theirs and the orchestrator rewrites the leaderboard. Nothing here rewrites a file
that another writer may touch: the parent groups exist since store creation, and zarr creates
each node's ancestors with "set if not exists" (see ``_zarrio``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import zarr.api.asynchronous as za
from zarr.abc.store import Store

from ._zarrio import read_json, sync
from .format import (
    FORMAT_VERSION,
    CheckpointNotFound,
    ChecksumError,
    StoreError,
    checksum,
    escape_name,
    normalise_array,
    to_json,
    unreadable_version,
)

CHECKPOINTS = "checkpoints"


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the named arrays and the JSON metadata it was saved with."""

    key: str
    """The key it is stored under (``checkpoints/<key>``)."""
    arrays: dict[str, np.ndarray]
    """Flat names (e.g. ``"actor.net.0.weight"``) to arrays, exactly as saved."""
    attrs: dict
    """JSON metadata: algorithm, env, hyper-parameters, lineage, structure, ..."""


def group_path(key: str) -> str:
    return f"{CHECKPOINTS}/{key}"


def _chunks(shape: tuple[int, ...]) -> tuple[int, ...]:
    # one chunk per array; Zarr wants positive chunk lengths even for empty dimensions
    return tuple(max(1, n) for n in shape)


def prepare(arrays: Mapping[str, Any], attrs: Mapping[str, Any], key: str) -> tuple[dict[str, np.ndarray], Any]:
    """Normalise arrays and attrs to exactly what a load returns, so the checksum matches."""
    if not isinstance(arrays, Mapping):
        raise TypeError(f"arrays of checkpoint {key!r} must be a mapping of names to arrays")
    ready = {name: normalise_array(name, value) for name, value in arrays.items()}
    for name in ready:
        escape_name(name)  # refuse empty or over-long names before anything is written
    json_attrs = to_json(dict(attrs), f"attrs of checkpoint {key!r}")
    return ready, json_attrs


def write_arrays(store: Store, key: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Create ``checkpoints/<key>`` afresh (discarding any unpublished leftover) and write every
    array into it, without publishing. Returns once every chunk file is written."""

    async def write_all() -> None:
        path = group_path(key)
        await za.open_group(store=store, path=path, mode="w", zarr_format=3, attributes={}, use_consolidated=False)

        async def write_one(name: str, arr: np.ndarray) -> None:
            node = await za.create_array(
                store=store,
                name=f"{path}/{escape_name(name)}",
                shape=arr.shape,
                dtype=arr.dtype,
                chunks=_chunks(arr.shape),
                compressors=None,  # tensors of weights barely compress; speed matters more
                zarr_format=3,
                config={"write_empty_chunks": True},  # every chunk on disk, even all-zero ones
            )
            if arr.size:
                await node.setitem(..., arr)

        # every write ends before this returns or raises: a plain gather raises at the first failure (a full disk)
        # while the others still write, and they would put files back after the failed save was cleared away
        outcomes = await asyncio.gather(*(write_one(n, a) for n, a in arrays.items()), return_exceptions=True)
        failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failed is not None:
            raise failed

    sync(write_all())


def publish(store: Store, key: str, names: list[str], attrs: Any, digest: str) -> None:
    """Make a written checkpoint visible: one atomic rewrite of its group's ``zarr.json``."""
    doc = {
        "complete": True,
        "checksum": digest,
        "saved_at": datetime.now(timezone.utc).isoformat(),
        "format_version": FORMAT_VERSION,
        "arrays": sorted(names),
        "attrs": attrs,
    }

    async def write() -> None:
        group = await za.open_group(store=store, path=group_path(key), mode="r+", zarr_format=3, use_consolidated=False)
        await group.update_attributes(doc)

    sync(write())


def discard_unpublished(store: Store, key: str) -> None:
    """Remove what a failed save of ``key`` wrote, unless it was published after all. Best effort: a store
    that cannot be written may not allow deleting either, and then the unpublished group stays, invisible
    to readers, until a save under that key replaces it."""
    try:
        if published_doc(store, key, "") is None:
            sync(store.delete_dir(group_path(key)))
    except (OSError, StoreError):
        pass


def published_doc(store: Store, key: str, where: str) -> dict[str, Any] | None:
    """The attributes of a published checkpoint, None if absent or unpublished."""
    meta = read_json(store, f"{group_path(key)}/zarr.json", where)
    return publication(meta, key, where)


def publication(meta: dict[str, Any] | None, key: str, where: str) -> dict[str, Any] | None:
    """From a checkpoint group's ``zarr.json`` document: its attributes if published, else None."""
    if meta is None or meta.get("node_type") != "group":
        return None
    attrs = meta.get("attributes") or {}
    if attrs.get("complete") is not True:
        return None
    version = attrs.get("format_version")
    what = unreadable_version(version)
    if what:
        what = "not one of" if what == "not" else what
        raise StoreError(
            f"checkpoint '{key}' in store '{where}' has format_version {version!r}, {what} the versions "
            f"this dask_podracer reads (up to {FORMAT_VERSION}); upgrade dask_podracer"
        )
    return attrs


def quarantine(store: Store, key: str, reason: str) -> None:
    """Mark a published checkpoint as never to be loaded again (its data stay, for inspection)."""

    async def write() -> None:
        group = await za.open_group(store=store, path=group_path(key), mode="r+", zarr_format=3, use_consolidated=False)
        await group.update_attributes({"quarantined": reason})

    sync(write())


def mark_deleted(store: Store, key: str) -> None:
    """Unpublish a checkpoint, saying why: the first step of a deletion. One atomic rewrite of its group's
    ``zarr.json`` (``complete`` false, ``deleted`` when), so a reader sees it whole or not at all, never a
    group whose arrays are going; readers of any format version see an unpublished group."""
    when = datetime.now(timezone.utc).isoformat()

    async def write() -> None:
        group = await za.open_group(store=store, path=group_path(key), mode="r+", zarr_format=3, use_consolidated=False)
        await group.update_attributes({"complete": False, "deleted": when})

    sync(write())


def remove(store: Store, key: str) -> None:
    """The second step of a deletion: remove the group and everything in it."""
    sync(store.delete_dir(group_path(key)))


def deleted_mark(store: Store, key: str, where: str) -> str | None:
    """When the checkpoint ``key`` was marked deleted, if its group is still there with that mark."""
    meta = read_json(store, f"{group_path(key)}/zarr.json", where)
    return ((meta or {}).get("attributes") or {}).get("deleted")


def stored_bytes(store: Store, key: str) -> int:
    """Bytes of every file under ``checkpoints/<key>``."""

    async def total() -> int:
        keys = [k async for k in store.list_prefix(f"{group_path(key)}/")]
        sizes = await asyncio.gather(*(store.getsize(k) for k in keys))
        return int(sum(sizes))

    return sync(total())


def read_checkpoint(store: Store, key: str, where: str) -> Checkpoint:
    """Load a published checkpoint and verify its checksum."""
    doc = published_doc(store, key, where)
    if doc is None:
        deleted = deleted_mark(store, key, where)
        if deleted:
            raise CheckpointNotFound(f"checkpoint '{key}' in store '{where}' was deleted by the retention policy "
                                     f"at {deleted}; its history record keeps its score, lineage and "
                                     "hyper-parameters")
        raise CheckpointNotFound(f"no complete checkpoint '{key}' in store '{where}'")
    if doc.get("quarantined"):
        raise CheckpointNotFound(f"checkpoint '{key}' in store '{where}' is quarantined: {doc['quarantined']}")
    names = list(doc["arrays"])

    async def read_all() -> list[np.ndarray]:
        async def read_one(name: str) -> np.ndarray:
            path = f"{group_path(key)}/{escape_name(name)}"
            try:
                node = await za.open_array(store=store, path=path, mode="r", zarr_format=3)
                return np.asarray(await node.getitem(...)) if node.size else np.empty(node.shape, node.dtype)
            except FileNotFoundError:  # zarr 3.1's ArrayNotFoundError subclasses it
                raise ChecksumError(f"checkpoint '{key}' in store '{where}' lacks array '{name}'", key) from None
            except ValueError as e:  # a truncated chunk or garbled array metadata fails to decode
                reason = " ".join(str(e).split())  # one line, whatever zarr or numpy said
                msg = f"checkpoint '{key}' in store '{where}': array '{name}' is unreadable ({reason})"
                raise ChecksumError(msg, key) from None

        return await asyncio.gather(*(read_one(n) for n in names))

    arrays = dict(zip(names, sync(read_all()), strict=True))
    attrs = doc["attrs"]
    if checksum(arrays, attrs) != doc["checksum"]:
        raise ChecksumError(f"checkpoint '{key}' in store '{where}' does not match its checksum {doc['checksum']}",
                            key)
    return Checkpoint(key=key, arrays=arrays, attrs=attrs)
