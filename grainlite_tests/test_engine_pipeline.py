"""The engine runs any pipeline that keeps the written contract (engine/pipeline.py), nothing more.

A pipeline here provides only what :class:`~grainlite.engine.pipeline.WorkerPipeline` requires
(``batches_last``, ``iterate``, ``pickled``) and takes every optional hook from
:class:`~grainlite.engine.pipeline.PipelineBase`: real worker processes run it and the parent
merges their elements in Grain's order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from grainlite.dataset.mp.pipeline import DatasetPipeline
from grainlite.engine import pickling
from grainlite.engine.failures import FailedElement
from grainlite.engine.parent import WorkerStream
from grainlite.engine.pipeline import PipelineBase, WorkerPipeline
from grainlite.engine.position import IteratorPosition
from grainlite.loader.pipeline import Pipeline


class Squares(PipelineBase):
    """Worker ``w`` of ``W`` makes ``i * i`` for ``i = w, w + W, ...`` below ``stop``; the state
    after an element is the next ``i``. Record 5 fails, and the stream goes on after it."""

    batches_last = False

    def __init__(self, stop: int) -> None:
        self.stop = stop

    def iterate(
        self, worker: int, workers: int, state: Any, allocate: Any = None, stats: Any = None
    ) -> Iterator[tuple[Any, Any]]:
        for i in range(state, self.stop, workers):
            element = FailedElement(ValueError(f"record {i}")) if i == 5 else i * i
            yield element, i + workers

    def pickled(self) -> bytes:
        return pickling.dumps(self)


def test_a_pipeline_with_only_the_required_members_runs_in_worker_processes():
    pipeline = Squares(10)
    assert isinstance(pipeline, WorkerPipeline)
    stream = WorkerStream(pipeline, 2, IteratorPosition([0, 1], 0, [False, False]), buffer=2)
    out: list[Any] = []
    try:
        while True:
            try:
                element = stream.next()
            except StopIteration:
                break
            out.append(str(element.error) if isinstance(element, FailedElement) else element)
        assert stream.position() == IteratorPosition([10, 11], 0, [True, True])
    finally:
        stream.close()
    assert out == [0, 1, 4, 9, 16, "record 5", 36, 49, 64, 81]


def test_both_apis_pipelines_keep_the_contract():
    for cls in (Pipeline, DatasetPipeline):
        assert issubclass(cls, PipelineBase)
        for member in ("batches_last", "iterate", "pickled"):
            assert member in vars(cls), f"{cls.__name__} must define {member}"
