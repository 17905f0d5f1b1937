"""Values checked against the typed fields of a dataclass, as a TOML file or a Python caller gives them.

The config (config.py) holds every section to its field types through these, and `make_agent` holds an
algorithm's hyper-parameters to its config's, so `hidden = "big"` is named as the field it is wherever it comes
from. Every error is a `ConfigError`, one line naming the field. This module imports nothing of ours: the
layers above it (agents, config) both use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""


def require(ok: bool, field: str, allowed: str, got: Any) -> None:
    """A ConfigError "<field> must be <allowed>, got <got>" unless `ok`."""
    if not ok:
        raise ConfigError(f"{field} must be {allowed}, got {got!r}")


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """"; did you mean 'x'?" for the names in `known` closest to `name` (by their lower case: `SAC`, `hiden`), or
    "" when none is close."""
    spelled = {k.lower(): k for k in known}
    near = difflib.get_close_matches(str(name).lower(), list(spelled), n=2, cutoff=0.75)
    return f"; did you mean {' or '.join(repr(spelled[n]) for n in near)}?" if near else ""


def describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


@functools.cache
def field_hints(cls: type) -> dict[str, Any]:
    """A dataclass's resolved field types (cached: resolving them costs about a tenth of a millisecond)."""
    return typing.get_type_hints(cls)


def dataclass_from(cls: type, raw: Mapping[str, Any], prefix: str) -> Any:
    """`cls(**raw)` once every key is a field of `cls` and every value has its field's type (`coerce`); what the
    class's own checks raise comes back as a ConfigError naming `prefix.<field>`."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = field_hints(cls)
    for key in raw:
        if key not in fields:
            raise ConfigError(f"unknown key {prefix}.{key}{did_you_mean(key, list(fields))} (known: "
                              f"{', '.join(fields)})")
    missing = [n for n, f in fields.items() if n not in raw and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"missing key {prefix}.{missing[0]}")
    values = {k: coerce(v, hints[k], f"{prefix}.{k}") for k, v in raw.items()}
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        message = str(e)
        raise ConfigError(message if message.startswith(prefix) else f"{prefix}.{message}") from None


def coerce(value: Any, hint: Any, field: str) -> Any:
    """Check `value` against a type hint, allowing the conversions TOML needs (int -> float, list -> tuple)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        errors = []
        for option in options:
            try:
                return coerce(value, option, field)
            except ConfigError as e:
                errors.append(e)
        raise errors[0]  # the first option names what is expected ("a number", not "empty")
    if hint is type(None):
        if value is None:
            return None
        raise ConfigError(f"{field} must be empty, got {value!r}")
    if origin is tuple:
        (item,) = {a for a in typing.get_args(hint) if a is not Ellipsis}
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{field} must be a list, got {describe(value)}")
        return tuple(coerce(v, item, f"{field}[{i}]") for i, v in enumerate(value))
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            # torch, msgpack (Dask's messages) and numpy take 64 bits: a bigger one fails later, far from here
            require(-2**63 <= value < 2**63, field, "an integer of at most 64 bits", value)
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            require(not (isinstance(value, float) and math.isnan(value)), field, "a number", value)
            require(isinstance(value, float) or abs(value) < 2**1023, field, "a number of at most 64 bits", value)
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise ConfigError(f"{field} must be {_TYPE_NAMES.get(hint, hint)}, got {describe(value)}")


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
