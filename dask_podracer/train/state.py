"""Nested state dicts <-> flat named arrays plus a JSON skeleton.

A checkpoint keeps every tensor as its own named array and everything else
(optimizer hyper-parameters, counters, the nesting itself) as JSON, so loading
never runs code. The skeleton tags containers so that int keys (optimizer
state is keyed by parameter index), tuples and lists come back as they went in:

    {"d": [[key, node], ...]}   dict, keys kept as int or str
    {"l": [node, ...]}          list
    {"t": [node, ...]}          tuple
    {"a": "name"}               a tensor, stored as array `name`
    {"v": value}                a plain JSON value (str, int, float, bool, None)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                 np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
                 np.dtype(np.bool_): torch.bool, np.dtype(np.uint8): torch.uint8}


def flatten_state(state: Any) -> tuple[dict[str, np.ndarray], Any]:
    """Split `state` into arrays {name: ndarray} and a JSON-able skeleton that refers to them."""
    arrays: dict[str, np.ndarray] = {}

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, torch.Tensor):
            arrays[path] = node.detach().cpu().contiguous().numpy().copy()
            return {"a": path}
        if isinstance(node, dict):
            for key in node:
                if not isinstance(key, (str, int)) or isinstance(key, bool):
                    raise TypeError(f"state key {key!r} at {path or '<root>'} is not a str or int")
            return {"d": [[k, walk(v, f"{path}.{k}" if path else str(k))] for k, v in node.items()]}
        if isinstance(node, (list, tuple)):
            tag = "l" if isinstance(node, list) else "t"
            return {tag: [walk(v, f"{path}.{i}") for i, v in enumerate(node)]}
        if node is None or isinstance(node, (str, bool, int, float)):
            return {"v": node}
        raise TypeError(f"cannot store {type(node).__name__} at {path or '<root>'}: only tensors and JSON values")

    skeleton = walk(state, "")
    return arrays, skeleton


def unflatten_state(skeleton: Any, arrays: dict[str, np.ndarray], device: str | torch.device = "cpu") -> Any:
    """Rebuild the nested state that `flatten_state` split, tensors placed on `device`."""

    def build(node: dict) -> Any:
        (tag, value), = node.items()
        if tag == "a":
            array = arrays[value]
            tensor = torch.from_numpy(np.array(array, order="C", copy=True))  # keeps 0-d arrays 0-d
            return tensor.to(device=device, dtype=_TORCH_DTYPES.get(array.dtype, tensor.dtype))
        if tag == "d":
            return {k: build(v) for k, v in value}
        if tag == "l":
            return [build(v) for v in value]
        if tag == "t":
            return tuple(build(v) for v in value)
        if tag == "v":
            return value
        raise ValueError(f"unknown skeleton tag {tag!r}")

    return build(skeleton)
