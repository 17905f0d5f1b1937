"""Views of a tournament: learning curves from a store (and, later, a page on the Dask dashboard)."""

from dask_podracer.dashboard.plots import curves, write_plot

__all__ = ["curves", "write_plot"]
