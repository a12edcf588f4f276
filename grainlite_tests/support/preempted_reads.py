"""A source whose reads run on the CPU and then lose time to other processes, as on a busy machine.

Both read-ahead policies (the DataLoader's reader and the Dataset API's ``to_iter_dataset``) time
a read by its running time: wall time less the thread's wait for a CPU
(``grainlite.cpus.cpu_wait_s``). The tests of both patch ``cpu_wait_s`` to add
:attr:`PreemptedReads.waited`, so the time a read sleeps here counts as time the kernel kept it
off a CPU. With a :class:`SimulatedClock` the reads cost nothing real: they move that clock
instead, so a test of the policy's arithmetic does not depend on the machine's load (a shared
VM's stolen time is in no clock the kernel gives a thread, and made such a test flaky).
"""

from __future__ import annotations

import threading
import time
from typing import Any


class SimulatedClock:
    """Wall and CPU clocks that move only by the cost :class:`PreemptedReads` gives its reads;
    patched over the ``time`` module (and the ``clock`` function) of the reader under test.
    Every other name is the real ``time`` module's."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def perf_counter(self) -> float:
        return self.wall

    def perf_counter_ns(self) -> int:
        return int(self.wall * 1e9)

    def thread_time(self) -> float:
        return self.cpu

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class PreemptedReads:
    """Records ``key * scale``; each read keeps the CPU busy for ``cpu_s`` (a decode), then sleeps
    ``lost_s`` and adds it to :attr:`waited`. :attr:`readers` names every thread that read."""

    def __init__(
        self,
        size: int,
        cpu_s: float,
        lost_s: float = 0.0,
        scale: int = 1,
        clock: SimulatedClock | None = None,
    ) -> None:
        self.size, self.cpu_s, self.lost_s, self.scale = size, cpu_s, lost_s, scale
        self.clock = clock
        self.waited = 0.0
        self.readers: set[str] = set()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        self.readers.add(threading.current_thread().name)
        if self.clock is not None:  # the same costs, on the simulated clocks
            self.clock.cpu += self.cpu_s
            self.clock.wall += self.cpu_s + self.lost_s
            self.waited += self.lost_s
            return key * self.scale
        end = time.thread_time() + self.cpu_s
        while time.thread_time() < end:
            pass
        if self.lost_s:
            begin = time.perf_counter()
            time.sleep(self.lost_s)
            self.waited += time.perf_counter() - begin
        return key * self.scale
