"""The tournament on Dask: generator, updater and the orchestrating as_completed loop.

The only package that touches Dask's client API.
"""

from dask_podracer.population.cluster import ClusterError, Slots, cluster_slots, embedded_cluster
from dask_podracer.population.orchestrator import Progress, RunSummary, check_constructs, run_tournament

__all__ = ["run_tournament", "check_constructs", "RunSummary", "Progress", "embedded_cluster", "cluster_slots",
           "Slots", "ClusterError"]
