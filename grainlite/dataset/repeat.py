"""``ds.repeat(num_epochs, reseed_each_epoch=)``: ``num_epochs`` epochs of a ``MapDataset``.

``len`` is ``num_epochs * len(ds)``, or ``sys.maxsize`` (Grain's "endless") for ``num_epochs=None``.
With ``reseed_each_epoch=True`` (the default) index ``i`` reads ``ds[i]`` itself: the nodes
below see the epoch (``i // len(ds)``), so a shuffle reshuffles and a ``random_map`` draws new
numbers in every epoch. With ``False`` it reads ``ds[i % len(ds)]``: every epoch is the first.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Sequence
from typing import Any

from grainlite.checks import int_option
from grainlite.dataset._util import as_index, parent_getitems, wrapped_keys
from grainlite.dataset.base import MapDataset
from grainlite.errors import GrainliteValueError


class RepeatMapDataset(MapDataset):
    """``parent`` repeated ``num_epochs`` times (``None``: endlessly).

    Args:
      parent: the dataset to repeat; not itself endless when ``num_epochs`` is None.
      num_epochs: a positive int, or None for an endless dataset.
      reseed_each_epoch: whether epochs after the first differ (new shuffle, new random numbers).

    Raises:
      ValueError: ``num_epochs`` is not positive, or ``parent`` is already endless, whatever
        ``num_epochs`` (Grain's rule).
      TypeError: ``num_epochs`` is not an int.
    """

    def __init__(
        self,
        parent: MapDataset,
        *,
        num_epochs: int | None = None,
        reseed_each_epoch: bool = True,
    ) -> None:
        super().__init__(parent)
        if num_epochs is not None:
            num_epochs = int_option(
                num_epochs,
                1,
                wrong_type="repeat(num_epochs=...) must be an int or None, got {type} {value}; "
                "pass a positive number of epochs, or None to repeat endlessly.",
                too_small="num_epochs must be positive, but got {value}; pass num_epochs >= 1, "
                "or None to repeat endlessly.",
            )
        if len(parent) >= sys.maxsize:  # Grain refuses it for any num_epochs
            raise GrainliteValueError(
                f"Repeating already infinite dataset {parent} does nothing: its length is "
                "sys.maxsize (endless); drop this repeat(), or give the repeat below it a "
                "num_epochs."
            )
        self._num_epochs = None if num_epochs is None else int(num_epochs)
        self._reseed = bool(reseed_each_epoch)
        parent_len = len(parent)
        if parent_len == 0:
            self._length = 0
        elif self._num_epochs is None:
            self._length = sys.maxsize
        else:
            self._length = min(sys.maxsize, parent_len * self._num_epochs)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        index = as_index(index, "RepeatMapDataset")
        if not self._reseed:
            index %= len(self._parent)
        return self._parent[index]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        if not self._reseed and len(indices):
            length = len(self._parent)
            if length == 0:
                return [self[i] for i in indices]
            indices = wrapped_keys(indices, length).tolist()
        return parent_getitems(self._parent)(indices)

    def __str__(self) -> str:
        return f"RepeatMapDataset(num_epochs={self._num_epochs})"
