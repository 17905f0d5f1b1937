"""What a finished segment's history record becomes in a tracker: a run name, an x position and scalars.

Pure functions of history records (`docs/store-format.md`), shared by the TensorBoard and the
MLflow writers so both log the same numbers under the same names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def agent_run(record: Mapping[str, Any]) -> str:
    """The tracker run (TensorBoard subdirectory, MLflow run name) of the record's agent: `agent-007`."""
    agent = record.get("agent")
    return f"agent-{agent:03d}" if isinstance(agent, int) else f"agent-{agent}"


def step(record: Mapping[str, Any]) -> int:
    """The x position in env steps: the lineage's (what the checkpoint has seen since its first segment)."""
    steps = record.get("lineage_env_steps")
    if steps is None:  # not in records of older stores
        steps = record.get("run_env_steps") or 0
    return int(steps)


def logged(record: Mapping[str, Any]) -> bool:
    """Whether a record is logged: finished segments only (failed and cancelled ones have no score)."""
    return record.get("status") == "finished" and record.get("score") is not None


def segment_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of one finished segment, by tag.

    `score` (the mean evaluation return), `score_stderr` (when the record has it), `env_steps_per_second`
    (the segment's env steps over its training seconds), `metrics/<name>` (the learner's last metrics:
    losses, entropy, learner busy fraction, policy lag...) and `hparams/<name>` (each numeric hyper-parameter
    the segment trained with). Non-finite and non-numeric values are left out.
    """
    out = {"score": float(record["score"])}
    if _number(record.get("score_stderr")):
        out["score_stderr"] = float(record["score_stderr"])
    seconds, steps = record.get("train_seconds"), record.get("segment_env_steps")
    if _number(seconds) and _number(steps) and seconds > 0:
        out["env_steps_per_second"] = float(steps) / float(seconds)
    for name, value in sorted((record.get("metrics") or {}).items()):
        if _number(value):
            out[f"metrics/{name}"] = float(value)
    for name, value in sorted((record.get("hparams") or {}).items()):
        if _number(value):
            out[f"hparams/{name}"] = float(value)
    return out


def segment_text(record: Mapping[str, Any]) -> str:
    """A short Markdown note of what the segment was: its key, where it started from, all its hyper-parameters."""
    parent = record.get("parent")
    origin = "a fresh start" if not parent else f"adopted `{parent}`" if record.get("adopted") else f"from `{parent}`"
    rows = "\n".join(f"| {name} | `{json.dumps(value)}` |" for name, value in sorted((record.get("hparams") or {}).items()))
    return (f"segment `{record.get('key')}` ({origin}, generation {record.get('generation', 0)}, "
            f"group {record.get('group') or '-'})\n\n| hyper-parameter | value |\n| --- | --- |\n{rows}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
