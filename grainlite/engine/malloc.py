"""glibc malloc settings of worker processes.

Every worker limits glibc to :data:`WORKER_ARENAS` malloc arenas (:func:`limit_arenas`). glibc
gives each thread that allocates while another holds the lock an arena of its own, up to eight
per CPU, and an arena keeps the memory freed in it. A worker reading an ArrayRecord file has the
reader's pool of 64 threads: on the images workload their arenas held about 16 MB per worker
(peak PSS of the tree at W=2: 255 MB with glibc's default, 222 MB with 2 arenas). The work of a
worker is in its main thread (the transforms), so two arenas (the main one, and one the other
threads share) leave it uncontended.

A worker that frees whole batches of large elements at once keeps freed memory too
(:func:`keep_freed_memory`).

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
from typing import Any

# mallopt(3) parameters (glibc's malloc.h) and the values set.
_SETTINGS = {
    "MMAP_THRESHOLD": (-3, 16 << 20),
    "TRIM_THRESHOLD": (-1, 64 << 20),
}

_kept: bool | None = None  # None: not asked yet in this process

WORKER_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


def limit_arenas(arenas: int = WORKER_ARENAS) -> bool:
    """Caps this process's glibc malloc arenas at ``arenas`` (call it before threads start);
    True if set. Does nothing where the C library has no ``mallopt`` and where the environment
    already chose (``MALLOC_ARENA_MAX``)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    mallopt = _mallopt()
    return mallopt is not None and mallopt(_M_ARENA_MAX, arenas) == 1


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
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return all(mallopt(parameter, value) == 1 for parameter, value in _SETTINGS.values())


def _mallopt() -> Any:
    """glibc's ``mallopt(int, int) -> int``, or None where the C library has none."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt
