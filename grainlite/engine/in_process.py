"""The in-process driver: a pipeline run in the calling thread (the DataLoader's
``worker_count=0``).

It offers the stream methods :class:`~grainlite.engine.iterator.IteratorShell` drives, like
:class:`~grainlite.engine.parent.WorkerStream`, with no process behind them: ``alive`` is always
False and :meth:`InProcessStream.restart` declines, so a move to a saved position closes this
stream and the next ``next()`` starts a new one there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grainlite.engine.position import IteratorPosition

if TYPE_CHECKING:
    from grainlite.engine.pipeline import WorkerPipeline
    from grainlite.stats.chain import ChainTimer
    from grainlite.stats.counters import ParentCounters


class InProcessStream:
    """Runs ``pipeline`` as its only worker (worker 0 of 1) in this thread, from
    ``position.states[0]``; ``timer`` is the pipeline's counters, ``counters`` the iterator's."""

    # No process to move: a new position needs a new stream (restart() says so).
    alive = False

    def __init__(
        self,
        pipeline: WorkerPipeline,
        position: IteratorPosition,
        timer: ChainTimer,
        counters: ParentCounters,
    ) -> None:
        self._state = position.states[0]
        self._elements = pipeline.iterate(0, 1, self._state, stats=timer)
        self._counters = counters
        self.next = self._first_next  # type: ignore[method-assign]  # then the plain next()

    def _first_next(self) -> Any:
        element = InProcessStream.next(self)
        del self.next  # the class's next() from now on: no check per element
        self._counters.first_element()
        return element

    def start(self) -> None:
        """Nothing to start: the pipeline runs at each ``next()``."""

    def next(self) -> Any:
        element, self._state = next(self._elements)
        return element

    def restart(self, position: IteratorPosition) -> bool:
        """Declines (False): the caller closes this stream and starts one at ``position``."""
        return False

    def position(self) -> IteratorPosition:
        return IteratorPosition([self._state], 0, [False])

    def close(self) -> None:
        """Closes the pipeline's generator (its reader threads stop)."""
        self._elements.close()
