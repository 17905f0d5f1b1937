"""The tournament on Dask: strategies, the state machine, and the orchestrating as_completed loop.

The only package that touches Dask's client API (the strategies and the state
machine are plain Python; the orchestrator carries their decisions out).
"""

from dask_podracer.population.cluster import ClusterError, Slots, cluster_slots, embedded_cluster
from dask_podracer.population.connect import TLSFiles, connect, embedded_client
from dask_podracer.population.orchestrator import Progress, RunSummary, run_tournament
from dask_podracer.population.preflight import check_constructs, check_store_fits, check_without_cluster
from dask_podracer.population.tournament import (BudgetReached, CapacityChanged, Cancel, CheckpointDamaged, Evict,
                                                 Promote, Quarantine, SegmentFailed, SegmentFinished,
                                                 SegmentRecovered, Stop, Tournament, Train, segment_spec)

__all__ = ["run_tournament", "check_without_cluster", "connect", "embedded_client", "TLSFiles", "check_constructs",
           "check_store_fits",
           "RunSummary", "Progress", "embedded_cluster", "cluster_slots", "Slots", "ClusterError", "Tournament",
           "SegmentFinished", "SegmentFailed", "SegmentRecovered", "CapacityChanged", "BudgetReached", "Train",
           "Promote", "Evict", "Cancel", "Stop", "Quarantine", "CheckpointDamaged", "segment_spec"]
