"""dask_podracer: tournament-based population training of deep-RL agents on Dask."""

from dask_podracer import _import_guard

__version__ = "0.1.0"

_import_guard.install()  # before any of our modules imports torch or numpy
