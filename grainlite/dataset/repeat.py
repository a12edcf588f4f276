"""``ds.repeat(num_epochs, reseed_each_epoch=)``: ``num_epochs`` epochs of a ``MapDataset``.

``len`` is ``num_epochs * len(ds)``, or ``sys.maxsize`` (Grain's "endless") for ``num_epochs=None``.
With ``reseed_each_epoch=True`` (the default) index ``i`` reads ``ds[i]`` itself: the nodes
below see the epoch (``i // len(ds)``), so a shuffle reshuffles and a ``random_map`` draws new
numbers in every epoch. With ``False`` it reads ``ds[i % len(ds)]``: every epoch is the first.

``RepeatIterDataset(parent, num_epochs=None)`` (``grain.experimental``; Grain 0.2.18's rules,
learned by running it): when the parent ends, the epoch count goes up and the parent starts
again from its first state; ``num_epochs=None`` repeats endlessly. State
``{"parent": <parent state>, "epoch": e}``; after the last epoch ``epoch == num_epochs``. An
endless repeat of an empty stream ends at once here (Grain's loops forever).
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Sequence
from typing import Any

from grainlite.checks import int_option
from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, parent_getitems, wrapped_keys
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
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

    _element_spec = property(element_spec.first_parent_spec)

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

    def _parent_keys(self, indices: Any) -> Any:
        """The parent indices reading ``indices`` reads (:mod:`~grainlite.dataset.key_hints`):
        wrapped into the parent, or (reseeding each epoch) the same, as :meth:`_getitems`."""
        length = len(self._parent)
        if self._reseed or not length or not len(indices):
            return indices
        return wrapped_keys(indices, length)

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        if not self._reseed and len(indices):
            length = len(self._parent)
            if length == 0:
                return [self[i] for i in indices]
            indices = wrapped_keys(indices, length).tolist()
        return parent_getitems(self._parent)(indices)

    def __str__(self) -> str:
        return f"RepeatMapDataset(num_epochs={self._num_epochs})"


class RepeatIterDataset(IterDataset):
    """The stream ``parent`` read ``num_epochs`` times (``None``: endlessly).

    Args:
      parent: the stream to repeat.
      num_epochs: a positive int, or None to repeat endlessly.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: IterDataset, num_epochs: int | None = None) -> None:
        super().__init__(parent)
        if num_epochs is not None:
            num_epochs = int_option(
                num_epochs,
                1,
                wrong_type="RepeatIterDataset num_epochs must be an int, got {type} {value}; "
                "pass num_epochs >= 1, or None.",
                too_small="RepeatIterDataset num_epochs must be positive, but got {value}; "
                "pass num_epochs >= 1, or None.",
            )
        self._num_epochs = num_epochs

    def __iter__(self) -> RepeatDatasetIterator:
        return RepeatDatasetIterator(iter(self._parent), self._num_epochs)

    def __str__(self) -> str:
        return f"RepeatIterDataset(num_epochs={self._num_epochs})"


class RepeatDatasetIterator(DatasetIterator):
    """Restarts the parent from its first state at each epoch; state ``{"parent", "epoch"}``."""

    def __init__(self, parent: DatasetIterator, num_epochs: int | None) -> None:
        super().__init__(parent)
        self._num_epochs = num_epochs
        self._first_state = parent.get_state()
        self._epoch = 0
        self._fresh = True  # no element read since the parent (re)started: an empty epoch ends
        self._keep_workers()

    def __next__(self) -> Any:
        while self._num_epochs is None or self._epoch < self._num_epochs:
            try:
                element = next(self._parent)
            except StopIteration:
                if self._fresh and self._num_epochs is None:
                    raise  # an endless repeat of an empty stream
                self._epoch += 1
                if self._num_epochs is not None and self._epoch >= self._num_epochs:
                    break
                self._parent.set_state(self._first_state)  # waiting workers move: no new ones
                self._keep_workers()
                self._fresh = True
                continue
            self._fresh = False
            return element
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        """``{"parent": <parent state>, "epoch": e}``."""
        return {"parent": self._parent.get_state(), "epoch": self._epoch}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the parent to its saved state and the epoch count to the saved epoch."""
        self._parent.set_state(state["parent"])
        self._epoch = int(state["epoch"])
        self._fresh = False
        self._keep_workers()

    def _keep_workers(self) -> None:
        """Tells the ``mp_prefetch`` iterators below whether another epoch follows this one, so
        that they keep their worker processes for it rather than start new ones."""
        more = self._num_epochs is None or self._epoch < self._num_epochs - 1
        _keep_workers_at_end(self._parent, more)

    def __str__(self) -> str:
        return f"RepeatDatasetIterator(num_epochs={self._num_epochs})"


def _keep_workers_at_end(iterator: Any, keep: bool) -> None:
    """Calls ``keep_workers_at_end(keep)`` on the first such iterator down every branch."""
    hook = getattr(iterator, "keep_workers_at_end", None)
    if callable(hook):
        hook(keep)
        return
    for parent in getattr(iterator, "_parents", ()):
        _keep_workers_at_end(parent, keep)
