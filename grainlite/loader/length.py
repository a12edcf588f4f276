"""``len(loader)``: how many elements one full iteration of a DataLoader yields, when exact.

Each process (the caller with ``worker_count=0``, else each worker) reads its share of the host's
records (:class:`~grainlite.loader.striding.WorkerSlice`) and batches its own records, so the
count is the sum over processes of the share run through the operations: a Map or RandomMap keeps
the count, a Batch of size B makes ``n // B`` batches with ``drop_remainder`` and ``ceil(n / B)``
without. A Filter, FlatMap or custom operation makes the count depend on the data, and an endless
or length-less sampler has no count: those raise TypeError (what ``len()`` raises for an object
without a length), saying why.
"""

from __future__ import annotations

import sys
from typing import Any

from grainlite.errors import UnknownLengthError


def _records_per_process(pipeline: Any, worker_count: int) -> list[int]:
    sampler = pipeline.sampler
    if not hasattr(sampler, "__len__"):
        raise UnknownLengthError(
            f"len(loader) is unknown: the sampler ({type(sampler).__name__}) has no __len__, so "
            "the stream ends wherever the sampler raises IndexError. Give the sampler a __len__, "
            "or iterate without a total (e.g. tqdm(loader) with no total=)."
        )
    if getattr(sampler, "_num_epochs", 1) is None or len(sampler) >= sys.maxsize // 2:
        raise UnknownLengthError(
            "len(loader) is unknown: the sampler is endless (num_epochs=None). Pass "
            "IndexSampler(..., num_epochs=N) for N passes over the data, or iterate without a "
            "total."
        )
    processes = max(worker_count, 1)
    counts = []
    for worker in range(processes):
        positions = pipeline.worker_slice(worker, processes).positions()
        counts.append(0 if positions is None else positions)
    return counts


def loader_length(pipeline: Any, worker_count: int) -> int:
    """The exact element count of one iteration, or UnknownLengthError saying why there is none."""
    for i, (kind, op) in enumerate(pipeline.steps):
        if kind in ("filter", "flat_map", "operation"):
            raise UnknownLengthError(
                f"len(loader) is unknown: operations[{i}] ({type(op).__name__}) is a "
                f"{kind.replace('_', ' ')}, so how many elements come out depends on the data. "
                "Count one pass instead (sum(1 for _ in loader)), or iterate without a total."
            )
    total = 0
    for records in _records_per_process(pipeline, worker_count):
        count = records
        for kind, op in pipeline.steps:
            if kind == "batch":
                size = int(op.batch_size)
                count = count // size if op.drop_remainder else -(-count // size)
        total += count
    return total
