"""What the worker engine expects of a pipeline: the contract both APIs implement.

:class:`~grainlite.engine.parent.WorkerStream` runs one pipeline object in W worker processes.
The DataLoader's is :class:`~grainlite.loader.pipeline.Pipeline`, the Dataset API's
(``mp_prefetch``) is :class:`~grainlite.dataset.mp.pipeline.DatasetPipeline`. Both derive from
:class:`PipelineBase`, which gives the optional hooks a default that does nothing, so the engine
calls every hook directly and never probes for one.

In the parent, the engine calls :meth:`~WorkerPipeline.pickled` once per start (the bytes go to
every worker), then :meth:`~WorkerPipeline.release_readers`; while a worker is silent it asks
:meth:`~WorkerPipeline.describe_position` for the stall report. In each worker it calls
:meth:`~WorkerPipeline.make_stats` once, then :meth:`~WorkerPipeline.iterate` from the worker's
state (again from the new state after each restart).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Protocol, runtime_checkable

_NO_POSITION = "the element after its last delivered one"


@runtime_checkable
class WorkerPipeline(Protocol):
    """A pipeline the worker engine can run: what :class:`PipelineBase`'s subclasses provide."""

    @property
    def batches_last(self) -> bool:
        """True when the last step stacks batches: the worker then passes ``allocate`` to
        :meth:`iterate`, so batches are built straight in shared memory."""
        ...

    def iterate(
        self,
        worker: int,
        workers: int,
        state: Any,
        allocate: Callable[..., Any] | None = None,
        stats: Any = None,
    ) -> Generator[tuple[Any, Any], None, None]:
        """Yields ``(element, state after it)`` for worker ``worker`` of ``workers`` from
        ``state``; an element may be a :class:`~grainlite.engine.failures.FailedElement`. A
        generator: closing it stops what the pipeline runs (reader threads).
        ``stats`` is what :meth:`make_stats` returned (passed only when that is not None)."""
        ...

    def pickled(self) -> bytes:
        """The pipeline pickled for the workers; if it cannot be, pickle's error with a note
        naming the part that cannot travel and the fix."""
        ...

    def release_readers(self) -> None:
        """Closes what only the workers read with (called in the parent after pickling)."""
        ...

    def describe_position(self, worker: int, workers: int, state: Any) -> str:
        """The element a worker at ``state`` makes next, in words (for stall reports)."""
        ...

    def make_stats(self) -> Any:
        """The counters :meth:`iterate` fills in a worker, or None for none."""
        ...


class PipelineBase:
    """The optional hooks of :class:`WorkerPipeline`, each doing nothing.

    A subclass provides ``batches_last``, ``iterate`` and ``pickled`` and overrides the hooks it
    needs. Holds no state, so a dataclass (frozen or not) may derive from it.
    """

    __slots__ = ()

    def release_readers(self) -> None:
        """Nothing to close."""

    def describe_position(self, worker: int, workers: int, state: Any) -> str:
        """Says no more than that the worker makes its next element."""
        return _NO_POSITION

    def make_stats(self) -> Any:
        """No counters: :meth:`iterate` gets no ``stats`` argument."""
        return None
