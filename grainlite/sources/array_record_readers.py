"""The readers one process of an ``ArrayRecordDataSource`` opens, and how it opens them.

Readers are never pickled or shared across a fork: a process that finds readers opened by
another pid opens its own. Each opens at its file's first read in the process, a local file's
directly. A remote file's reader reads its cached block (see
:mod:`grainlite.sources.remote.cache`), fetched first if needed and held by a pin while the reader
is open; reads in flight are counted per file, so that a process lets its idle blocks go when
another process of the host waits for room in the cache. Kept apart from the source so that its
module is about keys and reads, this one about the lifetime of readers and cached blocks.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from grainlite.sources.array_record_files import File, open_reader

_PRESSURE_CHECK_S = 0.2  # how often a remote source looks whether another process waits for room


class ProcessReaders:
    """The readers one process opened; a fork gets a new one instead of sharing the parent's.

    A remote file's reader reads its cached block, held (``pins``) while the reader is open;
    ``busy`` counts the reads in flight per file, so that idle ones can be let go when another
    process of the host waits for room in the cache."""

    def __init__(self, count: int) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.readers: list[Any] = [None] * count
        self.pins: list[Any] = [None] * count
        self.opening = [threading.Lock() for _ in range(count)]
        self.busy = [0] * count
        self.hinted = False
        self.watching = False
        self.firsts: list[Any] = [None] * count  # first copies: None untried, False not used
        self.copying = [threading.Lock() for _ in range(count)]  # each file's first copy

    def read_first(
        self, index: int, files: Sequence[File], shared: Any, cache: Any, positions: Any
    ) -> list[bytes] | None:
        """The records at ``positions`` of file ``index`` from its first copy
        (:mod:`grainlite.sources.remote.first_copies`); None where it cannot serve them all (they
        are then read from the block, as without copies). A copy serves every read it holds
        until the file's block is open here, then it is closed; it has its own lock, so a read
        waiting for the block (under the file's ``opening`` lock) holds up no read of the copy.
        """
        if self.firsts[index] is False:  # given up for good: no lock to take
            return None
        from grainlite.sources.remote import first_copies

        with self.copying[index]:
            copy = self.firsts[index]
            if copy is False:
                return None
            if self.readers[index] is not None:  # the block is open: the copy is done
                if copy is not None:
                    copy.close()
                self.firsts[index] = False
                return None
            if copy is None:
                blob = files[index].blob
                fd = None if cache.has_block(blob) else first_copies.open_copy(shared, index, blob)
                if fd is None:
                    self.firsts[index] = False
                    return None
                try:
                    copy = open_reader(f"/proc/self/fd/{fd}", first_copies.COPY_OPTIONS)
                except Exception:
                    self.firsts[index] = False
                    return None
                finally:
                    os.close(fd)
                self.firsts[index] = copy
            try:
                return [copy.read(p, p + 1)[0] for p in positions.tolist()]
            except RuntimeError:  # a chunk the copy does not hold: these are read from the block
                return None

    def reader(self, index: int, files: Sequence[File], options: str, cache: Any) -> Any:
        """The reader of file ``index`` of ``files``, opened with ``options`` at its first use
        (a remote file's on its block in ``cache``)."""
        reader = self.readers[index]
        if reader is None:
            # A remote file's open may wait for room in the cache, letting this process's idle
            # readers go meanwhile (under self.lock): it holds only its file's lock.
            if files[index].blob is None:
                with self.lock:
                    reader = self.readers[index]
                    if reader is None:
                        reader = self.readers[index] = open_reader(files[index].path, options)
                return reader
            with self.opening[index]:
                reader = self.readers[index]
                if reader is None:
                    reader = self._open_remote(index, files, options, cache)
                    with self.lock:
                        self.readers[index] = reader
        return reader

    def _open_remote(self, index: int, files: Sequence[File], options: str, cache: Any) -> Any:
        """A reader of remote file ``index`` on its cached block (fetched first if needed), held
        while the reader is open."""
        file = files[index]
        assert cache is not None and file.blob is not None
        if not self.hinted:  # no read-ahead hint came first: fetch every file, in key order
            self.hinted = True
            for other in files:
                if other.blob is not None:
                    cache.fetch_ahead(other.blob)
        self.watch(cache)
        pin = cache.acquire(file.blob, on_wait=self.let_idle_go)
        try:
            reader = open_reader(str(pin.path), options, name=file.path)
        except BaseException:
            pin.release()
            raise
        with self.lock:
            self.pins[index] = pin
        return reader

    @contextlib.contextmanager
    def busy_while(self, index: int) -> Iterator[None]:
        """Counts file ``index`` busy while the block runs, so that its block is not let go."""
        with self.lock:
            self.busy[index] += 1
        try:
            yield
        finally:
            with self.lock:
                self.busy[index] -= 1

    def close(self) -> None:
        """Closes these readers and releases their blocks, in the process that opened them."""
        if self.pid == os.getpid():
            for copy in self.firsts:
                if copy:
                    copy.close()
            for reader in self.readers:
                if reader is not None:
                    reader.close()
            for pin in self.pins:
                if pin is not None:
                    pin.release()

    def let_idle_go(self) -> None:
        """Closes the readers of remote files that no read uses now, letting their cached blocks
        go: another process of the host waits for room in the cache."""
        with self.lock:
            for index, pin in enumerate(self.pins):
                if pin is not None and self.busy[index] == 0:
                    reader, self.readers[index] = self.readers[index], None
                    if reader is not None:
                        reader.close()
                    pin.release()
                    self.pins[index] = None

    def watch(self, cache: Any) -> None:
        """Starts a daemon thread that lets idle blocks go whenever a process of the host waits
        for room, so a process that holds blocks and reads no more (done, or waiting on its
        consumer) never holds up the others. It ends when these readers are collected."""
        if self.watching:
            return
        self.watching = True
        threading.Thread(
            target=_watch_pressure,
            args=(weakref.ref(self), cache),
            daemon=True,
            name="grainlite-cache-watch",
        ).start()


def _watch_pressure(state_ref: Any, cache: Any) -> None:
    while True:
        time.sleep(_PRESSURE_CHECK_S)
        state = state_ref()
        if state is None or state.pid != os.getpid():
            return
        if cache.under_pressure():
            state.let_idle_go()
        del state
