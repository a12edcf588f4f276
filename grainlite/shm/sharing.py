"""Whether two processes share this package's shared memory: one key per ``/dev/shm``.

A process of another backend (a Ray actor) may write its elements into slabs, as a local worker
does, only where the training process can open the segments by name and the names' owner pid
means the same process to both (:mod:`~grainlite.shm.names`). :func:`memory_key` says both: the
identity of the pid namespace (boot id included) and the device and inode of ``/dev/shm`` (a
container with its own ``/dev/shm`` mount has another tmpfs, hence another device number, even on
the same machine). Two processes whose keys are equal share the segments; None where this
system has no ``/dev/shm``.
"""

from __future__ import annotations

import os

from grainlite.shm.cleanup import SHM_DIR
from grainlite.shm.names import identity


def memory_key() -> str | None:
    """This process's shared-memory key (see the module docstring), or None without
    ``/dev/shm``."""
    try:
        stat = os.stat(SHM_DIR)
    except OSError:
        return None
    return f"{identity()}:{stat.st_dev}:{stat.st_ino}"
