"""Leaderboard, history and run state: small JSON documents with one writer, the orchestrator.

Each lives in Zarr group attributes, so each write is one atomic file replacement (see
``_zarrio``) and a reader never sees half a table. History grows with every segment, so it is
cut into blocks of ``HISTORY_BLOCK`` records, one child group each: an append rewrites at most
one small block, never the whole history.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import zarr
from zarr.abc.store import Store

from ._zarrio import list_children, read_json, read_jsons
from .format import StoreError, to_json

LEADERBOARD = "leaderboard"
HISTORY = "history"
RUN = "run"
HISTORY_BLOCK = 100
"""Records per history block: an append rewrites at most this many records."""


def read_attr(store: Store, path: str, name: str, default: Any, where: str) -> Any:
    """Attribute ``name`` of the group at ``path``, or ``default`` if the group or attribute is absent."""
    meta = read_json(store, f"{path}/zarr.json", where)
    if meta is None:
        return default
    return (meta.get("attributes") or {}).get(name, default)


def write_attrs(store: Store, path: str, attrs: dict[str, Any]) -> None:
    """Replace all attributes of the group at ``path`` (creating it if absent) in one file write."""
    group = zarr.open_group(store=store, path=path, mode="a", zarr_format=3, use_consolidated=False)
    group.attrs.put(attrs)  # clears, then writes zarr.json once: removed keys disappear too


def read_leaderboard(store: Store, where: str) -> list[dict]:
    return list(read_attr(store, LEADERBOARD, "entries", [], where))


def write_leaderboard(store: Store, entries: Sequence[Mapping], where: str) -> None:
    # a list or tuple, not any iterable: checking a generator's items would use them up, and the board written
    # after the check would be empty (the whole table is replaced)
    if not isinstance(entries, list | tuple) or not all(isinstance(e, Mapping) for e in entries):
        raise TypeError(f"leaderboard of store '{where}' must be a list of mappings, got {type(entries).__name__}")
    for i, entry in enumerate(entries):  # every reader ranks and shows entries by these two
        score = entry.get("score")
        if not isinstance(entry.get("key"), str) or isinstance(score, bool) or not isinstance(score, numbers.Real):
            raise TypeError(f"leaderboard entry {i} of store '{where}' needs a key (a string) and a score (a "
                            f"number), got key {entry.get('key')!r} and score {score!r}")
    write_attrs(store, LEADERBOARD, {"entries": to_json([dict(e) for e in entries], "leaderboard entries")})


def read_run_state(store: Store, where: str) -> dict:
    text = read_attr(store, RUN, "state_json", None, where)
    if text is not None:
        return dict(json.loads(text))
    return dict(read_attr(store, RUN, "state", {}, where))  # written before the state became a string


def write_run_state(store: Store, state: Mapping, where: str) -> None:
    if not isinstance(state, Mapping):
        raise TypeError(f"run state of store '{where}' must be a mapping, got {type(state).__name__}")
    # One JSON string, not a nested attribute: the state of a thousand agents is written every
    # second, and zarr encodes one string far faster than a deep tree of small values.
    text = json.dumps(to_json(dict(state), "run state"), allow_nan=True, separators=(",", ":"))
    write_attrs(store, RUN, {"state_json": text})


def _blocks(store: Store) -> list[int]:
    # the listing also holds zarr.json and transient *.partial files: keep block directories only
    return sorted(int(name) for name in list_children(store, HISTORY) if name.isdigit())


def _block_path(index: int) -> str:
    return f"{HISTORY}/{index:08d}"


def append_history(store: Store, records: Sequence[Mapping], where: str) -> None:
    """Append `records` in order, filling the last block first; each touched block is written once."""
    if not isinstance(records, list | tuple) or not all(isinstance(r, Mapping) for r in records):
        raise TypeError(f"history records of store '{where}' must be a list of mappings, got "
                        f"{type(records).__name__}")
    if not records:
        return
    new = to_json([dict(r) for r in records], "history records")  # one round trip for the batch, not per record
    blocks = _blocks(store)
    index, current = 0, []
    if blocks:
        index = blocks[-1]
        meta = read_json(store, f"{_block_path(index)}/zarr.json", where)
        current = _block_records(meta)
        if len(current) >= HISTORY_BLOCK:
            index, current = index + 1, []
    while new:
        room = HISTORY_BLOCK - len(current)
        current, new = [*current, *new[:room]], new[room:]
        # one JSON string, not an attribute tree: zarr encodes it about 4x faster, and a busy
        # tournament writes a block every second
        write_attrs(store, _block_path(index), {"records_json": json.dumps(current, separators=(",", ":"))})
        index, current = index + 1, []


def _block_records(meta: Mapping[str, Any] | None) -> list[dict]:
    """The records of a history block's `zarr.json`: a JSON string, or (written before it was one) a list."""
    attrs = (meta or {}).get("attributes") or {}
    if "records_json" in attrs:
        return list(json.loads(attrs["records_json"]))
    return list(attrs.get("records", []))


def read_history(store: Store, where: str) -> list[dict]:
    blocks = _blocks(store)
    docs = read_jsons(store, [f"{_block_path(i)}/zarr.json" for i in blocks], where)
    records: list[dict] = []
    for index, doc in zip(blocks, docs, strict=True):
        if isinstance(doc, StoreError):
            raise doc
        if doc is not None:  # a block directory whose metadata is not written yet holds nothing
            records.extend(_block_records(doc))
    return records
