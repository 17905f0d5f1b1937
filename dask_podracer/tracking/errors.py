"""The one error of the tracking package (a module of its own, so the writers need not import the package)."""


class TrackingError(ValueError):
    """A tracker cannot be opened: its library is missing (the message names the extra) or its store refused."""
