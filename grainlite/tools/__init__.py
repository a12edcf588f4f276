"""Tools around the loader: looking at batches.

``grainlite.tools.visualize`` has :func:`one_batch` and :func:`show_batch` (matplotlib is imported
when a batch is drawn).
"""

from grainlite.tools.visualize import one_batch, show_batch

__all__ = ["one_batch", "show_batch"]
