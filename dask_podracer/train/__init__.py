"""One training segment of one agent: worker, learner, evaluator. Knows nothing of Dask."""

from dask_podracer.train.evaluate import evaluate
from dask_podracer.train.segment import (SegmentError, load_agent, replay_layout, replay_sources, resolve_device,
                                         result_from_attrs, run_segment)
from dask_podracer.train.spec import SegmentResult, SegmentSpec
from dask_podracer.train.state import flatten_state, unflatten_state

__all__ = ["SegmentSpec", "SegmentResult", "SegmentError", "run_segment", "result_from_attrs", "load_agent",
           "resolve_device", "evaluate", "flatten_state", "unflatten_state", "replay_sources", "replay_layout"]
