"""Views of a tournament: learning curves and the population views from a store, and the Dask dashboard's pages."""

from dask_podracer.dashboard.plots import curves, write_plot
from dask_podracer.dashboard.population_plots import write_population_plot

__all__ = ["curves", "write_plot", "write_population_plot"]
