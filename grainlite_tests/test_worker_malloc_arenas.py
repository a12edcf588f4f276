"""A worker process caps glibc's malloc arenas (grainlite.engine.malloc.limit_arenas).

A transform starts threads that allocate at the same time, which makes glibc give them arenas of
their own, then counts the arenas of its process with glibc's ``malloc_info``. Without the cap
(the training process, or a worker whose environment sets ``MALLOC_ARENA_MAX``) there are more.
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
import threading

import pytest

import grainlite as grain
from grainlite.engine.malloc import WORKER_ARENAS

pytestmark = pytest.mark.timeout(120)

_THREADS = 8

try:
    _libc = ctypes.CDLL(None)
    _libc.malloc_info  # noqa: B018  (glibc only)
except (OSError, AttributeError):
    pytest.skip("needs glibc's malloc_info", allow_module_level=True)


def _arenas_after_threads_allocate() -> int:
    """Runs threads that each allocate and hold memory together; the arenas glibc has then."""
    start = threading.Barrier(_THREADS)
    done = threading.Barrier(_THREADS + 1)

    def allocate() -> None:
        start.wait()
        held = [bytearray(4096) for _ in range(2000)]
        done.wait()
        del held

    threads = [threading.Thread(target=allocate) for _ in range(_THREADS)]
    for thread in threads:
        thread.start()
    done.wait()
    for thread in threads:
        thread.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile(suffix=".xml") as report:
        stream = libc.fopen(report.name.encode(), b"w")
        assert libc.malloc_info(0, stream) == 0
        libc.fclose(stream)
        return len(re.findall(r"<heap nr=", open(report.name).read()))


class CountArenas(grain.MapTransform):
    def map(self, record: int) -> int:
        return _arenas_after_threads_allocate()


def _worker_arenas() -> int:
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 1, 1),
        sampler=grain.IndexSampler(1, grain.NoSharding(), num_epochs=1),
        operations=[CountArenas()],
        worker_count=1,
    )
    with iter(loader) as iterator:
        return int(next(iterator))


def test_a_worker_has_at_most_two_malloc_arenas_however_many_threads_allocate(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert _worker_arenas() <= WORKER_ARENAS == 2


def test_a_worker_keeps_the_arena_limit_its_environment_sets(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", str(_THREADS + 8))
    assert _worker_arenas() > WORKER_ARENAS


def test_the_training_process_keeps_glibcs_arenas():
    if "MALLOC_ARENA_MAX" in os.environ:
        pytest.skip("this process's environment sets MALLOC_ARENA_MAX")
    assert _arenas_after_threads_allocate() > WORKER_ARENAS
