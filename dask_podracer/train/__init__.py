"""One training segment of one agent: worker, learner, evaluator. Knows nothing of Dask."""

from dask_podracer.train.agent_checkpoints import (evaluation_env_kwargs, load_agent, replay_layout, replay_sources,
                                                   result_from_attrs, save_agent)
from dask_podracer.train.evaluate import evaluate
from dask_podracer.train.segment import resolve_device, run_segment, usable_device
from dask_podracer.train.spec import SegmentError, SegmentResult, SegmentSpec
from dask_podracer.train.state import flatten_state, unflatten_state

__all__ = ["SegmentSpec", "SegmentResult", "SegmentError", "run_segment", "result_from_attrs", "load_agent",
           "save_agent", "resolve_device", "usable_device", "evaluate", "flatten_state", "unflatten_state", "replay_sources",
           "replay_layout", "evaluation_env_kwargs"]
