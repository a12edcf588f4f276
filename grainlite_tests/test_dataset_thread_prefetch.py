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
from grainlite_tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

THREAD_NAME = "grainlite-thread-prefetch"


def _prefetch_threads() -> int:
    return sum(t.name == THREAD_NAME for t in threading.enumerate())


def _wait_for_no_prefetch_threads(before: int) -> None:
    def ended() -> bool:
        gc.collect()
        return _prefetch_threads() <= before

    wait_for(ended, "the read-ahead thread ended", timeout=5)


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


def _endless_holes() -> grain.IterDataset:
    """A stream that never gives an element: an endless run of holes a filter left."""
    return grain.MapDataset.range(3).repeat().filter(lambda x: x > 3).to_iter_dataset()


def _returns_within(action, seconds: float) -> bool:
    """Runs ``action`` in a helper thread; whether it returned within ``seconds`` (a hang fails
    the test instead of holding it up)."""
    done = threading.Event()
    helper = threading.Thread(target=lambda: (action(), done.set()), daemon=True)
    helper.start()
    helper.join(seconds)
    return done.is_set()


def test_close_ends_the_thread_while_the_parent_skips_an_endless_run_of_holes():
    before = _prefetch_threads()
    iterator = iter(grain.experimental.multithread_prefetch(_endless_holes(), 1, 1))
    iterator.start_prefetch()
    time.sleep(0.2)  # the thread is inside the parent's next(), skipping holes
    assert _prefetch_threads() == before + 1
    assert _returns_within(iterator.close, 20), "close() waited for an element that never comes"
    assert _prefetch_threads() == before  # close() waited for the thread: nothing left


def test_a_collected_iterator_ends_its_thread_while_the_parent_skips_endless_holes():
    before = _prefetch_threads()
    iterator = iter(
        grain.experimental.ThreadPrefetchIterDataset(_endless_holes(), prefetch_buffer_size=1)
    )
    iterator.start_prefetch()
    time.sleep(0.2)
    del iterator
    _wait_for_no_prefetch_threads(before)


def test_closing_an_outer_thread_prefetch_ends_both_threads_over_endless_holes():
    before = _prefetch_threads()
    inner = grain.experimental.ThreadPrefetchIterDataset(_endless_holes(), prefetch_buffer_size=1)
    outer = grain.experimental.ThreadPrefetchIterDataset(inner, prefetch_buffer_size=1)
    iterator = iter(outer)
    iterator.start_prefetch()  # both threads: the outer one waits for the inner one
    time.sleep(0.2)
    assert _prefetch_threads() == before + 2
    assert _returns_within(iterator.close, 20), "close() waited for an element that never comes"
    assert _prefetch_threads() == before


def test_a_thread_stopped_among_holes_loses_no_element_of_a_batch_it_was_making():
    # Elements 0, 4000, 8000, ... in batches of 2, with long runs of holes between them: a
    # set_state() stops the thread wherever it is, perhaps holding half a batch; the stream
    # must go on from the state, whole.
    ds = grain.MapDataset.range(24000).filter(lambda x: x % 4000 == 0).to_iter_dataset()
    ds = grain.experimental.ThreadPrefetchIterDataset(ds.batch(2), prefetch_buffer_size=1)
    expected = [[0, 4000], [8000, 12000], [16000, 20000]]
    before = _prefetch_threads()
    for attempt in range(60):
        with iter(ds) as iterator:
            assert next(iterator).tolist() == expected[0]
            time.sleep(attempt % 6 * 0.0005)  # stops it at varying places among the holes
            iterator.set_state(iterator.get_state())
            assert [batch.tolist() for batch in iterator] == expected[1:]
    assert _prefetch_threads() == before


def test_a_zero_buffer_reads_in_the_consuming_thread():
    before = _prefetch_threads()
    ds = grain.experimental.ThreadPrefetchIterDataset(
        grain.MapDataset.range(5).to_iter_dataset(), prefetch_buffer_size=0
    )
    with iter(ds) as iterator:
        assert list(iterator) == [0, 1, 2, 3, 4]
        assert _prefetch_threads() == before


def test_a_negative_buffer_size_is_a_value_error_in_grains_words():
    with pytest.raises(
        ValueError, match=r"`prefetch_buffer_size` must be greater than or equal to 0, got -1;"
    ):
        grain.experimental.ThreadPrefetchIterDataset(
            grain.MapDataset.range(5).to_iter_dataset(), prefetch_buffer_size=-1
        )


class _CountUpTo:
    """A plain iterator (not a DatasetIterator) with Grain's get_state / set_state."""

    def __init__(self, stop: int) -> None:
        self.count, self.stop = 0, stop

    def __iter__(self) -> _CountUpTo:
        return self

    def __next__(self) -> int:
        if self.count >= self.stop:
            raise StopIteration
        self.count += 1
        return self.count

    def get_state(self) -> dict[str, int]:
        return {"count": self.count}

    def set_state(self, state: dict[str, int]) -> None:
        self.count = min(state["count"], self.stop)  # clamps a position past the end


