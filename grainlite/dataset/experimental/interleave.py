"""``InterleaveIterDataset(datasets, cycle_length=)``: many streams read round-robin.

The rule, learned by running Grain 0.2.18 (the elements and the state at every step match):

* ``min(cycle_length, len(datasets))`` slots read datasets ``0, 1, ...`` at first; ``next()`` reads
  the slot the cycle points at and moves the cycle on by one.
* A slot whose iterator ends is marked exhausted and the cycle moves on to the next slot (the
  element comes from there). When the cycle comes back to an exhausted slot, the slot takes the
  next unused dataset (if any is left) and reads it at once; otherwise it is skipped.
* The stream ends when every slot is exhausted and no dataset is left.

The state has Grain's shape (the same as ``mp_prefetch``'s, which is an interleave too)::

    {"next_index_in_cycle": c, "next_index_in_datasets": n, "iterators_in_use_indices": [...],
     "iterators_in_use_states": [...], "exhausted": [0 or 1 each], "future_states": {k: state}}

``future_states`` holds the states of datasets not yet opened (Grain's elastic restore writes
them): when the interleave opens dataset ``k`` and ``k`` is there, the new iterator starts from that
state and the entry is dropped, as in Grain. The iterators of the next datasets are made when
needed, in this thread (Grain's ``num_make_iter_threads`` / ``make_iter_buffer_size`` /
``iter_buffer_size`` are accepted for compatibility and change nothing in the output).
``set_state`` copies what it reads: Grain 0.2.18's restored iterator keeps the lists of the state
it was given and rewrites them as it goes on, so a checkpoint dict restored twice there gives two
different streams.

``datasets`` may be a ``MapDataset`` of datasets, read lazily as in Grain: dataset ``k`` is made
(``datasets[k]``, which runs the user's function that builds it) only when the interleave opens it,
so under ``mp_prefetch`` it is made in the worker that reads it.

Under ``mp_prefetch`` / ``multithread_prefetch`` with ``W`` workers, the interleave takes its share
itself, as Grain's does (its ``set_slice``): worker ``w`` interleaves ``datasets[w::W]`` with the
same ``cycle_length``, whether or not ``sequential_slice`` is set, and its inputs are not sliced
further. A worker whose share has no dataset gives no elements (Grain 0.2.18 fails there with an
IndexError when there are fewer datasets than workers).

``get_next_index`` / ``set_next_index`` work as in Grain when there is one dataset (the index is
that dataset's iterator's) and raise ``NotImplementedError`` with Grain's words when there are
more. After the end, grainlite answers the dataset's own next index where Grain 0.2.18 answers 0
(and its ``set_next_index`` fails with an AssertionError). The element spec is the first dataset's
(Grain assumes every input has the same).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, ClassVar

from grainlite.checks import int_option
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.element_spec import get_element_spec
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.next_index import get_next_index, set_next_index
from grainlite.dataset.options import input_iterator, set_options
from grainlite.errors import (
    GrainliteTypeError,
    GrainliteValueError,
    InterleaveArgumentError,
    NoNextIndexError,
)

# The datasets an interleave reads: a list (each checked when given) or a MapDataset of datasets
# (each made and checked when opened).
Inputs = list[IterDataset] | MapDataset


def _as_iter_dataset(dataset: Any, position: int) -> IterDataset:
    if isinstance(dataset, IterDataset):
        return dataset
    if isinstance(dataset, MapDataset):
        return dataset.to_iter_dataset()
    raise GrainliteTypeError(
        f"InterleaveIterDataset datasets[{position}] must be an IterDataset or a MapDataset (got "
        f"{dataset!r} of type {type(dataset).__name__}); wrap a sequence with "
        "MapDataset.source(...)."
    )


class InterleaveIterDataset(IterDataset):
    """Reads ``cycle_length`` of ``datasets`` at a time, one element from each in turn.

    Args:
      datasets: the streams (``IterDataset`` or ``MapDataset``, the latter read in order), e.g.
        one per file; or a ``MapDataset`` whose elements are such datasets (made when opened).
      cycle_length: how many datasets are read at once; a positive int.
      num_make_iter_threads: accepted for Grain compatibility; iterators are made in this thread.
      make_iter_buffer_size: accepted for Grain compatibility.
      iter_buffer_size: accepted for Grain compatibility.

    Raises:
      IndexError: ``datasets`` is empty or ``cycle_length`` is below 1 (a ValueError too).
    """

    def __init__(
        self,
        datasets: Sequence[IterDataset | MapDataset],
        *,
        cycle_length: int,
        num_make_iter_threads: int = 1,
        make_iter_buffer_size: int = 1,
        iter_buffer_size: int = 1,
    ) -> None:
        inputs: Inputs
        if isinstance(datasets, MapDataset):
            inputs = datasets  # lazy, as in Grain: not parents, so nothing walks into them
            super().__init__()
        else:
            inputs = [_as_iter_dataset(ds, k) for k, ds in enumerate(datasets)]
            super().__init__(inputs)
        count = len(inputs)
        arguments = (
            "InterleaveIterDataset needs at least one dataset and cycle_length >= 1 (got "
            f"{count} datasets, cycle_length={{value}}); pass a non-empty list and a "
            "positive cycle_length."
        )
        cycle = int_option(
            cycle_length,
            1,
            wrong_type="InterleaveIterDataset cycle_length must be an int, got {type} {value}; "
            "pass how many datasets to read at once.",
            too_small=arguments,
            too_small_error=InterleaveArgumentError,
        )
        if not count:
            raise InterleaveArgumentError(arguments.format(value=cycle))
        self._datasets = inputs
        self._cycle_length = cycle
        self._options = (num_make_iter_threads, make_iter_buffer_size, iter_buffer_size)

    # Its inputs' iterators are opened while it reads, with the options of its pipeline
    # (grainlite.dataset.options.input_iterator); their own options stay with them, as in Grain.
    opens_inputs_while_reading: ClassVar[bool] = True

    def __iter__(self) -> InterleaveDatasetIterator:
        return InterleaveDatasetIterator(self._datasets, self._cycle_length)

    def set_slice(self, sl: builtins.slice, sequential_slice: bool = False) -> None:
        """Grain's in-place slicing hook: from now on this node reads ``datasets[sl]`` (a worker's
        share under ``mp_prefetch``: ``slice(w, None, W)``). As in Grain, ``sequential_slice`` is
        ignored (the share is strided) and the datasets themselves are not sliced."""
        del sequential_slice
        self._datasets = self._datasets[sl]
        if not isinstance(self._datasets, MapDataset):
            self._parents = tuple(self._datasets)

    @property
    def _element_spec(self) -> Any:
        """The first dataset's spec (Grain assumes every input has the same)."""
        return get_element_spec(self._datasets[0])

    def __str__(self) -> str:
        count = len(self._datasets)
        return f"InterleaveIterDataset([{count} datasets], cycle_length={self._cycle_length})"


