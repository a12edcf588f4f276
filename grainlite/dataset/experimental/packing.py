"""Grain's ``FirstFitPackIterDataset`` and ``BestFitPackIterDataset``: sequences packed into rows.

A packer fills ``num_packing_bins`` bins per *round*: each sequence (a dict of 1-D or N-D arrays,
the first axis being the sequence axis; a scalar is one token) goes to a bin where every packed
feature still has room (first fit: the first such bin; best fit: the one with the least room
left, summed over the features, the first of equals). The first sequence that fits no bin ends
the round: the non-empty bins are emitted as rows (shuffled with
``np.random.default_rng(seed + rows_emitted_before)`` unless ``shuffle_bins=False``; with
``shuffle_bins_group_by_feature``, sorted by the mean of that feature's distinct non-zero values
in the row, rows of equal value in that random order) and that sequence starts the next round.
The end of the parent ends the last round. Learned by running Grain 0.2.18, and equal to it row
by row and state by state.

The state is Grain's ``{"parent": <parent state at the round's start>, "next_row": k,
"counter": rows emitted}``: a restore rebuilds the round from the parent and skips ``k`` rows.

Only the bin choice runs per sequence (a few numpy operations over the bins); the rows of a round
are written at once by :func:`~grainlite.transforms.packing.layout.assemble_rows`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.errors import GrainliteValueError
from grainlite.transforms.packing import checks as packing_checks
from grainlite.transforms.packing.fit import fill_round
from grainlite.transforms.packing.layout import PackSpec, assemble_rows, round_buffer_bytes


def _group_value(values: Any) -> float:
    """A row's value for ``shuffle_bins_group_by_feature``: the mean of its distinct non-zero
    values (0 for none), as in Grain."""
    distinct = np.unique(np.asarray(values))
    nonzero = np.count_nonzero(distinct)
    return float(distinct.sum() / nonzero) if nonzero else 0.0


class _PackIterDataset(IterDataset):
    """What the first-fit and best-fit packers share: the arguments and the iterator."""

    _best_fit = False

    def __init__(
        self,
        parent: IterDataset,
        *,
        length_struct: Any,
        num_packing_bins: int,
        seed: int = 0,
        shuffle_bins: bool = True,
        shuffle_bins_group_by_feature: str | None = None,
        meta_features: Sequence[str] = (),
        pack_alignment_struct: Any = None,
        padding_struct: Any = None,
        max_sequences_per_bin: int | None = None,
    ) -> None:
        super().__init__(parent)
        name = type(self).__name__
        self._spec = packing_checks.make_spec(
            name, length_struct, meta_features, pack_alignment_struct, padding_struct, nested=True
        )
        self._num_bins = packing_checks.check_count(name, "num_packing_bins", num_packing_bins)
        self._max_sequences = packing_checks.check_max_sequences(name, max_sequences_per_bin)
        packing_checks.check_group_by(name, shuffle_bins_group_by_feature, self._spec)
        self._group_by = shuffle_bins_group_by_feature
        self._seed = int(seed)
        self._shuffle = bool(shuffle_bins)

    def __iter__(self) -> PackDatasetIterator:
        return PackDatasetIterator(
            iter(self._parent),
            self._spec,
            self._num_bins,
            self._max_sequences,
            self._seed if self._shuffle else None,
            self._best_fit,
            self._group_by,
        )

    def __str__(self) -> str:
        return type(self).__name__


class FirstFitPackIterDataset(_PackIterDataset):
    """Packs each sequence into the first of ``num_packing_bins`` bins where it fits.

    Args:
      parent: an ``IterDataset`` of dicts of numpy arrays.
      length_struct: ``{feature: target length}``; features not listed (and not meta) are dropped.
      num_packing_bins: bins filled per round; more bins, less padding.
      seed: seeds the shuffle of each round's rows.
      shuffle_bins: shuffle each round's rows (Grain's default, True).
      shuffle_bins_group_by_feature: a feature of the rows (in ``length_struct`` or
        ``meta_features``); the shuffled rows of a round are then sorted by the mean of that
        feature's distinct non-zero values in each row.
      meta_features: features packed without segment ids and positions (when in
        ``length_struct``) or collected as a list per row (when not).
      pack_alignment_struct: ``{feature: alignment}``: each sequence starts at a multiple.
      padding_struct: ``{feature: value}`` written in the padding (0 by default).
      max_sequences_per_bin: at most this many sequences per row.
    """


class BestFitPackIterDataset(_PackIterDataset):
    """Packs each sequence into the bin with the least room left that still fits it.

    Takes the same arguments as :class:`FirstFitPackIterDataset`; "least room" is the room left
    summed over the packed features, and the first of equal bins wins.
    """

    _best_fit = True


class PackDatasetIterator(DatasetIterator):
    """Emits a round's rows one by one; builds the next round when they are gone."""

    def __init__(
        self,
        parent: DatasetIterator,
        spec: PackSpec,
        num_bins: int,
        max_sequences: int | None,
        seed: int | None,
        best_fit: bool,
        group_by: str | None = None,
    ) -> None:
        super().__init__(parent)
        self._group_by = group_by
        self._spec = spec
        self._num_bins = num_bins
        self._max_sequences = max_sequences
        self._seed = seed
        self._best_fit = best_fit
        self._round_state: Any = parent.get_state()  # the parent's state at the round's start
        self._carried: tuple[Any, Any] | None = None  # (state before, element) of the next round
        self._rows: list[Any] | None = None  # the current round (None: build on next call)
        self._next_row = 0
        self._counter = 0
        self._end_state: Any = None  # the parent's state at its end, once reached
        self._batch_bytes: int | None = None  # get_packed_batch_size_bytes, from the first round

    def __next__(self) -> Any:
        if self._rows is None:
            self._build_round()
        rows = self._rows
        assert rows is not None
        if self._next_row >= len(rows):
            raise StopIteration
        row = rows[self._next_row]
        self._next_row += 1
        self._counter += 1
        if self._next_row == len(rows):
            self._finish_round()
        return row

    def _finish_round(self) -> None:
        if self._carried is not None:
            self._round_state = self._carried[0]
        elif self._end_state is not None:
            self._round_state = self._end_state
        self._rows = None
        self._next_row = 0

    def _build_round(self) -> None:
        packing_checks.check_segmentable(self._spec)
        if self._end_state is not None and self._carried is None:
            self._rows = []
            return
        placed, self._carried, self._end_state = fill_round(
            self._parent,
            self._carried,
            self._spec,
            self._num_bins,
            self._max_sequences,
            self._best_fit,
        )
        if not placed.elements:
            self._rows = []
            return
        if self._batch_bytes is None:
            self._batch_bytes = round_buffer_bytes(self._spec, self._num_bins, placed.elements[0])
        rows = assemble_rows(self._spec, placed)
        if self._seed is not None:
            start = self._counter - self._next_row
            order = np.random.default_rng(self._seed + start).permutation(len(rows))
            if self._group_by is not None:  # by group value; equal values in random order
                values = np.array([_group_value(row[self._group_by]) for row in rows])
                order = np.lexsort((order, values))
            rows = [rows[i] for i in order.tolist()]
        self._rows = rows

    def get_packed_batch_size_bytes(self) -> int:
        """The bytes Grain's packer allocates for a round, as Grain reports them.

        Per packed feature: ``num_packing_bins`` rows of its target length in the dtype and
        trailing shape of the first sequence packed, two int32 rows (segment ids and positions)
        and one int64 fill position per bin (grainlite itself writes only a round's non-empty
        rows). Known once the first round has been packed (the first ``next()``, or a
        ``set_state`` into a round); a ValueError before.
        """
        if self._batch_bytes is None:
            raise GrainliteValueError(
                f"{type(self).__name__}.get_packed_batch_size_bytes: no round has been packed "
                "yet, so the size of its buffers is not known; call it after the first next()."
            )
        return self._batch_bytes

    def get_state(self) -> dict[str, Any]:
        """Grain's state: the parent at the round's start, the rows emitted from it, the total."""
        return {
            "parent": copy.deepcopy(self._round_state),
            "next_row": self._next_row,
            "counter": self._counter,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Moves to ``state``: the round is rebuilt from the parent and its first rows skipped."""
        packing_checks.check_state(type(self).__name__, state, ("parent", "next_row", "counter"))
        self._round_state = copy.deepcopy(state["parent"])
        self._parent.set_state(self._round_state)
        self._carried = None
        self._end_state = None
        self._batch_bytes = None
        self._counter = int(state["counter"])
        self._next_row = 0
        self._rows = None
        skip = int(state["next_row"])
        if skip:
            self._counter -= skip
            self._build_round()
            self._next_row = skip
            self._counter += skip