def test_a_plain_iterator_with_states_is_read_ahead_whole_and_resumes_from_a_checkpoint():
    source = _CountUpTo(10)
    iterator = grain.experimental.ThreadPrefetchDatasetIterator(source, prefetch_buffer_size=4)
    first = [next(iterator) for _ in range(5)]
    checkpoint = iterator.get_state()
    assert checkpoint == {"count": 5}
    assert first + list(iterator) == list(range(1, 11))
    iterator.set_state(checkpoint)
    assert list(iterator) == list(range(6, 11))
    iterator.close()


def test_after_set_state_the_state_is_the_one_the_parent_keeps():
    iterator = grain.experimental.ThreadPrefetchDatasetIterator(_CountUpTo(10), 3)
    iterator.set_state({"count": 99})
    assert iterator.get_state() == {"count": 10}
    assert list(iterator) == []
    iterator.close()


@pytest.mark.parametrize("buffer_size", [0, 4])
def test_the_next_index_through_a_thread_prefetch_is_the_parents_at_the_last_element_given(
    buffer_size,
):
    batches = grain.MapDataset.range(40).to_iter_dataset().batch(2)
    ds = grain.experimental.ThreadPrefetchIterDataset(batches, prefetch_buffer_size=buffer_size)
    with iter(ds) as iterator:
        for expected in range(3):
            assert grain.experimental.get_next_index(iterator) == expected
            assert next(iterator).tolist() == [2 * expected, 2 * expected + 1]
        assert grain.experimental.get_next_index(iterator) == 3  # 3 batches, 6 elements
        assert next(iterator).tolist() == [6, 7]
        grain.experimental.set_next_index(iterator, 15)
        assert grain.experimental.get_next_index(iterator) == 15
        assert next(iterator).tolist() == [30, 31]
        assert iterator.get_state() == {"next_index": 32}


class _Counting(grain.IterDataset):
    """An IterDataset source of its own: nothing below it to share between threads."""

    def __iter__(self) -> grain.DatasetIterator:
        return grain.experimental.ThreadPrefetchDatasetIterator(_CountUpTo(5), 0)


def test_multithread_prefetch_refuses_several_threads_over_an_iter_source_as_grain_does():
    with pytest.raises(ValueError, match=r"Cannot slice `IterDataset` source: .*num_threads=1"):
        grain.experimental.multithread_prefetch(_Counting().map(str), num_threads=2, buffer_size=1)
    one = grain.experimental.multithread_prefetch(_Counting().map(str), 1, buffer_size=1)
    assert list(one) == ["1", "2", "3", "4", "5"]


def _interleaved_slices(elements: list[int], threads: int, sequential: bool) -> list[int]:
    """The expected order, computed on plain lists: thread t's slice of the indices (every T-th
    from t, or the t-th of T contiguous ranges of numpy.array_split's sizes), one element from
    each thread in turn, an exhausted thread skipped."""
    if sequential:
        base, extra = divmod(len(elements), threads)
        bounds = [t * base + min(t, extra) for t in range(threads + 1)]
        slices = [elements[bounds[t] : bounds[t + 1]] for t in range(threads)]
    else:
        slices = [elements[t::threads] for t in range(threads)]
    kept = [[x for x in part if x % 3 != 0] for part in slices]  # the pipeline's filter
    order: list[int] = []
    for k in range(max(map(len, kept))):
        order.extend(part[k] for part in kept if k < len(part))
    return order


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_multithread_prefetch_interleaves_one_slice_per_thread_as_grain_does(threads, sequential):
    def build(lib):
        ds = lib.MapDataset.range(3, 26, 1).to_iter_dataset().filter(lambda x: x % 3 != 0)
        mt = lib.experimental.multithread_prefetch(
            ds, num_threads=threads, buffer_size=2, sequential_slice=sequential
        )
        return iter(mt)

    before = _prefetch_threads()
    got, _ = assert_matches_grain(build)
    assert got == _interleaved_slices(list(range(3, 26)), threads, sequential)
    _wait_for_no_prefetch_threads(before)


def test_multithread_prefetch_resumes_at_every_step_and_close_ends_its_threads():
    def make():
        ds = grain.MapDataset.range(40).to_iter_dataset().filter(lambda x: x % 3 != 0)
        return iter(grain.experimental.multithread_prefetch(ds, 4, 3, sequential_slice=True))

    before = _prefetch_threads()
    assert_dataset_resumes_at_every_step(make)
    iterator = make()
    assert [next(iterator) for _ in range(4)] == [1, 10, 20, 31]
    assert _prefetch_threads() == before + 4  # one read-ahead thread per slice
    iterator.close()
    assert _prefetch_threads() == before


class _HoldsALock:
    """A transformation holding a lock, which cannot be copied."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, x: int) -> int:
        with self.lock:
            return x


def test_multithread_prefetch_names_a_part_that_cannot_be_copied_for_each_thread():
    ds = grain.MapDataset.range(8).to_iter_dataset().map(_HoldsALock())
    with pytest.raises(TypeError, match=r"copies the pipeline .*_thread\.lock.*num_threads=1"):
        grain.experimental.multithread_prefetch(ds, num_threads=2, buffer_size=1)
    one = grain.experimental.multithread_prefetch(ds, num_threads=1, buffer_size=1)
    assert list(one) == list(range(8))
