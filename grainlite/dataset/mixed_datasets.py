"""``MapDataset.mix`` and ``IterDataset.mix``: datasets interleaved in proportion to weights.

Both read their inputs in the order of :mod:`grainlite.dataset.mix_selection` (weights to
integer proportions to positions, and a mixed ``MapDataset``'s length); this module is the two
dataset nodes: how they take their inputs, what they do past an input's end, and their states.

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
from collections.abc import Mapping, Sequence
from typing import Any

from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.mix_selection import MixSelection, integer_proportions, mixed_length
from grainlite.dataset.select import check_map_datasets, gather
from grainlite.errors import GrainliteTypeError, GrainliteValueError, clipped, shown

_log = logging.getLogger(__name__)


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
