"""``MapDataset.mix`` and ``IterDataset.mix``: datasets interleaved in proportion to weights.

Where each element of a mix comes from is Grain's proportional interleave written as index
math. Both kinds lay their inputs out in one fixed, endless order. The rules, learned by running
Grain 0.2.18 and checked against it by the tests:

* The weights become integer proportions: with ``scale = 100 / min(weights)`` (computed first,
  then multiplied, which decides the float rounding), dataset ``k`` gets
  ``n_k = int(weights[k] * scale)``; so ``[0.3, 0.7]`` gives ``[100, 233]`` and equal weights
  give ``[100, 100, ...]``. The order repeats with period ``P = sum(n_k)``.
* Inside a period, dataset 0 takes the offsets ``floor(j * P / n_0)`` for ``j < n_0``. The
  offsets it leaves, numbered again from 0, are shared the same way by datasets 1, 2, ... over
  ``P - n_0`` offsets, and so on; the last dataset takes whatever is left.
* Position ``i`` lies in period ``i // P`` at offset ``i % P`` (floor division, so negative
  positions continue the pattern backwards). If dataset ``k`` owns that offset and ``c``
  offsets of ``k`` come before it in the period, the element is ``datasets[k][period * n_k + c]``.
* A mixed ``MapDataset`` has ``int(min_k(len_k / (n_k / P)))`` elements, in float arithmetic
  (which sometimes lands one below the exact quotient, as Grain's does): it ends about when the
  first input would be read past its end at its own rate. It is at most ``sys.maxsize``
  (Grain's "endless"), so a mix of endless inputs is endless.

One period is tabulated once (up to :data:`_MAX_TABLE` offsets), after which a position costs a
divmod and two table reads; a whole index array is resolved with numpy in one go.

``MapDataset.mix(datasets, weights)`` reads that order; ``ds[i]`` for ``i`` past the end (or
negative) keeps following the same pattern, and each input wraps its own index. Every input
must have at least one element. Blocks of indices go through one ``_getitems`` call per input.

``IterDataset.mix`` (rules learned by running Grain 0.2.18):

* ``IterDataset.mix(datasets, weights)`` reads its inputs in the order ``MapDataset.mix`` uses
  and stops for good as soon as the input whose turn it is has run out (or raised). A mapping of
  datasets is read in sorted-key order, its weights (a mapping by key, or a sequence in
  sorted-key order) likewise; ``MapDataset`` inputs are read through ``to_iter_dataset()``.
  The state is ``{"parents": [...] or {key: ...}, "index": <positions taken>, "stop": bool}``,
  where ``index`` counts the failed read that ended the stream too.
* A state restores into a mixture of more, fewer or other datasets: the inputs it has a state for
  (by position, or by name) move to it, the others keep their position, and the mix goes on from
  ``index`` with the new weights.

The order is tabulated once per dataset, so a ``next()`` costs a table read and the selected
input's ``__next__``.
"""

from __future__ import annotations

import builtins
import logging
import numbers
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.select import check_map_datasets, gather
from grainlite.errors import GrainliteTypeError, GrainliteValueError, clipped, shown

_log = logging.getLogger(__name__)

_MAX_TABLE = 1 << 16  # offsets tabulated per period; beyond that, each offset is computed


def integer_proportions(weights: Sequence[Any] | None, count: int) -> tuple[int, ...]:
    """The integer share of each of ``count`` datasets per period (see the module docstring).

    Raises:
      GrainliteValueError: not one weight per dataset, or a weight that is not positive.
      GrainliteTypeError: a weight that is not a real number.
    """
    if weights is None:
        weights = [1.0] * count
    weights = list(weights)
    if len(weights) != count:
        raise GrainliteValueError(
            f"mix got {len(weights)} weights for {count} datasets (weights={weights!r}); pass "
            "one weight per dataset, or weights=None to mix them equally."
        )
    values = []
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise GrainliteTypeError(
                f"mix weights must be real numbers (got {weight!r} of type "
                f"{type(weight).__name__} in {weights!r}); pass numbers such as [0.3, 0.7]."
            )
        values.append(float(weight))
    if not all(value > 0 for value in values):
        # Grain's sentence only where it is true: a weight is 0 (Grain refuses only that here).
        grains = "Must specify all non-zero proportions for mixing: " if 0.0 in values else ""
        raise GrainliteValueError(
            f"{grains}every mix weight must be above 0, got {weights!r}; drop the datasets you "
            "do not want to read, or give each a weight above 0."
        )
    scale = 100 / min(values)
    return tuple(int(value * scale) for value in values)


