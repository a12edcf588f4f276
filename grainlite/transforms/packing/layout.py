"""Turns one packing round (which sequence went to which bin, where) into packed rows, with numpy.

A packer decides, sequence by sequence, the bin and the offset of each sequence; this module then
writes the whole round at once. Per feature, the round's rows laid end to end are the sequences in
bin order with padding between them, so one ``np.concatenate`` of the sequences and of views of a
padding array writes every row (a copy at memory speed); ``*_positions`` and ``*_segment_ids``
come the same way from views of ``arange`` and zero arrays and from one ``np.repeat``. No Python
loop runs per token.

The layout follows Grain 0.2.18's packers (learned by running them): rows are the non-empty bins in
bin order; a packed feature ``f`` gives ``f`` (padded with the feature's padding value, 0 by
default), ``f_segment_ids`` (int32: the 1-based number of the sequence in its row, 0 in padding)
and ``f_positions`` (int32: the position inside the sequence, 0 in padding); a sequence meta
feature is packed and padded alone; a meta feature absent from ``length_struct`` becomes the list
of its values in the row, in packing order. The keys of a row are sorted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def non_sequence_meta_features(length_struct: Any, meta_features: Sequence[str]) -> list[str]:
    """The meta features a packer carries along instead of packing: those not in ``length_struct``.

    A packer's ``meta_features`` that are also keys of ``length_struct`` are packed like the other
    features (without ``*_segment_ids`` and ``*_positions``); the others are not packed: each row
    holds the list of their values, one per sequence in the row, in packing order. This tells
    which is which, e.g. to build the expected rows of a test.

    Args:
      length_struct: the packer's ``{feature: target length}`` (its top-level keys count).
      meta_features: the packer's ``meta_features``.

    Returns:
      The names of ``meta_features`` that are not keys of ``length_struct``, in their order.
    """
    keys = set(length_struct) if isinstance(length_struct, Mapping) else set()
    return [name for name in meta_features if name not in keys]


@dataclasses.dataclass(frozen=True)
class PackSpec:
    """What to pack: the packed features, their lengths, padding and alignment, and the metas."""

    features: tuple[str, ...]  # every key of length_struct, in its order
    lengths: tuple[int, ...]  # one target length per feature
    alignments: tuple[int, ...]  # one alignment per feature (1: none)
    padding: tuple[Any, ...]  # one padding value per feature
    sequence_metas: frozenset[str]  # packed without segment ids and positions
    other_metas: tuple[str, ...]  # meta features not in length_struct: lists per row
    # per feature, its keys below ``features[f]`` in a nested length_struct; () when all are flat
    paths: tuple[tuple[str, ...], ...] = ()
    unsegmented: str | None = None  # a nested feature that is not a meta feature (an error)


@dataclasses.dataclass
class Round:
    """One round's placements, in packing order: bin, per-feature offsets and lengths, number.

    ``general`` is set when some element's features are not all arrays with a sequence axis
    (scalars): the rows are then written from :func:`as_sequence` of each value.
    """

    elements: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)
    bins: list[int] = dataclasses.field(default_factory=list)
    offsets: list[list[int]] = dataclasses.field(default_factory=list)
    sizes: list[list[int]] = dataclasses.field(default_factory=list)
    segment_ids: list[int] = dataclasses.field(default_factory=list)
    general: bool = False


def is_scalar(value: Any) -> bool:
    """A number or a 0-d array: a packed feature of one token."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0
    return isinstance(value, int | float | complex | np.generic)


def as_sequence(value: Any) -> np.ndarray:
    """``value`` as an array with a sequence axis: a scalar becomes one token (a Python int an
    int64 one, as in Grain)."""
    if isinstance(value, np.ndarray) and value.ndim:
        return value
    if isinstance(value, int):
        return np.array([value], dtype=np.int64)
    return np.asarray(value).reshape(1)


def column_values(spec: PackSpec, element: Mapping[str, Any]) -> list[Any]:
    """The value of each packed feature of ``element``, in ``spec.features`` order."""
    values = [element[name] for name in spec.features]
    for f, path in enumerate(spec.paths):
        for key in path:
            values[f] = values[f][key]
    return values


def round_buffer_bytes(spec: PackSpec, num_bins: int, element: Mapping[str, Any]) -> int:
    """The bytes of Grain's packed buffers for one round of ``num_bins`` bins.

    Per packed feature: ``num_bins`` rows of its target length in the dtype and trailing shape
    of ``element``'s value, two int32 rows (segment ids, positions) and one int64 fill position
    per bin. This is Grain 0.2.18's ``get_packed_batch_size_bytes``.
    """
    total = 0
    for value, length in zip(column_values(spec, element), spec.lengths):
        sequence = as_sequence(value)
        token_bytes = sequence.itemsize * int(np.prod(sequence.shape[1:], dtype=np.int64))
        total += num_bins * (length * (token_bytes + 8) + 8)
    return total


