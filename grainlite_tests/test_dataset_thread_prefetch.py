"""ThreadPrefetchIterDataset / ThreadPrefetchDatasetIterator: Grain's elements and states, the
read-ahead thread's lifetime, errors at their place."""

from __future__ import annotations

import gc
import threading
import time

import grain as real_grain
import pytest

import grainlite as grain
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step
from grainlite_tests.support.stream_checks import assert_matches_grain

pytestmark = pytest.mark.timeout(60)

THREAD_NAME = "grainlite-thread-prefetch"


def _prefetch_threads() -> int:
    return sum(t.name == THREAD_NAME for t in threading.enumerate())


def _wait_for_no_prefetch_threads(before: int) -> None:
    deadline = time.monotonic() + 5
    while _prefetch_threads() > before:
        assert time.monotonic() < deadline, "the read-ahead thread did not end"
        gc.collect()
        time.sleep(0.01)


@pytest.mark.parametrize("buffer_size", [0, 1, 3, 50])
def test_thread_prefetch_matches_grain_and_restores_both_ways(buffer_size):
    def build(lib):
        ds = lib.MapDataset.range(12).map(lambda x: x * 2).to_iter_dataset().batch(5)
        return iter(
            lib.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=buffer_size)
        )

    assert_matches_grain(build)


def test_thread_prefetch_iterator_over_an_iterator_matches_grain():
    def build(lib):
        parent = iter(lib.MapDataset.range(6).to_iter_dataset())
        return lib.experimental.ThreadPrefetchDatasetIterator(parent, 2)

    assert_matches_grain(build)


def test_thread_prefetch_resumes_at_every_step_with_a_filter_below():
    def make():
        ds = grain.MapDataset.range(30).to_iter_dataset().filter(lambda x: x % 3 != 0)
        return iter(grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=4))

    assert_dataset_resumes_at_every_step(make)


def test_an_error_reaches_the_consumer_at_its_place_with_the_state_before_it():
    def fails_on_two(x):
        if x == 2:
            raise KeyError("two")
        return x

    def observe(lib):
        ds = lib.MapDataset.range(5).to_iter_dataset().map(fails_on_two)
        iterator = iter(lib.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=2))
        seen = []
        while True:
            try:
                seen.append(next(iterator))
            except StopIteration:
                break
            except KeyError:
                seen.append(("error", iterator.get_state()))
        iterator.close()
        return seen

    # The state at the error is the one before the failed element (Grain's varies with timing).
    assert observe(grain) == [0, 1, ("error", {"next_index": 2}), 3, 4]
    assert [e for e in observe(real_grain) if not isinstance(e, tuple)] == [0, 1, 3, 4]


def test_the_read_ahead_thread_starts_at_first_next_and_ends_on_close():
    before = _prefetch_threads()
    ds = grain.experimental.ThreadPrefetchIterDataset(
        grain.MapDataset.range(1000).to_iter_dataset(), prefetch_buffer_size=2
    )
    iterator = iter(ds)
    assert _prefetch_threads() == before
    assert next(iterator) == 0
    assert _prefetch_threads() == before + 1
    iterator.close()
    assert _prefetch_threads() == before


def test_the_read_ahead_thread_ends_when_the_iterator_is_garbage_collected():
    before = _prefetch_threads()
    iterator = iter(
        grain.experimental.ThreadPrefetchIterDataset(
            grain.MapDataset.range(1000).to_iter_dataset(), prefetch_buffer_size=2
        )
    )
    next(iterator)
    assert _prefetch_threads() == before + 1
    del iterator
    _wait_for_no_prefetch_threads(before)


def test_a_zero_buffer_reads_in_the_consuming_thread():
    before = _prefetch_threads()
    ds = grain.experimental.ThreadPrefetchIterDataset(
        grain.MapDataset.range(5).to_iter_dataset(), prefetch_buffer_size=0
    )
    with iter(ds) as iterator:
        assert list(iterator) == [0, 1, 2, 3, 4]
        assert _prefetch_threads() == before


def test_a_negative_buffer_size_is_a_value_error():
    with pytest.raises(ValueError, match=r"prefetch_buffer_size must be >= 0 \(got -1\)"):
        grain.experimental.ThreadPrefetchIterDataset(
            grain.MapDataset.range(5).to_iter_dataset(), prefetch_buffer_size=-1
        )
