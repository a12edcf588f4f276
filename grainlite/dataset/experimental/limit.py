"""``LimitIterDataset(parent, count)``: a stream cut short after ``count`` elements.

Grain 0.2.18's rules and state (learned by running it): the first ``count`` elements; the parent
is not read past them. State ``{"parent": <parent state>, "count_elements_read": k}``.
"""

from __future__ import annotations

from typing import Any

from grainlite.checks import int_option
from grainlite.dataset import element_spec
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.next_index import set_next_index


class LimitIterDataset(IterDataset):
    """The first ``count`` elements of ``parent``.

    Args:
      parent: the stream to cut.
      count: how many elements to keep, a positive int.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: IterDataset, count: int) -> None:
        super().__init__(parent)
        self._count = int_option(
            count,
            1,
            wrong_type="LimitIterDataset count must be an int, got {type} {value}; pass how many "
            "elements to keep (>= 1).",
            # Grain's words ("Count must be a non-negative integer") are false for 0, which it
            # refuses too: the rule is stated as it is.
            too_small="LimitIterDataset count must be an int >= 1, got {value}; pass how many "
            "elements to keep (>= 1).",
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
