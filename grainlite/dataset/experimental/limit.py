"""``RepeatIterDataset`` and ``LimitIterDataset``: a stream read several times, or cut short.

Grain 0.2.18's rules and states (learned by running it):

* ``RepeatIterDataset(parent, num_epochs=None)``: when the parent ends, the epoch count goes up
  and the parent starts again from its first state; ``num_epochs=None`` repeats endlessly. State
  ``{"parent": <parent state>, "epoch": e}``; after the last epoch ``epoch == num_epochs``. An
  endless repeat of an empty stream ends at once here (Grain's loops forever).
* ``LimitIterDataset(parent, count)``: the first ``count`` elements; the parent is not read past
  them. State ``{"parent": <parent state>, "count_elements_read": k}``.
"""

from __future__ import annotations

from typing import Any

from grainlite.checks import int_option
from grainlite.dataset.base import DatasetIterator, IterDataset
from grainlite.dataset.next_index import set_next_index


def _positive_int(value: Any, what: str, fix: str, grains: str = "") -> int:
    """``value`` as an int >= 1 (:func:`grainlite.checks.int_option`); ``grains``: Grain's own
    message for a value below 1, quoted in ours."""
    too_small = f"{what} must be positive, but got {{value}}"
    if grains:
        too_small += f" ({grains})"
    return int_option(
        value,
        1,
        wrong_type=f"{what} must be an int, got {{type}} {{value}}; {fix}",
        too_small=f"{too_small}; {fix}",
    )


class RepeatIterDataset(IterDataset):
    """The stream ``parent`` read ``num_epochs`` times (``None``: endlessly).

    Args:
      parent: the stream to repeat.
      num_epochs: a positive int, or None to repeat endlessly.
    """

    def __init__(self, parent: IterDataset, num_epochs: int | None = None) -> None:
        super().__init__(parent)
        if num_epochs is not None:
            num_epochs = _positive_int(
                num_epochs, "RepeatIterDataset num_epochs", "pass num_epochs >= 1, or None."
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


class LimitIterDataset(IterDataset):
    """The first ``count`` elements of ``parent``.

    Args:
      parent: the stream to cut.
      count: how many elements to keep, a positive int.
    """

    def __init__(self, parent: IterDataset, count: int) -> None:
        super().__init__(parent)
        self._count = _positive_int(
            count,
            "LimitIterDataset count",
            "pass how many elements to keep (>= 1).",
            grains="Grain's words: Count must be a non-negative integer. Got {value}",
        )

    def __iter__(self) -> LimitDatasetIterator:
        return LimitDatasetIterator(iter(self._parent), self._count)

    def __str__(self) -> str:
        return f"LimitIterDataset(count={self._count})"


class LimitDatasetIterator(DatasetIterator):
    """Stops after ``count`` elements; state ``{"parent", "count_elements_read"}``."""

    def __init__(self, parent: DatasetIterator, count: int) -> None:
        super().__init__(parent)
        self._count = count
        self._read = 0

    def __next__(self) -> Any:
        if self._read >= self._count:
            raise StopIteration
        element = next(self._parent)
        self._read += 1
        return element

    def get_state(self) -> dict[str, Any]:
        """``{"parent": <parent state>, "count_elements_read": k}``."""
        return {"parent": self._parent.get_state(), "count_elements_read": self._read}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the parent to its saved state and the count to the saved count."""
        self._parent.set_state(state["parent"])
        self._read = int(state["count_elements_read"])

    def _get_next_index(self) -> int:
        """Grain's next index of a limit: the number of elements it has given."""
        return self._read

    def _set_next_index(self, index: int) -> None:
        """Moves the parent to ``index`` and counts ``index`` elements as given."""
        set_next_index(self._parent, index)
        self._read = index

    def __str__(self) -> str:
        return f"LimitDatasetIterator(count={self._count})"
