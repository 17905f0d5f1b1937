"""Pure rules of the on-disk format: version, key and name rules, JSON, checksum.

Nothing here touches Zarr, so the rules can be read (and tested) on their own.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

FORMAT_NAME = "dask_podracer"
"""Value of the root group's ``format`` attribute; marks a directory as ours."""

FORMAT_VERSION: int = 2
"""Version of the store layout. Bump it (and note why in the module docstring of
``dask_podracer.store``) whenever a reader of the old version would misread the new one."""

def unreadable_version(version: object) -> str | None:
    """Why a ``format_version`` cannot be read by this code ("newer than", "not"), or None if it can: an int
    no newer than FORMAT_VERSION (every older version is read)."""
    if isinstance(version, int) and not isinstance(version, bool):
        return "newer than" if version > FORMAT_VERSION else None
    return "not"


MAX_NAME_LENGTH = 200
"""Longest escaped node name; file systems stop at 255 bytes per path component."""

_KEY_RE = re.compile(r"[A-Za-z0-9_.-]+")
_NAME_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.")
_RESERVED_NAMES = frozenset({".", "..", "zarr.json"})
_ARRAY_KINDS = frozenset("biufc")  # bool, int, uint, float, complex: no objects, strings or records


class StoreError(Exception):
    """Base of every error the store raises; messages are one line naming the path or key."""


class ChecksumError(StoreError):
    """A checkpoint's data does not match the checksum it was published with."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key
        """The damaged checkpoint's key: the one to quarantine, whichever load found it."""

    def __reduce__(self) -> tuple:  # survives pickling (a segment's error crosses from a Dask worker)
        return (type(self), (str(self), self.key))


class CheckpointNotFound(StoreError):
    """No checkpoint under this key, or one that was never published (still being written or crashed)."""


def validate_key(key: str) -> str:
    """Return ``key`` if it can name a checkpoint group, else raise ValueError naming it.

    Keys become directory names, so path traversal ("..") and names Zarr reserves
    ("zarr.json", a leading "__") are refused along with anything outside [A-Za-z0-9_.-].
    """
    if (
        not isinstance(key, str)
        or not _KEY_RE.fullmatch(key)
        or key in _RESERVED_NAMES
        or key.startswith("__")
        or len(key) > MAX_NAME_LENGTH
    ):
        raise ValueError(
            f"invalid checkpoint key {key!r}: use 1-{MAX_NAME_LENGTH} characters of [A-Za-z0-9_.-], "
            "not '.', '..', 'zarr.json' or a leading '__'"
        )
    return key


def escape_name(name: str) -> str:
    """Map an arbitrary array name (e.g. ``"actor.net.0.weight"``, ``"a/b"``) to a Zarr node name.

    Characters outside [A-Za-z0-9_.] become ``-XX`` per UTF-8 byte ('-' itself is ``-2D``), so
    typical state-dict names stay readable and the result stays inside the character set the
    Zarr v3 spec recommends on every backend. Reserved results are escaped further.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"invalid array name {name!r}: must be a non-empty string")
    out = "".join(c if c in _NAME_SAFE else "".join(f"-{b:02X}" for b in c.encode()) for c in name)
    if out in _RESERVED_NAMES:
        out = out.replace(".", "-2E")
    if out.startswith("__"):
        out = "-5F" + out[1:]
    if len(out) > MAX_NAME_LENGTH:
        raise ValueError(f"array name {name!r} is too long: {len(out)} > {MAX_NAME_LENGTH} after escaping")
    return out


def unescape_name(node: str) -> str:
    """Inverse of :func:`escape_name`."""
    raw = bytearray()
    i = 0
    while i < len(node):
        if node[i] == "-":
            raw.append(int(node[i + 1 : i + 3], 16))
            i += 3
        else:
            raw += node[i].encode()
            i += 1
    return raw.decode()


def _json_default(obj: Any) -> Any:
    # numpy scalars and small arrays sneak into metrics and hyper-parameters; store them as plain JSON
    if isinstance(obj, np.generic | np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def to_json(value: Any, what: str) -> Any:
    """Return ``value`` as it will read back from the store (tuples -> lists, numpy -> Python).

    NaN and infinities are kept (Python's json and Zarr both write them as ``NaN``/``Infinity``).
    Raises ValueError naming ``what`` if the value is not JSON.
    """
    try:
        return json.loads(json.dumps(value, allow_nan=True, default=_json_default))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} is not JSON serialisable: {e}") from None


def canonical_json(value: Any) -> bytes:
    """The byte form of a JSON value that the checksum covers: sorted keys, no whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def normalise_array(name: str, value: Any) -> np.ndarray:
    """Return ``value`` as a C-contiguous, native-byte-order numeric ndarray (what loading yields)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in _ARRAY_KINDS:
        raise ValueError(f"array {name!r} has unsupported dtype {arr.dtype}: use bool, int, uint, float or complex")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def checksum(arrays: Mapping[str, np.ndarray], attrs: Any) -> str:
    """Hex sha256 of a checkpoint's content.

    Covers, for each array in sorted name order, a JSON header ``[name, dtype.str, shape, nbytes]``
    and a newline followed by the C-contiguous bytes; then the canonical JSON of ``attrs``.
    The header frames each array, so no two different checkpoints hash the same byte stream.
    """
    h = hashlib.sha256()
    for name in sorted(arrays):
        arr = np.asarray(arrays[name])
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        header = [name, arr.dtype.str, list(arr.shape), arr.nbytes]
        h.update(json.dumps(header).encode() + b"\n")
        h.update(arr.data)  # the buffer itself: no copy of a large tensor
    h.update(canonical_json(attrs))
    return h.hexdigest()