def mixed_length(lengths: Sequence[int], proportions: Sequence[int]) -> int:
    """The length of a mixed ``MapDataset``: ``int(min_k(len_k / (n_k / P)))`` in floats, at most
    ``sys.maxsize``."""
    period = sum(proportions)
    quotient = min(length / (share / period) for length, share in zip(lengths, proportions))
    return sys.maxsize if quotient >= sys.maxsize else int(quotient)


def _locate_offsets(offsets: np.ndarray, proportions: Sequence[int]) -> tuple[Any, Any]:
    """For offsets within one period: the dataset owning each, and how many of its offsets
    precede it in the period (numpy arrays; object arrays of Python ints for huge periods)."""
    period = sum(proportions)
    dtype: Any = np.int64 if period < (1 << 31) else object
    remaining_offset = np.asarray(offsets).astype(dtype)
    which = np.full(remaining_offset.shape, len(proportions) - 1, dtype=np.int64)
    before = remaining_offset.copy()  # the last dataset owns every offset left to it
    undecided = np.ones(remaining_offset.shape, dtype=bool)
    remaining = period
    for k, share in enumerate(proportions[:-1]):
        off = remaining_offset[undecided]
        # Offsets of k below ``off``: ceil(off * share / remaining); k owns ``off`` when the
        # count below ``off + 1`` is larger.
        count_before = -((-off * share) // remaining)
        count_upto = -((-(off + 1) * share) // remaining)
        owned = count_upto > count_before
        positions = np.flatnonzero(undecided)
        which[positions[owned]] = k
        before[positions[owned]] = count_before[owned]
        remaining_offset[positions[~owned]] = (off - count_before)[~owned]
        before[positions[~owned]] = remaining_offset[positions[~owned]]
        undecided[positions[owned]] = False
        remaining -= share
    return which, before


class _Table(NamedTuple):
    """One period tabulated: the owner of each offset and the count before it, as lists (for
    single lookups) and arrays (for blocks)."""

    which: list[int]
    before: list[int]
    which_array: np.ndarray
    before_array: np.ndarray


class MixSelection:
    """Maps positions of a weighted mix to ``(dataset, index in that dataset)``.

    The period table is built on first use and published with one attribute assignment, so
    reader threads that race to build it each see either nothing or a complete table.

    Args:
      proportions: the integer proportions from :func:`integer_proportions`.
    """

    def __init__(self, proportions: Sequence[int]) -> None:
        self.proportions = tuple(int(share) for share in proportions)
        self.period = sum(self.proportions)
        self._shares = np.asarray(self.proportions, dtype=np.int64)
        self._tabulated: _Table | None = None

    def _table(self) -> _Table | None:
        table = self._tabulated
        if table is None and self.period <= _MAX_TABLE:
            which, before = _locate_offsets(np.arange(self.period), self.proportions)
            before = before.astype(np.int64)
            table = self._tabulated = _Table(which.tolist(), before.tolist(), which, before)
        return table

    def owner_table(self) -> list[int] | None:
        """The dataset of each offset of one period, or None when the period is too long to
        tabulate (then :meth:`dataset_of` computes each)."""
        table = self._table()
        return None if table is None else table.which

    def dataset_of(self, position: int) -> int:
        """The dataset that position ``position`` reads from."""
        offset = position % self.period
        table = self._table()
        if table is not None:
            return table.which[offset]
        return int(_locate_offsets(np.asarray([offset]), self.proportions)[0][0])

    def locate(self, position: int) -> tuple[int, int]:
        """``(dataset, index in that dataset)`` of position ``position`` (any int)."""
        cycle, offset = divmod(position, self.period)
        table = self._table()
        if table is not None:
            k = table.which[offset]
            return k, cycle * self.proportions[k] + table.before[offset]
        which, before = _locate_offsets(np.asarray([offset]), self.proportions)
        k = int(which[0])
        return k, cycle * self.proportions[k] + int(before[0])

    def locate_many(self, positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The dataset of each position and the index in it (int arrays; object arrays of
        Python ints for huge periods)."""
        keys = np.asarray(positions, dtype=object if self.period >= (1 << 31) else np.int64)
        cycles, offsets = keys // self.period, keys % self.period
        table = self._table()
        if table is not None:
            which = table.which_array[offsets]
            before = table.before_array[offsets]
        else:
            which, before = _locate_offsets(offsets, self.proportions)
        return which, cycles * self._shares.astype(keys.dtype)[which] + before


class MixedMapDataset(MapDataset):
    """``MapDataset.mix``: the inputs interleaved in proportion to ``weights``.

    Args:
      datasets: the ``MapDataset`` inputs, each with at least one element.
      weights: one positive weight per input; ``None`` mixes them equally.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, datasets: Sequence[MapDataset], weights: Sequence[float] | None = None):
        parents = check_map_datasets(datasets, "mix")
        if not parents:
            raise GrainliteValueError(
                "MapDataset.mix got no datasets; pass at least one MapDataset to mix."
            )
        super().__init__(parents)
        lengths = [len(parent) for parent in parents]
        empty = [k for k, length in enumerate(lengths) if length == 0]
        if empty:
            which = ", ".join(f"index {k} ({clipped(str(parents[k]))})" for k in empty)
            raise GrainliteValueError(
                f"All datasets must have positive length for mixing, but dataset(s) at {which} "
                "have length 0. Leave empty datasets out of the mix."
            )
        self._selection = MixSelection(integer_proportions(weights, len(parents)))
        self._length = mixed_length(lengths, self._selection.proportions)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        k, inner = self._selection.locate(as_index(index, "MixedMapDataset"))
        return self._parents[k][inner]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        which, inner = self._selection.locate_many(indices)
        return gather(which, inner, self._parents)

    def __str__(self) -> str:
        return f"MixedMapDataset(proportions={list(self._selection.proportions)})"

    def __repr__(self) -> str:  # Grain's repr, word for word
        lengths = [len(parent) for parent in self._parents]
        return (
            f"MixedMapDataset(parent_lengths={lengths}, selection_map=SelectionWithProportionsMap("
            f"proportions={self._selection.proportions}, length={self._length}))"
        )


class MixedIterDataset(IterDataset):
    """``IterDataset.mix``: the inputs' streams interleaved in proportion to ``weights``.

    Args:
      datasets: a sequence of datasets, or a mapping from names to datasets (read in sorted-key
        order); ``MapDataset`` inputs are read through ``to_iter_dataset()``.
      weights: one positive weight per input (a sequence, or a mapping by name); ``None`` mixes
        them equally.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(
        self,
        datasets: Sequence[Any] | Mapping[str, Any],
        weights: Sequence[float] | Mapping[str, float] | None = None,
    ) -> None:
        self._keys: list[Any] | None = None
        if isinstance(datasets, Mapping):
            self._keys = sorted(datasets)
            inputs = [datasets[key] for key in self._keys]
        elif isinstance(datasets, Sequence) and not isinstance(datasets, IterDataset | MapDataset):
            inputs = list(datasets)
        else:
            raise GrainliteTypeError(
                f"IterDataset.mix takes a sequence or a mapping of datasets (got a single object "
                f"of type {type(datasets).__name__}); pass e.g. [ds_a, ds_b] or "
                '{"a": ds_a, "b": ds_b}.'
            )
        if not inputs:
            raise GrainliteValueError(
                "IterDataset.mix got no datasets; pass at least one dataset to mix."
            )
        for position, dataset in enumerate(inputs):
            if isinstance(dataset, MapDataset):
                inputs[position] = dataset.to_iter_dataset()
            elif not isinstance(dataset, IterDataset):
                raise GrainliteTypeError(
                    f"IterDataset.mix got {dataset!r} of type {type(dataset).__name__} as input "
                    f"{position}; every input must be an IterDataset or a MapDataset."
                )
        super().__init__(inputs)
        if isinstance(weights, Mapping):
            if self._keys is None or set(weights) != set(self._keys):
                raise GrainliteValueError(
                    f"IterDataset.mix weights {dict(weights)!r} are keyed by name, so the "
                    f"datasets must be a mapping with the same keys (got "
                    f"{self._keys if self._keys is not None else 'a sequence'}); key both by "
                    "the same names, or pass the weights as a list."
                )
            weights = [weights[key] for key in self._keys]
        self._selection = MixSelection(integer_proportions(weights, len(inputs)))

    def __iter__(self) -> MixedDatasetIterator:
        return MixedDatasetIterator([iter(parent) for parent in self._parents], self)

    def __str__(self) -> str:
        return (
            f"MixedIterDataset([{len(self._parents)} parents], "
            f"proportions={list(self._selection.proportions)})"
        )


class MixedDatasetIterator(DatasetIterator):
    """Iterates a :class:`MixedIterDataset`; state ``{"parents", "index", "stop"}``."""

    def __init__(self, parents: list[DatasetIterator], dataset: MixedIterDataset) -> None:
        super().__init__(parents)
        self._keys = dataset._keys
        selection = dataset._selection
        self._which = selection.owner_table()  # tabulated once, before the first element
        self._period = selection.period
        self._dataset_of = selection.dataset_of
        self._nexts = [parent.__next__ for parent in parents]
        self._index = 0
        self._stop = False

    def __next__(self) -> Any:
        if self._stop:
            raise StopIteration
        index = self._index
        self._index = index + 1
        which = self._which
        k = which[index % self._period] if which is not None else self._dataset_of(index)
        try:
            return self._nexts[k]()
        except BaseException:
            self._stop = True  # an input that ran out (or failed) ends the mix for good
            raise

    def get_state(self) -> dict[str, Any]:
        """``{"parents": <each input's state>, "index": <positions taken>, "stop": bool}``."""
        states = [parent.get_state() for parent in self._parents]
        parents: Any = states if self._keys is None else dict(zip(self._keys, states))
        return {"parents": parents, "index": self._index, "stop": self._stop}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the inputs, the position count and the stop flag to ``state``.

        As in Grain, a state restores into a mixture of more, fewer or other datasets: a
        sequence mixture restores its first inputs from the state's first states in order, a
        named mixture the inputs whose names the state has; any other input keeps its position
        (its beginning, on a fresh iterator), a state with no input left is dropped, and the
        position count goes on with this mixture's weights. A state of a sequence mixture into
        a named one (or back) is a ``ValueError``.
        """
        parents = state["parents"]
        if self._keys is not None:
            if not isinstance(parents, Mapping):
                raise GrainliteValueError(
                    f"This mix reads datasets named {self._keys}, but the state's parents are "
                    f"not named ({shown(parents)}); restore a state saved from a mix of named "
                    "datasets."
                )
            restored = [
                (parent, parents[key])
                for key, parent in zip(self._keys, self._parents)
                if parents.get(key) is not None
            ]
            fresh = [key for key in self._keys if parents.get(key) is None]
            dropped = [key for key in parents if key not in self._keys]
        else:
            if isinstance(parents, Mapping | str | bytes) or not isinstance(parents, Sequence):
                raise GrainliteValueError(
                    f"This mix reads a sequence of {len(self._parents)} datasets, but the "
                    f"state's parents are {shown(parents)}; restore a state saved from a mix of "
                    "a sequence of datasets."
                )
            restored = list(zip(self._parents, parents))
            fresh = list(range(len(parents), len(self._parents)))
            dropped = list(range(len(self._parents), len(parents)))
        for parent, parent_state in restored:
            parent.set_state(parent_state)
        if fresh or dropped:
            _log.info(
                "Restored a mix state into another mixture: inputs %s start at their beginning, "
                "the states of inputs %s are dropped.",
                fresh,
                dropped,
            )
        self._index = int(state["index"])
        self._stop = bool(state["stop"])
