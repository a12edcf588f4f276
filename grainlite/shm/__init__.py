"""POSIX shared memory: the only package in grainlite that touches ``/dev/shm``.

It sits below both ``sources/`` and ``loader/``/``engine/`` and imports neither. One module per job:

- :mod:`~grainlite.shm.names`: who owns a segment (pid namespace identity and owner pid) and the
  name format that records it;
- :mod:`~grainlite.shm.segments`: :class:`Segment` create, attach and unlink;
- :mod:`~grainlite.shm.termination`: removing this process's segments when SIGTERM ends it;
- :mod:`~grainlite.shm.cleanup`: listing segments and removing those of owners that died, never
  touching another namespace's or another user's;
- :mod:`~grainlite.shm.sharing`: whether two processes share the segments (a key to compare).
"""

from grainlite.shm.cleanup import (
    StaleSegment,
    list_segments,
    remove_stale_segments,
    remove_stale_segments_automatically,
    remove_tagged,
    stale_segments,
)
from grainlite.shm.names import owned_prefix, owner_pid, segment_name
from grainlite.shm.segments import Segment, unlink
from grainlite.shm.sharing import memory_key

__all__ = [
    "Segment",
    "StaleSegment",
    "list_segments",
    "memory_key",
    "owned_prefix",
    "owner_pid",
    "remove_stale_segments",
    "remove_stale_segments_automatically",
    "remove_tagged",
    "segment_name",
    "stale_segments",
    "unlink",
]
