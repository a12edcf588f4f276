"""The per-sequence part of packing: choosing a bin for each sequence of one round.

This is the only loop of the packers that runs once per sequence, so it is kept tight: the room
left in every bin is a numpy array per feature, and a sequence's candidate bins come from one
comparison per feature over all bins at once (first fit: the first candidate; best fit: the
candidate with the least room left, summed over the features). Features with the same target
length and alignment whose sequences have had equal lengths so far (``inputs`` and ``targets``,
typically) have equal rooms, so one of them stands for the others in the comparison.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from grainlite.transforms.packing import checks as packing_checks
from grainlite.transforms.packing.layout import PackSpec, Round

_NO_FIT = np.iinfo(np.int64).max  # best fit's room for a bin the sequence does not fit


class Parent(Protocol):
    """What the packer reads: ``next()`` and ``get_state()`` (a ``DatasetIterator``)."""

    def __next__(self) -> Any: ...

    def get_state(self) -> Any: ...


def _groups(spec: PackSpec) -> list[list[int]]:
    """Feature indices grouped by (target length, alignment), in feature order."""
    groups: dict[tuple[int, int], list[int]] = {}
    for f, key in enumerate(zip(spec.lengths, spec.alignments)):
        groups.setdefault(key, []).append(f)
    return list(groups.values())


def fill_round(
    parent: Parent,
    carried: tuple[Any, Any] | None,
    spec: PackSpec,
    num_bins: int,
    limit: int | None,
    best_fit: bool,
) -> tuple[Round, tuple[Any, Any] | None, Any]:
    """Places sequences into ``num_bins`` bins until one fits none or the parent ends.

    Args:
      parent: the parent ``DatasetIterator`` (its state is taken before each pull).
      carried: ``(state before, element)`` left over from the last round, placed first.
      spec: the features and their targets.
      num_bins: bins of the round.
      limit: ``max_sequences_per_bin``, or None.
      best_fit: best fit instead of first fit.

    Returns:
      The placements; ``(state before, element)`` of the sequence that fitted no bin (None at
      the parent's end); and the parent's end state (None unless the parent ended).
    """
    capacities, alignments, names = spec.lengths, spec.alignments, spec.features
    nested = bool(spec.paths)
    features = range(len(capacities))
    groups = _groups(spec)
    search = [group[0] for group in groups]  # the features compared (one per equal group)
    twins = [(group[0], group[1:]) for group in groups if len(group) > 1]
    rooms = [np.full(num_bins, capacity, dtype=np.int64) for capacity in capacities]
    room_total = np.full(num_bins, sum(capacities), dtype=np.int64)
    used = [[0] * num_bins for _ in features]  # per feature, per bin: the aligned end
    counts = [0] * num_bins
    full = np.zeros(num_bins, dtype=bool)  # bins holding max_sequences_per_bin sequences
    placed = Round()
    get_state = parent.get_state
    while True:
        if carried is not None:
            pulled, carried = carried, None
        else:
            before = get_state()
            try:
                pulled = (before, next(parent))
            except StopIteration:
                return placed, None, before
        element = pulled[1]
        try:
            if nested:
                raise TypeError  # nested features: the general lookup
            sizes = [element[name].shape[0] for name in names]
        except (TypeError, AttributeError, IndexError, KeyError):
            # scalars (one token each), or the helpful error
            sizes = packing_checks.sequence_lengths(spec, element)
            placed.general = True
        for size, capacity in zip(sizes, capacities):
            if size > capacity:
                packing_checks.sequence_lengths(spec, element)  # raises the helpful error
        for first, others in twins:
            if any(sizes[f] != sizes[first] for f in others):
                search = list(features)  # rooms of this group may now differ
        fits = rooms[search[0]] >= sizes[search[0]]
        for f in search[1:]:
            fits &= rooms[f] >= sizes[f]
        if limit is not None:
            fits &= ~full
        if best_fit:
            target = int(np.where(fits, room_total, _NO_FIT).argmin())
        else:
            target = int(fits.argmax())
        if not fits[target]:
            return placed, pulled, None
        offsets = []
        for f in features:
            offset = used[f][target]
            end = offset + sizes[f]
            if alignments[f] > 1:
                end = -(-end // alignments[f]) * alignments[f]
            used[f][target] = end
            rooms[f][target] = capacities[f] - end
            offsets.append(offset)
        if best_fit:
            room_total[target] = sum(capacities[f] - used[f][target] for f in features)
        counts[target] += 1
        if limit is not None and counts[target] >= limit:
            full[target] = True
        placed.elements.append(element)
        placed.bins.append(target)
        placed.offsets.append(offsets)
        placed.sizes.append(sizes)
        placed.segment_ids.append(counts[target])