class InterleaveDatasetIterator(DatasetIterator):
    """The round-robin over the slots; see the module docstring for the rule and the state."""

    def __init__(self, datasets: Inputs, cycle_length: int) -> None:
        slots = min(cycle_length, len(datasets))
        self._datasets = datasets
        self._options = set_options()  # the pipeline's, for every input opened later
        self._iterators = [self._open(k) for k in range(slots)]
        super().__init__(list(self._iterators))
        self._indices = list(range(slots))
        self._exhausted = [False] * slots
        self._next_dataset = slots
        self._cycle = 0
        self._future: dict[int, Any] = {}  # states of datasets not opened yet, by index

    def _open(self, index: int) -> DatasetIterator:
        return input_iterator(_as_iter_dataset(self._datasets[index], index), self._options)

    def _replace(self, slot: int, iterator: DatasetIterator) -> None:
        old = self._iterators[slot]
        self._iterators[slot] = iterator
        self._parents = tuple(self._iterators)
        old.close()

    def __next__(self) -> Any:
        slots = len(self._iterators)
        iterators, exhausted = self._iterators, self._exhausted
        if not slots:  # a worker's share without datasets
            raise StopIteration
        while True:
            slot = self._cycle
            if exhausted[slot]:
                if self._next_dataset >= len(self._datasets):
                    if all(exhausted):
                        raise StopIteration
                    self._cycle = (slot + 1) % slots
                    continue
                self._replace(slot, self._open(self._next_dataset))
                if self._next_dataset in self._future:  # a saved state for it: start there
                    iterators[slot].set_state(self._future.pop(self._next_dataset))
                self._indices[slot] = self._next_dataset
                self._next_dataset += 1
                exhausted[slot] = False
            try:
                element = next(iterators[slot])
            except StopIteration:
                exhausted[slot] = True
                self._cycle = (slot + 1) % slots
                continue
            self._cycle = (slot + 1) % slots
            return element

    def get_state(self) -> dict[str, Any]:
        """Grain's interleave state (a new dict each call)."""
        return {
            "next_index_in_cycle": self._cycle,
            "next_index_in_datasets": self._next_dataset,
            "iterators_in_use_indices": list(self._indices),
            "iterators_in_use_states": [it.get_state() for it in self._iterators],
            "exhausted": [int(flag) for flag in self._exhausted],
            "future_states": dict(self._future),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Makes the iterators of the datasets in use and moves each to its saved state."""
        indices = state["iterators_in_use_indices"]
        states = state["iterators_in_use_states"]
        flags = state["exhausted"]
        slots = len(self._iterators)
        if not (len(indices) == len(states) == len(flags) == slots):
            raise GrainliteValueError(
                f"InterleaveIterDataset state has {len(indices)} slots, this iterator has {slots} "
                f"(min(cycle_length, len(datasets))); restore a state saved from an interleave "
                f"with the same datasets and cycle_length (state: {state!r})."
            )
        for slot, (index, saved) in enumerate(zip(indices, states, strict=True)):
            if not 0 <= index < len(self._datasets):
                raise GrainliteValueError(
                    f"InterleaveIterDataset state uses dataset {index}, but there are "
                    f"{len(self._datasets)}; restore a state saved over the same datasets."
                )
            if self._indices[slot] != index:
                self._replace(slot, self._open(index))
            self._iterators[slot].set_state(saved)
        self._indices = list(indices)
        self._exhausted = [bool(flag) for flag in flags]
        self._next_dataset = int(state["next_index_in_datasets"])
        self._cycle = int(state["next_index_in_cycle"]) % slots if slots else 0
        # JSON writes the keys as strings; Grain's own dict has ints.
        self._future = {int(k): v for k, v in (state.get("future_states") or {}).items()}

    def _only_iterator(self, action: str) -> DatasetIterator:
        """The one dataset's iterator, for get/set_next_index; Grain's NotImplementedError when
        there are several datasets (their elements have no single index)."""
        if len(self._datasets) != 1:
            raise NoNextIndexError(
                f"{action} is not supported for InterleaveDatasetIterator with more than one "
                f"dataset (it reads {len(self._datasets)}): its position is not one element "
                "index; use get_state() / set_state() instead."
            )
        return self._iterators[0]

    def _get_next_index(self) -> int:
        return get_next_index(self._only_iterator("get_next_index"))

    def _set_next_index(self, index: int) -> None:
        set_next_index(self._only_iterator("set_next_index"), index)
        self._exhausted[0] = False  # the one dataset is read again from ``index``

    def __str__(self) -> str:
        return f"InterleaveDatasetIterator(slots={len(self._iterators)})"
