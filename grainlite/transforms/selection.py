"""``DatasetSelectionMap``: the routing table from a global index to (dataset, index in it)."""

from __future__ import annotations

import abc


class DatasetSelectionMap(abc.ABC):
    """Maps a global index to ``(constituent dataset index, index within that dataset)``.

    Subclasses define ``__len__`` (the number of addressable records over all datasets) and
    ``__getitem__``. Like Grain's class of the same name it must be stateless, picklable and
    deterministic, since it may be called from several processes at once. grainlite's DataLoader
    does not use it; it is Grain's Dataset API that mixes datasets with it (not yet in grainlite,
    issue 13), and the class is here so that code defining one imports and runs.
    """

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of records across every constituent dataset."""

    @abc.abstractmethod
    def __getitem__(self, index: int) -> tuple[int, int]:
        """``(dataset index, index within that dataset)`` of global ``index``."""
