"""dask_podracer: tournament-based population training of deep-RL agents on Dask."""

__version__ = "0.1.0"
