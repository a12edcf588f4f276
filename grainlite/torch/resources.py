"""What one TorchDataLoader runs in the background: its DataLoader iterator and pinning thread.

:class:`Resources` has one owner, the loader, which closes it; a ``weakref.finalize`` on the loader
closes it as a backstop when the loader is garbage-collected or the interpreter exits. A SIGKILL
leaves no chance to run either: then the worker processes notice their parent is gone and exit by
themselves (see :mod:`grainlite.engine.child`).
"""

from __future__ import annotations

from typing import Any

from grainlite.engine.producer import Producer
from grainlite.errors import GrainliteRuntimeError
from grainlite.loader.data_loader import DataLoaderIterator
from grainlite.torch.plan import Plan
from grainlite.torch.tensors import to_tensors


class Resources:
    """The background parts one loader owns; closed by the loader or, as a backstop, by GC."""

    def __init__(self) -> None:
        self.iterator: DataLoaderIterator | None = None
        self.thread: Producer | None = None  # the pinning thread (torch.tensors.start_pinning)

    def stop_thread(self) -> None:
        """Stops the pinning thread, if any (the iterator and its workers stay)."""
        if self.thread is not None:
            self.thread.stop()
            self.thread = None

    def close(self) -> None:
        """Stops the pinning thread and the worker processes. Idempotent."""
        self.stop_thread()
        if self.iterator is not None:
            self.iterator.close()
            self.iterator = None


class Fetch:
    """One batch for the pinning thread; refers to the iterator, never to the loader."""

    def __init__(self, iterator: DataLoaderIterator, left: int | None, plan: Plan) -> None:
        self._iterator, self._left, self._plan = iterator, left, plan

    def __call__(self) -> tuple[Any, bytes | None]:
        """``(batch as tensors, Grain state after it or None)``; StopIteration at the epoch end."""
        if self._left is not None and self._left <= 0:
            raise StopIteration
        element = next_element(self._iterator, self._plan, self._left is not None)
        if self._left is not None:
            self._left -= 1
        state = self._iterator.get_state() if self._plan.settings.data_dependent else None
        return to_tensors(element), state


def next_element(iterator: DataLoaderIterator, plan: Plan, limited: bool) -> Any:
    """The iterator's next batch; if the data ends before ``batches_per_epoch``, says so."""
    try:
        return next(iterator)
    except StopIteration:
        if limited and plan.settings.data_dependent:
            raise GrainliteRuntimeError(
                f"TorchDataLoader: rank {plan.rank}'s data ran out before batches_per_epoch="
                f"{plan.batches_per_epoch} batches (its filters kept too few records this "
                f"epoch). Pass a smaller batches_per_epoch, so that every rank reaches it."
            ) from None
        raise
