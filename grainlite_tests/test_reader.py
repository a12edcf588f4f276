"""The read stage: reads move to reader threads only when the source is slow, and the order and
content never depend on which thread read them."""

from __future__ import annotations

import threading
import time

import grainlite as grain


class SlowSource:
    """A source whose reads take 100 µs (like a file or network read) and record their thread."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.threads: set[str] = set()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        self.threads.add(threading.current_thread().name)
        time.sleep(100e-6)
        return key * 3


def _elements(source, read_options):
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(len(source), grain.NoSharding(), True, 1, seed=4),
        read_options=read_options,
    )
    return [int(x) for x in loader]


def test_slow_reads_move_to_reader_threads_and_keep_the_order():
    threaded, synchronous = SlowSource(1500), SlowSource(1500)
    got = _elements(threaded, grain.ReadOptions(num_threads=4, prefetch_buffer_size=64))
    expected = _elements(synchronous, grain.ReadOptions(num_threads=0))
    assert got == expected and sorted(got) == [3 * k for k in range(1500)]
    assert any(name.startswith("grainlite-reader") for name in threaded.threads)
    assert synchronous.threads == {threading.current_thread().name}


def test_a_short_stream_is_read_in_the_consuming_thread_even_with_threads_configured():
    source = SlowSource(100)
    got = _elements(source, grain.ReadOptions())
    assert got == _elements(SlowSource(100), grain.ReadOptions(num_threads=0))
    # Fewer records than the reader times before deciding: no thread was started for them.
    assert source.threads == {threading.current_thread().name}
