"""Ending a helper process when the process that started it dies.

A helper process (a worker, a shard writer) whose parent is killed with SIGKILL is adopted by
pid 1 and, waiting for work that never comes, lives on forever. :func:`exit_when_parent_dies`
applies one rule in the helper:

- on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the helper the moment its
  parent ends (no thread, no delay). The kernel sends it when the *thread* that started the
  helper ends, so start helpers from a thread that outlives them (the converter starts its
  shard writers from the thread that then waits for them);
- then a check that the parent is still ``parent_pid``: a parent that died before the
  ``prctl`` call (the helper was already adopted) would otherwise go unnoticed;
- where ``prctl`` is not available (macOS), a daemon thread that checks ``os.getppid()`` every
  ``interval_s`` seconds. Only there: a forked child that starts a thread can crash in native
  code whose state it copied from the parent (array_record's writer segfaults on close in a
  forked shard writer that runs a second thread, once the parent itself wrote a shard).

A leaf module: it imports nothing of grainlite, so every layer may use it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def ask_kernel_to_kill_on_parent_death() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` for this process; False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _exit_now(status: int) -> None:
    os._exit(status)


def _watch(parent_pid: int, exit: Callable[[int], None], interval_s: float) -> None:
    wake = threading.Event()
    while not wake.wait(interval_s):
        if os.getppid() != parent_pid:
            exit(1)
            return


def exit_when_parent_dies(
    parent_pid: int,
    exit: Callable[[int], None] = _exit_now,
    interval_s: float = 0.5,
) -> None:
    """Makes this process end when ``parent_pid`` (the process that started it) ends.

    Call it first thing in the helper, with the parent's pid passed from the parent (not read
    here: the parent may already be gone). ``exit(status)`` ends the process when the watch
    thread sees the parent gone; the default is ``os._exit`` (no cleanup: the parent's death
    already made the helper's work useless). It is called at once if the parent is already
    gone, and by the watch thread where the kernel cannot be asked (see the module docstring).
    """
    killed_by_kernel = ask_kernel_to_kill_on_parent_death()
    if os.getppid() != parent_pid:
        exit(1)
        return
    if killed_by_kernel:
        return
    threading.Thread(
        target=_watch, args=(parent_pid, exit, interval_s), name="parent-watch", daemon=True
    ).start()
