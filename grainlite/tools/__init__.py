"""Tools around the loader: looking at batches and making small stand-in datasets.

``grainlite.tools.visualize`` has :func:`one_batch` and :func:`show_batch` (matplotlib is imported
when a batch is drawn); ``grainlite.tools.stand_in_data`` writes the small datasets the docs,
examples and tests read (TFDS and OpenCV are imported when a dataset is built).
"""

from grainlite.tools.visualize import one_batch, show_batch

__all__ = ["one_batch", "show_batch"]
