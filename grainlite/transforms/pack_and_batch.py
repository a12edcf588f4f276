"""Grain's ``PackAndBatchOperation``: first-fit packing into batches, for the DataLoader path.

A DataLoader ``operations=[...]`` entry (records in, records out). Each batch has
``batch_size`` rows; records go, in order, to the first row where every leaf still has room
(and fewer than ``max_sequences_per_bin`` sequences); the first record that fits no row closes the
batch and opens the next. The last batch is emitted at the end of the input. Learned by running
Grain 0.2.18:

* The output record's data is the tuple ``(data, segmentations, positions)``, three trees shaped
  like ``length_struct``: ``data`` leaves are ``(batch_size, length, ...)`` arrays of the input's
  dtype, zero-padded; ``segmentations`` (int32) number the records of a row from 1 (0 in padding);
  ``positions`` (int32) count within each record. Rows no record reached stay zero.
* The metadata is ``RecordMetadata(index=<the last record's index>, record_key=None, rng=None)``.
* A leaf longer than its length raises ``ValueError``.
* Each call logs a deprecation message at ERROR level (Grain's logs one too).

Grain deprecates this operation in favour of ``FirstFitPackIterDataset``; grainlite keeps it for
code that packs in a DataLoader, with the packing of :mod:`grainlite.dataset.experimental.packing`
(vectorised per batch). Unlike Grain's, the operation keeps no state on the object (Grain's
stores the batch in progress on it) and an empty input gives no batch (Grain's raises
AttributeError).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from grainlite import tree
from grainlite.errors import GrainliteValueError
from grainlite.sampling.records import Record, RecordMetadata
from grainlite.transforms.legacy import Operation
from grainlite.transforms.packing import checks as packing_checks
from grainlite.transforms.packing.fit import fill_round
from grainlite.transforms.packing.layout import PackSpec, assemble_columns

_LOGGER = logging.getLogger("grainlite")
_INDEX = "index"  # where a flattened record keeps its metadata's index (not a feature name)


def _leaves(structure: Any) -> list[tuple[tuple[Any, ...], Any]]:
    """The leaves of a tree with their paths, in JAX's order (dict keys sorted)."""
    return tree.leaves_with_paths(tree.map_leaves(lambda leaf: leaf, structure))


class _FlatRecords:
    """The records' leaves as ``{"0": leaf, "1": leaf, ...}`` dicts, for the packer's loop."""

    def __init__(self, records: Iterator[Any], lengths: list[tuple[tuple[Any, ...], int]]) -> None:
        self._records = records
        self._lengths = lengths

    def get_state(self) -> None:
        return None

    def __next__(self) -> dict[str, Any]:
        record = next(self._records)
        leaves = [np.asarray(leaf) for _, leaf in _leaves(record.data)]
        if len(leaves) != len(self._lengths):
            raise GrainliteValueError(
                f"PackAndBatchOperation: the record's data has {len(leaves)} leaves but "
                f"length_struct has {len(self._lengths)} ({record.data!r:.200}); give "
                "length_struct the structure of the records' data."
            )
        too_long = [
            f"{tree.format_path(path)} has {leaf.shape[0] if leaf.ndim else 1} (max {length})"
            for (path, length), leaf in zip(self._lengths, leaves)
            if leaf.ndim == 0 or leaf.shape[0] > length
        ]
        if too_long:
            raise GrainliteValueError(
                "Inputs to PackAndBatchOperation must be truncated to max length: "
                f"{', '.join(too_long)} (record {record.metadata.index}). Truncate each leaf to "
                "its length_struct entry in an earlier operation."
            )
        flat: dict[str, Any] = {str(i): leaf for i, leaf in enumerate(leaves)}
        flat[_INDEX] = record.metadata.index
        return flat


@dataclasses.dataclass
class PackAndBatchOperation(Operation):
    """Packs records into batches of ``batch_size`` rows (first fit), in a DataLoader.

    Attributes:
      length_struct: a tree shaped like the records' data, with the row length of each leaf.
      batch_size: rows per batch.
      max_sequences_per_bin: at most this many records per row (None: no limit).
    """

    length_struct: Any
    batch_size: int
    max_sequences_per_bin: int | None = None

    def __post_init__(self) -> None:
        owner = "PackAndBatchOperation"
        self.batch_size = packing_checks.check_count(owner, "batch_size", self.batch_size)
        if self.max_sequences_per_bin is not None:
            self.max_sequences_per_bin = packing_checks.check_count(
                owner, "max_sequences_per_bin", self.max_sequences_per_bin
            )

    def __call__(self, records: Iterator[Record]) -> Iterator[Record]:
        """Packs ``records`` (an iterator of Records) and yields one Record per batch."""
        _LOGGER.error(
            "PackAndBatchOperation is deprecated (in Grain too); use "
            "grain.experimental.FirstFitPackIterDataset in a Dataset pipeline instead."
        )
        lengths = _leaves(self.length_struct)
        structure = {str(i): length for i, (_, length) in enumerate(lengths)}
        spec = packing_checks.make_spec("PackAndBatchOperation", structure, (), None, None)
        flat = _FlatRecords(iter(records), lengths)
        carried = None
        while True:
            placed, carried, _ = fill_round(
                flat, carried, spec, self.batch_size, self.max_sequences_per_bin, False
            )
            if not placed.elements:
                return
            yield self._batch(spec, placed)
            if carried is None:
                return

    def _batch(self, spec: PackSpec, placed: Any) -> Record:
        columns, num_rows = assemble_columns(spec, placed)
        parts: list[list[Any]] = [[], [], []]
        for name in spec.features:
            for part, key in zip(parts, (name, f"{name}_segment_ids", f"{name}_positions")):
                column = columns[key]
                if num_rows < self.batch_size:
                    padded = np.zeros((self.batch_size, *column.shape[1:]), dtype=column.dtype)
                    padded[:num_rows] = column
                    column = padded
                part.append(column)
        trees = tuple(self._unflatten(part) for part in parts)
        index = placed.elements[-1][_INDEX]
        return Record(RecordMetadata(index=index, record_key=None, rng=None), trees)

    def _unflatten(self, leaves: list[Any]) -> Any:
        remaining = iter(leaves)
        return tree.map_leaves(lambda _: next(remaining), self.length_struct)
