"""Waiting for a worker that may be stuck: a log line first, then (if asked) an error.

A transform that hangs (a deadlock, a network read without a timeout) would otherwise hang
``next()`` with no sign of where. While the parent waits for worker ``w``:

- after :data:`grainlite.config.STALL_WARNING_S` seconds of silence it logs, once, which worker
  (and pid) is silent and where it stands in the stream, and asks the worker to print the Python
  stacks of all its threads to its standard error (SIGUSR1, handled by ``faulthandler``);
- after ``grain.config.update("worker_timeout_s", T)`` seconds (if set) it raises
  :class:`~grainlite.errors.WorkerTimeoutError` with the same facts; the iterator then stops.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable

from grainlite import config
from grainlite.errors import WorkerTimeoutError

LOGGER = logging.getLogger("grainlite")


class StackRequest(enum.Enum):
    """What came of asking a silent worker for its Python stacks."""

    ASKED = "asked"  # it prints them to its standard error (a Ray actor's: Ray's log)
    STARTING = "starting"  # not asked: it does not handle the signal yet, which would end it
    ENDED = "ended"  # not asked: its process has just ended (its end is reported next)
    UNREACHABLE = "unreachable"  # not asked: no way to reach it (Ray no longer connected)


# How each outcome reads in the warning (while waiting) and in the error (after the wait).
_SAYS = {
    StackRequest.ASKED: (
        "Its Python stacks are printed to its standard error.",
        "Its Python stacks were printed to its standard error.",
    ),
    StackRequest.STARTING: (
        "It is still starting (it does not yet handle the signal that asks for its stacks).",
        "It was still starting (it did not yet handle the signal that asks for its stacks).",
    ),
    StackRequest.ENDED: (
        "Its process has just ended, so it was not asked for its stacks.",
        "Its process had just ended, so it was not asked for its stacks.",
    ),
    StackRequest.UNREACHABLE: (
        "It could not be asked for its Python stacks.",
        "It could not be asked for its Python stacks.",
    ),
}


class StallWatch:
    """How long to wait for one worker's next message, and what to say when it is silent.

    Args:
      ready: ``ready(worker, seconds)`` is True once the worker has a message (or has ended).
      pid: the worker's process id.
      describe: where the worker stands, in words (e.g. the record its next element starts at).
      dump_stacks: asks the worker to print its threads' stacks (SIGUSR1 to a local process)
        and says what came of it (:class:`StackRequest`).
    """

    def __init__(
        self,
        ready: Callable[[int, float | None], bool],
        pid: Callable[[int], int],
        describe: Callable[[int], str],
        dump_stacks: Callable[[int], StackRequest],
    ) -> None:
        self._ready, self._pid, self._describe = ready, pid, describe
        self._dump_stacks = dump_stacks
        self.warning_s = config.STALL_WARNING_S
        self.timeout_s: float | None = config.get_or_default("worker_timeout_s")

    def wait(self, worker: int) -> None:
        """Returns once ``worker`` has a message; logs or raises while it is silent."""
        first = self.warning_s if self.timeout_s is None else min(self.warning_s, self.timeout_s)
        if self._ready(worker, first):
            return  # the common case: one select() with a timeout
        started = time.monotonic() - first
        warned = False
        request: StackRequest | None = None  # what came of asking for its stacks, once asked
        while True:
            silent = time.monotonic() - started
            if not warned and silent >= self.warning_s:
                request = self._warn(worker, silent)
                warned = True
            if self.timeout_s is not None and silent >= self.timeout_s:
                if request is not StackRequest.ASKED:  # not yet asked (or not reachable then)
                    request = self._dump_stacks(worker)
                stacks = _SAYS[request][1]
                raise WorkerTimeoutError(
                    f"Worker process {worker} (pid {self._pid(worker)}) sent nothing for "
                    f"{silent:.1f} s (grain.config worker_timeout_s={self.timeout_s:g}); it is "
                    f"making {self._describe(worker)}. {stacks} Fix the transform or source "
                    f"that hangs there, or raise worker_timeout_s if such an element really "
                    f"takes this long."
                )
            deadlines = [self.warning_s] if not warned else []
            if self.timeout_s is not None:
                deadlines.append(self.timeout_s)
            step = max(0.0, min(deadlines) - silent) if deadlines else None
            if self._ready(worker, step):
                return

    def _warn(self, worker: int, silent: float) -> StackRequest:
        """Logs that ``worker`` is silent and asks it for its stacks; what came of asking."""
        pid = self._pid(worker)
        request = self._dump_stacks(worker)
        stacks = _SAYS[request][0]
        LOGGER.warning(
            "grainlite: worker process %d (pid %d) has sent nothing for %.0f s; it is making %s. "
            "%s Set grain.config worker_timeout_s to raise instead of waiting.",
            worker,
            pid,
            silent,
            self._describe(worker),
            stacks,
        )
        return request
