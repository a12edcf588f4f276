"""Removes this process's shared memory when SIGTERM ends it.

SIGTERM is how Slurm, Kubernetes and ``docker stop`` end a job. Its default action kills the
process at once: no ``finally``, no ``atexit``, so segments would stay in ``/dev/shm`` until a
``python -m grainlite cleanup``. When grainlite creates the first segment this process owns, and
SIGTERM still has its default action, it installs a handler that removes this process's segment
names and then ends the process by SIGTERM's default action, as if the handler were not there (the
exit status still says "killed by SIGTERM"). A handler the program set itself is never replaced:
it decides what SIGTERM does (and a clean exit then runs grainlite's usual cleanup).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

_owned: dict[str, int] = {}  # segment name -> pid of the process that created it
_lock = threading.Lock()


def track(name: str, unlink: Callable[[str], None]) -> None:
    """Records that this process owns ``name``; installs the SIGTERM handler if it can."""
    with _lock:
        _owned[name] = os.getpid()
    _install(unlink)


def forget(name: str) -> None:
    """``name`` was removed (or handed to another owner)."""
    with _lock:
        _owned.pop(name, None)


def owned_names() -> list[str]:
    """The segment names this process created and has not removed."""
    pid = os.getpid()
    with _lock:
        return [name for name, owner in _owned.items() if owner == pid]


def _install(unlink: Callable[[str], None]) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _handler(unlink))


def _handler(unlink: Callable[[str], None]) -> Callable[[int, FrameType | None], None]:
    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        for name in owned_names():  # only this pid's: a forked child leaves the parent's alone
            with contextlib.suppress(OSError):
                unlink(name)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    return on_sigterm
