"""glibc malloc settings for a worker that frees whole batches of large elements at once.

By default glibc gives the free top of its heap back to the system once it exceeds twice the size
of the last large block freed. A worker that holds a batch's worth of decoded images and frees
them together (a ``MapDataset.batch`` under ``mp_prefetch``) then returns the memory after every
batch and page-faults it in again for the next: about a third more time per batch on the images
workload. :func:`keep_freed_memory` makes blocks up to 16 MiB come from the heap and keeps up to
64 MiB of free heap for reuse. Only such workers call it: the others free elements one by one and
would only hold more memory (about 10 MB a worker on the benchmarks' workloads).
"""

from __future__ import annotations

import os

# mallopt(3) parameters (glibc's malloc.h) and the values set.
_SETTINGS = {
    "MMAP_THRESHOLD": (-3, 16 << 20),
    "TRIM_THRESHOLD": (-1, 64 << 20),
}

_kept: bool | None = None  # None: not asked yet in this process


def keep_freed_memory() -> bool:
    """Applies the settings once per process; True if they are in effect.

    Does nothing where the C library has no ``mallopt`` (not glibc), and where the environment
    already chose either setting (``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_``).
    """
    global _kept
    if _kept is None:
        _kept = _apply()
    return _kept


def _apply() -> bool:
    if any(f"MALLOC_{name}_" in os.environ for name in _SETTINGS):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(parameter, value) == 1 for parameter, value in _SETTINGS.values())