def _column_key(spec: PackSpec, f: int) -> Any:
    """A packed feature's key among the columns: its name, or its path when nested."""
    if spec.paths and spec.paths[f]:
        return (spec.features[f], *spec.paths[f])
    return spec.features[f]


def _layout(
    order: list[int], bins: list[int], offsets: list[int], sizes: list[int], length: int
) -> tuple[list[tuple[int, int]], list[int]]:
    """The pieces of the rows laid end to end: ``(element or -1 for padding, size)`` each."""
    pieces: list[tuple[int, int]] = []
    cursor, current = 0, bins[order[0]]
    for i in order:
        if bins[i] != current:
            if cursor < length:
                pieces.append((-1, length - cursor))
            cursor, current = 0, bins[i]
        if offsets[i] > cursor:
            pieces.append((-1, offsets[i] - cursor))
        pieces.append((i, sizes[i]))
        cursor = offsets[i] + sizes[i]
    if cursor < length:
        pieces.append((-1, length - cursor))
    return pieces, [size for _, size in pieces]


def assemble_columns(spec: PackSpec, placed: Round) -> tuple[dict[Any, Any], int]:
    """The round's packed features, each an array of rows (non-empty bins in bin order), keyed by
    name (a nested feature's leaves: by their path, a tuple)."""
    bins = placed.bins
    order = sorted(range(len(bins)), key=bins.__getitem__)  # stable: packing order in a bin
    num_rows = len(set(bins))
    columns: dict[Any, Any] = {}
    pieces_of: dict[Any, tuple[list[tuple[int, int]], list[int]]] = {}
    layouts: dict[Any, tuple[Any, Any]] = {}
    for f, name in enumerate(spec.features):
        length = spec.lengths[f]
        offsets = [o[f] for o in placed.offsets]
        sizes = [s[f] for s in placed.sizes]
        key = (tuple(offsets), tuple(sizes), length)
        if key not in pieces_of:
            pieces_of[key] = _layout(order, bins, offsets, sizes, length)
        pieces, piece_sizes = pieces_of[key]
        arrays = [element[name] for element in placed.elements]
        for step in spec.paths[f] if spec.paths else ():
            arrays = [value[step] for value in arrays]
        if placed.general:
            arrays = [as_sequence(value) for value in arrays]
        first = arrays[0]
        pad = np.full((length, *first.shape[1:]), spec.padding[f], dtype=first.dtype)
        flat = np.concatenate(
            [arrays[i] if i >= 0 else pad[:size] for i, size in pieces],
            dtype=first.dtype,
            casting="unsafe",
        )
        columns[_column_key(spec, f)] = flat.reshape(num_rows, length, *first.shape[1:])
        if name in spec.sequence_metas:
            continue
        if key not in layouts:
            ramp = np.arange(length, dtype=np.int32)
            zeros = np.zeros(length, dtype=np.int32)
            positions = np.concatenate([ramp[:s] if i >= 0 else zeros[:s] for i, s in pieces])
            ids = [placed.segment_ids[i] if i >= 0 else 0 for i, _ in pieces]
            segments = np.repeat(np.asarray(ids, dtype=np.int32), piece_sizes)
            layouts[key] = positions.reshape(num_rows, length), segments.reshape(num_rows, length)
            columns[f"{name}_positions"], columns[f"{name}_segment_ids"] = layouts[key]
        else:  # the same layout as an earlier feature (inputs and targets): copy, never share
            columns[f"{name}_positions"] = layouts[key][0].copy()
            columns[f"{name}_segment_ids"] = layouts[key][1].copy()
    return columns, num_rows


def assemble_rows(spec: PackSpec, placed: Round) -> list[dict[str, Any]]:
    """The packed rows of one round, one per non-empty bin, in bin order."""
    columns, num_rows = assemble_columns(spec, placed)
    nested: dict[tuple[str, ...], Any] = {
        key: columns.pop(key) for key in list(columns) if isinstance(key, tuple)
    }
    bins = placed.bins
    keys = sorted({*columns, *spec.other_metas, *(key[0] for key in nested)})
    rows: list[dict[str, Any]] = [{} for _ in range(num_rows)]
    row_of_bin = {b: r for r, b in enumerate(sorted(set(bins)))}
    for name in spec.other_metas:
        per_row: list[list[Any]] = [[] for _ in range(num_rows)]
        for element, b in zip(placed.elements, bins):
            per_row[row_of_bin[b]].append(element[name])
        columns[name] = per_row
    for r, row in enumerate(rows):
        for key in keys:
            if key in columns:
                row[key] = columns[key][r]
            else:
                row[key] = _nested_row(key, nested, r)
    return rows


def _nested_row(name: str, nested: dict[tuple[str, ...], Any], r: int) -> dict[str, Any]:
    """Row ``r`` of the nested feature ``name``: a dict like the element's (keys sorted)."""
    tree: dict[str, Any] = {}
    for path, column in nested.items():  # paths come in sorted order (make_spec sorts them)
        if path[0] != name:
            continue
        inner = tree
        for step in path[1:-1]:
            inner = inner.setdefault(step, {})
        inner[path[-1]] = column[r]
    return tree
