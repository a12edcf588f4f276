"""Tools around the loader: looking at batches.

``grainlite.tools.visualize`` has :func:`one_batch` and :func:`show_batch`,
``grainlite.tools.results`` has :func:`show_results` (predictions beside targets) and
``grainlite.tools.describe`` has :func:`describe_batch` (a text table, no matplotlib),
``grainlite.tools.timeline`` has :func:`draw_timeline` (``stats().timeline`` as a PNG).
matplotlib is imported when a batch or a timeline is drawn.
"""

from grainlite.tools.describe import describe_batch
from grainlite.tools.results import show_results
from grainlite.tools.timeline import draw_timeline
from grainlite.tools.visualize import one_batch, show_batch

__all__ = ["describe_batch", "draw_timeline", "one_batch", "show_batch", "show_results"]
