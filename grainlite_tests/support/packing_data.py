"""Token streams and checks shared by the packing tests (first fit, best fit, concat-then-split,
PackAndBatchOperation and the LLM pipeline).

Every token of sequence ``i`` is ``1000 * i + position`` (plus one in ``targets``), so a packed row
tells which sequence and which position each token came from; the invariant checks use that to
prove that no token is lost, duplicated or moved.
"""

from __future__ import annotations

import json
from collections import Counter
from types import ModuleType
from typing import Any

import numpy as np

from grainlite_tests.support.contracts import to_plain


def sequence(i: int, length: int, dtype: Any = np.int64) -> dict[str, np.ndarray]:
    """Sequence ``i``: ``inputs`` ``1000 * i + arange(length)`` and ``targets`` one more."""
    tokens = (np.arange(length) + 1000 * i).astype(dtype)
    return {"inputs": tokens, "targets": tokens + 1}


def stream(lib: ModuleType, lengths: list[int], dtype: Any = np.int64) -> Any:
    """``lib``'s ``IterDataset`` of the sequences with ``lengths`` (state ``next_index``)."""
    items = [sequence(i, n, dtype) for i, n in enumerate(lengths)]
    return lib.MapDataset.source(items).to_iter_dataset()


def json_round_trip(state: Any) -> Any:
    """A state as a checkpoint stores it (Grain's tuples become lists)."""
    return json.loads(json.dumps(state))


def run(iterator: Any) -> tuple[list[Any], list[Any]]:
    """Every element (comparable form) and the state before each and after the last."""
    elements, states = [], [json_round_trip(iterator.get_state())]
    for element in iterator:
        elements.append(to_plain(element))
        states.append(json_round_trip(iterator.get_state()))
    return elements, states


def tokens_of(rows: list[dict[str, np.ndarray]], feature: str) -> Counter[int]:
    """The non-padding tokens of ``feature`` in ``rows`` (segment id > 0), counted."""
    counts: Counter[int] = Counter()
    for row in rows:
        values = np.asarray(row[feature])[np.asarray(row[f"{feature}_segment_ids"]) > 0]
        counts.update(values.tolist())
    return counts


def assert_rows_are_consistent(
    rows: list[dict[str, np.ndarray]], feature: str, length: int
) -> None:
    """Rows of ``length`` tokens; within a row each segment is one sequence's consecutive tokens,
    its positions count from its first token, ids grow along the row (an empty sequence takes an
    id too, as in Grain), and padding is id 0 at position 0.
    """
    for row in rows:
        values = np.asarray(row[feature])
        ids = np.asarray(row[f"{feature}_segment_ids"])
        positions = np.asarray(row[f"{feature}_positions"])
        assert values.shape[0] == ids.shape[0] == positions.shape[0] == length
        assert ids.dtype == positions.dtype == np.int32
        assert (positions[ids == 0] == 0).all()
        segments = [s for s in dict.fromkeys(ids.tolist()) if s]
        assert segments == sorted(segments)
        for segment in segments:
            where = np.flatnonzero(ids == segment)
            tokens = values[where]
            assert (np.diff(tokens) == 1).all(), f"segment {segment} is not one sequence's run"
            assert (np.diff(positions[where]) == 1).all()
            assert len({int(t) // 1000 for t in tokens}) == 1
