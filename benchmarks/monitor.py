"""Peak memory and CPU time of a whole process tree: this process and all its descendants.

A background thread samples the tree every ``interval`` seconds: RSS of every process (cheap,
from ``/proc/PID/statm``) each time, PSS (``/proc/PID/smaps_rollup``: shared pages are split
between the processes that map them, so a page shared by the parent and two workers counts
once in the sum) every ``pss_every``-th time, because reading it costs ~0.7 ms per process. The
thread's own CPU time is reported so it can be subtracted from the process's CPU time.

CPU time of the tree (user + system), from ``start()`` to ``cpu_seconds()``:

- this process: ``getrusage(RUSAGE_SELF)``, minus the sampling thread's own CPU time;
- children that exited and were reaped (joined) by then: ``getrusage(RUSAGE_CHILDREN)``, which
  the kernel adds to when a child is waited for (it also includes that child's own reaped
  descendants);
- children still alive at the end: their current ``cpu_times()`` (psutil), minus what they had
  at ``start()`` if they already existed.

So call ``cpu_seconds()`` after the loader's workers are joined; a child that exited but was not
reaped is counted by neither (the runner checks that none is left).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from typing import Any

import psutil


def tree_pids(root: int) -> list[int]:
    """``root`` and all its live descendants, from ``/proc/PID/task/TID/children``."""
    pids, queue = [], [root]
    while queue:
        pid = queue.pop()
        pids.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as children:
                    queue.extend(int(child) for child in children.read().split())
        except OSError:
            continue  # Exited while we looked.
    return pids


def _rusage_cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _children_cpu(pids: list[int]) -> dict[int, float]:
    times = {}
    for pid in pids:
        try:
            cpu = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        times[pid] = cpu.user + cpu.system
    return times


class TreeMonitor:
    """Samples the process tree of this process in a thread; use as a context manager."""

    def __init__(self, interval: float = 0.02, pss_every: int = 5) -> None:
        self.interval = interval
        self.pss_every = pss_every
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_processes = 0
        self._counted_processes = 0  # by count_processes(), in the caller's thread
        self.samples = 0
        self.thread_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-monitor", daemon=True)
        self._me = os.getpid()

    def start(self) -> TreeMonitor:
        """Takes the CPU baselines and starts sampling."""
        self._self_cpu0 = _rusage_cpu(resource.RUSAGE_SELF)
        self._reaped_cpu0 = _rusage_cpu(resource.RUSAGE_CHILDREN)
        self._alive_cpu0 = _children_cpu(tree_pids(self._me)[1:])
        self._sample(with_pss=True)
        self._thread.start()
        return self

    def _sample(self, with_pss: bool) -> None:
        rss = pss = 0
        pids = tree_pids(self._me)
        for pid in pids:
            try:
                process = psutil.Process(pid)
                rss += process.memory_info().rss
                if with_pss:
                    pss += process.memory_full_info().pss
            except psutil.Error:
                continue
        self.peak_rss = max(self.peak_rss, rss)
        if with_pss:
            self.peak_pss = max(self.peak_pss, pss)
        self.peak_processes = max(self.peak_processes, len(pids))
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample(with_pss=self.samples % self.pss_every == 0)
        self.thread_cpu = time.thread_time()

    def count_processes(self) -> None:
        """Counts the tree now, from the caller's thread: a moment when every process of the
        loader is known to be up (its first batch) is then counted in ``peak_processes`` even
        when the sampling thread, every ``interval`` s, misses it (a short run on a busy machine;
        a quick run's W=2 once showed 3 processes of 4)."""
        self._counted_processes = max(self._counted_processes, len(tree_pids(self._me)))

    def stop(self) -> None:
        """Stops sampling (one last sample first); safe to call twice."""
        if self._thread.is_alive():
            self._sample(with_pss=True)
            self._stop.set()
            self._thread.join()
        self.peak_processes = max(self.peak_processes, self._counted_processes)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time of the tree since ``start()``, split by where it was measured (see above)."""
        self.stop()
        alive = _children_cpu(tree_pids(self._me)[1:])
        own = _rusage_cpu(resource.RUSAGE_SELF) - self._self_cpu0 - self.thread_cpu
        reaped = _rusage_cpu(resource.RUSAGE_CHILDREN) - self._reaped_cpu0
        living = sum(cpu - self._alive_cpu0.get(pid, 0.0) for pid, cpu in alive.items())
        return {
            "self": own,
            "reaped_children": reaped,
            "live_children": living,
            "monitor_thread": self.thread_cpu,
            "total": own + reaped + living,
        }

    def __enter__(self) -> TreeMonitor:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
