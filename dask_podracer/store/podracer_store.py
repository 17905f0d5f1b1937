"""``PodracerStore``: the one object the rest of dask_podracer uses to reach the Zarr store."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.errors import ContainsGroupError

from . import checkpoints as ck
from . import pins, tables
from .run_lock import LOCK_NAME, hold_run
from ._zarrio import list_children, local_path, open_zarr_store, read_json, read_jsons, resolve_url, sync
from .format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    CheckpointNotFound,
    StoreError,
    checksum,
    escape_name,
    unreadable_version,
    validate_key,
)

log = logging.getLogger(__name__)

CHILD_GROUPS = (ck.CHECKPOINTS, tables.LEADERBOARD, tables.HISTORY, tables.RUN, pins.PINS)


def _check_root(meta: dict[str, Any], url: str) -> None:
    """Refuse a root ``zarr.json`` that is not a podracer store this code can read."""
    attrs = meta.get("attributes") or {}
    if meta.get("node_type") != "group" or attrs.get("format") != FORMAT_NAME:
        raise StoreError(
            f"'{url}' is a Zarr {meta.get('node_type', 'node')} but not a podracer store "
            f"(attribute 'format' is {attrs.get('format')!r}, expected {FORMAT_NAME!r})"
        )
    version = attrs.get("format_version")
    what = unreadable_version(version)
    if what:
        raise StoreError(
            f"podracer store at '{url}' has format_version {version!r}, {what} "
            f"format_version {FORMAT_VERSION} that this dask_podracer reads; upgrade dask_podracer"
        )


STORES_NAMED = 5
"""The most stores a refusal of the directory that holds them names."""


def _what_it_may_be(path: Path) -> str:
    """A hint for a path given where a store goes: a config file (`podracer status pendulum.toml`) names its store in
    run.store; a directory of stores (`podracer status runs`) holds the store meant, which the hint names."""
    if path.is_file():
        return ("; a config names its run's store in run.store (runs/<run.name>.zarr by default)"
                if path.suffix == ".toml" else "")
    try:
        inside = sorted(child for child in path.iterdir() if child.is_dir() and PodracerStore.exists(child))
    except OSError:
        return ""
    if not inside:
        return ""
    more = f" and {len(inside) - STORES_NAMED} more" if len(inside) > STORES_NAMED else ""
    return f"; it holds the stores {', '.join(str(p) for p in inside[:STORES_NAMED])}{more}"


class PodracerStore:
    """Checkpoints, leaderboard, history and run state of one tournament, in one Zarr store.

    Cheap to construct: holds a URL and a zarr Store, no open files. Pickles as its URL, so it can
    be sent to a Dask worker, and ``PodracerStore(store.url)`` in another process opens the same store.
    """

    def __init__(self, url: str | os.PathLike[str], *, create: bool = False) -> None:
        if not isinstance(url, (str, os.PathLike)):  # str(None) would name a store './None'
            raise TypeError(f"a store is named by a path or a URL, got {type(url).__name__}")
        if not isinstance(create, bool):
            raise TypeError(f"create must be True or False, got {create!r}")
        self._url = resolve_url(url)
        path = local_path(self._url)
        if path is not None and path.exists() and not path.is_dir():
            raise StoreError(f"'{self._url}' is a file, not a podracer store{_what_it_may_be(path)}")
        if path is not None and not path.exists():
            if not create:
                raise StoreError(f"no podracer store at '{self._url}'")  # checked first: opening would mkdir it
            self.check_creatable(self._url)  # under a file, in /proc: named, not an OSError from deep in zarr
        self._store = open_zarr_store(self._url)
        root = read_json(self._store, "zarr.json", self._url)
        if root is None:
            if list_children(self._store, ""):
                raise StoreError(f"'{self._url}' is not empty and holds no Zarr group: not a podracer store"
                                 f"{_what_it_may_be(path)}")
            if not create:
                raise StoreError(f"no podracer store at '{self._url}'")
            try:
                self._create()
            except OSError as e:  # not a lost scheduler, whatever the caller was doing
                raise StoreError(f"cannot create store '{self._url}': {e.strerror or e}") from None
            self._version = FORMAT_VERSION
        else:
            _check_root(root, self._url)
            self._version: int = root["attributes"]["format_version"]
            """The root's format_version as opened: an older one is raised by the first write (`_upgrade_root`)."""
            if create:  # complete a creation that was interrupted after the root was written
                self._create_children()

    def _create(self) -> None:
        # the root (our ownership mark) first, then the children: a crash between them leaves a
        # store that ``create=True`` completes, never an unmarked directory we would later refuse
        attrs = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION}
        try:
            zarr.create_group(store=self._store, zarr_format=3, attributes=attrs)
        except ContainsGroupError:  # another process created it at the same moment
            _check_root(read_json(self._store, "zarr.json", self._url) or {}, self._url)
        self._create_children()

    def _upgrade_root(self) -> None:
        """Raise an older store's root format_version to this code's before the first thing this code writes to it.

        What this code writes is of its own version (history blocks as `records_json`, version 2 checkpoints), and
        a reader of the older version would misread it (a version 1 reader sees an empty history, and its next
        append replaces the block it cannot read): with the root raised, that reader refuses the store in one
        line instead. Opening and reading never upgrade: only the writers call this."""
        if self._version >= FORMAT_VERSION:
            return
        root = read_json(self._store, "zarr.json", self._url) or {}
        _check_root(root, self._url)  # another process may have changed it since this one opened the store
        attrs = dict(root.get("attributes") or {})
        if attrs.get("format_version", 0) < FORMAT_VERSION:
            attrs["format_version"] = FORMAT_VERSION
            tables.write_attrs(self._store, "", attrs)  # one atomic rewrite of the root's zarr.json
        self._version = FORMAT_VERSION

    def _create_children(self) -> None:
        # created once here, so workers adding checkpoints/<key> never need to write shared metadata
        for name in CHILD_GROUPS:
            zarr.open_group(store=self._store, path=name, mode="a", zarr_format=3, use_consolidated=False)

    @property
    def url(self) -> str:
        """Where the store is: an absolute path for local stores, else the URL as given."""
        return self._url

    @staticmethod
    def exists(url: str | os.PathLike[str]) -> bool:
        """Whether a podracer store (of any format version) is at ``url``. Creates nothing."""
        resolved = resolve_url(url)
        path = local_path(resolved)
        if path is not None and not path.is_dir():
            return False
        try:
            root = read_json(open_zarr_store(resolved, read_only=True), "zarr.json", resolved)
        except (StoreError, FileNotFoundError):
            return False
        return root is not None and (root.get("attributes") or {}).get("format") == FORMAT_NAME

    @staticmethod
    def check_creatable(url: str | os.PathLike[str]) -> None:
        """Raise StoreError, naming why, if no store can be created at ``url``. Leaves nothing behind.

        Called before a cluster starts, so a path under a file, in a directory this user cannot write, or a URL
        fsspec cannot open is refused at once rather than after workers have started.
        """
        resolved = resolve_url(url)
        path = local_path(resolved)
        if path is None:
            open_zarr_store(resolved, read_only=True)  # an unknown protocol, a missing fsspec package
            return
        if path.is_dir():  # no zarr.json in it: creating the store there works only if it is empty
            if any(path.iterdir()):
                raise StoreError(f"'{resolved}' is not empty and holds no Zarr group: not a podracer store"
                                 f"{_what_it_may_be(path)}")
            return
        if path.exists():
            raise StoreError(f"'{resolved}' is a file, not a podracer store{_what_it_may_be(path)}")
        parent = next(p for p in path.parents if p.exists())
        if not parent.is_dir():
            raise StoreError(f"cannot create store '{resolved}': '{parent}' is a file, not a directory")
        try:  # os.access says yes to root on /proc; only making a directory there tells
            os.rmdir(tempfile.mkdtemp(prefix=".podracer-probe-", dir=parent))
        except OSError as e:
            raise StoreError(f"cannot create store '{resolved}': cannot make a directory in '{parent}' "
                             f"({e.strerror or type(e).__name__})") from None

    def hold_run(self, holder: str = "a run") -> contextlib.AbstractContextManager[None]:
        """Within it, `holder` (a run, `podracer gc`) of this process holds the store: another (of another process,
        or thread) that asks is refused with a StoreError naming it. Local stores only (`run_lock.py`); a remote one
        is held by the run state's lease."""
        return hold_run(local_path(self._url), self._url, holder)

    def remove_if_bare(self) -> bool:
        """Remove this store if it holds nothing but what creating it wrote; say whether it did.

        For a run refused after it created its store (a worker that cannot run its segments): the next run
        would resume the bare store as a fresh one anyway, and a directory left behind suggests a run that
        recorded something. Anything recorded (a table, a pin, a checkpoint, another process's probe) keeps it.
        """
        bare = {"zarr.json", *(f"{name}/zarr.json" for name in CHILD_GROUPS)}

        async def keys() -> set[str]:
            return {key async for key in self._store.list() if key != LOCK_NAME}  # the refused run's own lock

        if sync(keys()) != bare:
            return False
        if self.read_leaderboard() or self.read_history() or self.read_run_state() or self.pinned():
            return False  # the tables live in their groups' attributes: the keys alone do not tell
        sync(self._store.delete_dir(""))
        path = local_path(self._url)
        if path is not None and path.is_dir() and not any(path.iterdir()):
            path.rmdir()  # the directory itself, which zarr's LocalStore keeps
        return True

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (PodracerStore, (self._url,))

    def __repr__(self) -> str:
        return f"PodracerStore({self._url!r})"

    # -- checkpoints ---------------------------------------------------------------------------

    def save_checkpoint(self, key: str, arrays: Mapping[str, np.ndarray], attrs: Mapping) -> str:
        """Write a checkpoint under a fresh ``key`` and publish it; return its sha256 checksum (hex).

        Arrays first, then one atomic metadata write that sets ``complete``: readers see all or
        nothing. A leftover unpublished group under ``key`` (a crashed writer) is replaced; a
        published one is never overwritten (StoreError): checkpoints are immutable.
        """
        validate_key(key)
        ready, json_attrs = ck.prepare(arrays, attrs, key)
        if self.has_checkpoint(key):
            raise StoreError(
                f"checkpoint '{key}' already exists in store '{self._url}'; checkpoints are immutable, use a fresh key"
            )
        digest = checksum(ready, json_attrs)
        self._upgrade_root()
        try:
            ck.write_arrays(self._store, key, ready)
            ck.publish(self._store, key, list(ready), json_attrs, digest)
        except OSError as e:  # a full disk, a lost mount: nothing was published, so nothing torn is visible
            ck.discard_unpublished(self._store, key)  # gives back what was written, where it still can
            raise StoreError(f"cannot save checkpoint '{key}' to store '{self._url}': "
                             f"{e.strerror or type(e).__name__}; it was not published") from e
        return digest

    def _write_arrays(self, key: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Write a checkpoint's arrays without publishing it: what a crash mid-save leaves. For tests."""
        ready, _ = ck.prepare(arrays, {}, validate_key(key))
        ck.write_arrays(self._store, key, ready)

    def load_checkpoint(self, key: str) -> ck.Checkpoint:
        """Load a published checkpoint; ChecksumError if its data changed since it was saved."""
        return ck.read_checkpoint(self._store, validate_key(key), self._url)

    def has_checkpoint(self, key: str) -> bool:
        """Whether ``key`` names a published checkpoint."""
        return ck.published_doc(self._store, validate_key(key), self._url) is not None

    def checkpoint_keys(self) -> list[str]:
        """Keys of all published checkpoints this code can read, sorted. Unpublished, unreadable and
        newer-format ones are skipped (with a warning for the last two)."""
        return self._scan_checkpoints()[0]

    def deleted_checkpoints(self) -> list[str]:
        """Keys of checkpoints marked deleted whose groups are still there (a deletion cut off between its two
        steps): garbage, removed by `remove_deleted` (`podracer gc`, or the next run's retention)."""
        return self._scan_checkpoints()[1]

    def _scan_checkpoints(self) -> tuple[list[str], list[str]]:
        keys = []
        for name in list_children(self._store, ck.CHECKPOINTS):
            try:
                keys.append(validate_key(name))
            except ValueError:  # zarr.json, transient *.partial files of concurrent writers
                continue
        docs = read_jsons(self._store, [f"{ck.group_path(k)}/zarr.json" for k in keys], self._url)
        found, deleted = [], []
        for key, doc in zip(keys, docs, strict=True):
            try:
                if isinstance(doc, StoreError):
                    raise doc
                if ck.publication(doc, key, self._url) is not None:
                    found.append(key)
                elif ((doc or {}).get("attributes") or {}).get("deleted"):
                    deleted.append(key)
            except StoreError as e:  # unreadable, or of a newer format: never offered as a parent
                log.warning("skipping checkpoint %r: %s", key, e)
        return sorted(found), sorted(deleted)

    def delete_checkpoint(self, key: str) -> int:
        """Delete a checkpoint in two steps: unpublish it with a ``deleted`` mark (one atomic write: readers
        see it whole or gone, never torn), then remove its files. A crash between the steps leaves a marked
        group, which `remove_deleted` removes later. The bytes freed. Only the orchestrator and `podracer gc`
        call this, for checkpoints no segment may be loading (see population/retention.py)."""
        validate_key(key)
        freed = ck.stored_bytes(self._store, key)
        if ck.published_doc(self._store, key, self._url) is not None:
            ck.mark_deleted(self._store, key)
        elif not ck.deleted_mark(self._store, key, self._url):
            raise CheckpointNotFound(f"no complete checkpoint '{key}' in store '{self._url}' to delete")
        ck.remove(self._store, key)
        return freed

    def remove_deleted(self, key: str) -> int:
        """Finish a deletion cut off after its mark; the bytes freed."""
        if not ck.deleted_mark(self._store, validate_key(key), self._url):
            raise StoreError(f"checkpoint '{key}' in store '{self._url}' is not marked deleted")
        freed = ck.stored_bytes(self._store, key)
        ck.remove(self._store, key)
        return freed

    def checkpoint_bytes(self, key: str) -> int:
        """Bytes the checkpoint's files take (0 once it is gone)."""
        return ck.stored_bytes(self._store, validate_key(key))

    def array_names(self, key: str) -> list[str]:
        """The names of a published checkpoint's arrays, without reading them."""
        doc = ck.published_doc(self._store, validate_key(key), self._url)
        if doc is None:
            raise CheckpointNotFound(f"no complete checkpoint '{key}' in store '{self._url}'")
        return list(doc["arrays"])

    def array_shape(self, key: str, name: str) -> tuple[int, ...]:
        """The shape of one array of a published checkpoint, from its metadata alone."""
        meta = read_json(self._store, f"{ck.group_path(validate_key(key))}/{escape_name(name)}/zarr.json", self._url)
        if meta is None:
            raise CheckpointNotFound(f"checkpoint '{key}' in store '{self._url}' has no array '{name}'")
        return tuple(int(n) for n in meta["shape"])

    # -- pins: checkpoints retention never deletes -------------------------------------------------

    def pin(self, key: str, reason: str) -> None:
        """Keep checkpoint ``key`` whatever the retention policy says (an exported champion, a user's choice)."""
        if not self.has_checkpoint(key):
            raise CheckpointNotFound(f"no complete checkpoint '{key}' in store '{self._url}' to pin")
        try:
            pins.pin(self._store, key, " ".join(reason.split())[:200])
        except OSError as e:  # a read-only store: one line naming it, not a traceback from deep in zarr
            raise StoreError(f"cannot pin '{key}' in store '{self._url}': {e.strerror or type(e).__name__}") from None

    def unpin(self, key: str) -> None:
        try:
            pins.unpin(self._store, validate_key(key))
        except OSError as e:
            raise StoreError(f"cannot unpin '{key}' in store '{self._url}': {e.strerror or type(e).__name__}") from None

    def pinned(self) -> set[str]:
        """The keys pinned to be kept."""
        return pins.pinned(self._store)

    def quarantine(self, key: str, reason: str) -> None:
        """Never load checkpoint ``key`` again (e.g. it failed its checksum); its data stay for inspection."""
        if ck.published_doc(self._store, validate_key(key), self._url) is None:
            raise CheckpointNotFound(f"no complete checkpoint '{key}' in store '{self._url}'")
        ck.quarantine(self._store, key, " ".join(reason.split())[:500])

    def is_quarantined(self, key: str) -> bool:
        doc = ck.published_doc(self._store, validate_key(key), self._url)
        return bool(doc and doc.get("quarantined"))

    def check_access(self, probe: str) -> None:
        """Write, read back and delete a small probe: raises StoreError if this process cannot.

        Run on every worker before a tournament starts, so a store path only the client
        can see fails at once, with the path in the message, instead of in every segment.
        """
        path = f"{tables.RUN}/probe-{validate_key(probe)}"
        try:
            tables.write_attrs(self._store, path, {"probe": probe})
            if tables.read_attr(self._store, path, "probe", None, self._url) != probe:
                raise StoreError(f"store '{self._url}' did not return what was written to it")
            sync(self._store.delete_dir(path))
        except OSError as e:
            raise StoreError(f"cannot write to store '{self._url}': {e}") from None

    def checkpoint_attrs(self, key: str) -> dict:
        """The JSON attrs a checkpoint was saved with, without reading its arrays."""
        doc = ck.published_doc(self._store, validate_key(key), self._url)
        if doc is None:
            raise CheckpointNotFound(f"no complete checkpoint '{key}' in store '{self._url}'")
        return doc["attrs"]

    # -- leaderboard, history, run state (one writer: the orchestrator) --------------------------

    def read_leaderboard(self) -> list[dict]:
        """The ranked entries as last written; [] if never written."""
        return tables.read_leaderboard(self._store, self._url)

    def write_leaderboard(self, entries: Sequence[Mapping]) -> None:
        """Replace the whole table in one atomic write."""
        self._upgrade_root()
        tables.write_leaderboard(self._store, entries, self._url)

    def append_history(self, record: Mapping) -> None:
        """Append one record (a finished or failed segment)."""
        if not isinstance(record, Mapping):
            raise TypeError(f"a history record of store '{self._url}' must be a mapping, got {type(record).__name__}")
        self._upgrade_root()
        tables.append_history(self._store, [record], self._url)

    def extend_history(self, records: Sequence[Mapping]) -> None:
        """Append several records in order, writing each touched history block once."""
        if records:
            self._upgrade_root()
        tables.append_history(self._store, records, self._url)

    def read_history(self) -> list[dict]:
        """Every record in append order."""
        return tables.read_history(self._store, self._url)

    def read_run_state(self) -> dict:
        """The orchestrator's state as last written; {} if never written."""
        return tables.read_run_state(self._store, self._url)

    def write_run_state(self, state: Mapping) -> None:
        """Replace the run state in one atomic write."""
        self._upgrade_root()
        tables.write_run_state(self._store, state, self._url)
