"""Grain's ``grain.multiprocessing`` names: worker options and the shared-memory array.

``MultiprocessingOptions`` describes a DataLoader's worker processes; :class:`SharedMemoryArray`
is a numpy array in shared memory that other processes attach to by name (see
:mod:`grainlite.shm.array` for who removes the segment).
"""

from grainlite.options import MultiprocessingOptions
from grainlite.shm.array import SharedMemoryArray, SharedMemoryArrayMetadata

__all__ = ["MultiprocessingOptions", "SharedMemoryArray", "SharedMemoryArrayMetadata"]
