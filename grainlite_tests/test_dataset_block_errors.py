"""A transformation that fails for one record of a ``MapDataset`` read through
``to_iter_dataset()`` (block reads): every good record is delivered once, the error is raised once
at its place and the stream goes on after it, in one process (W=0, reads in the consuming thread
or in reader threads) and under ``mp_prefetch`` (W=2); a state taken right after the error
resumes after it."""

from __future__ import annotations

import time
from typing import Any

import pytest

import grainlite as lite
from grainlite.dataset.base import MapDataset
from grainlite.loader.options import MultiprocessingOptions

pytestmark = pytest.mark.timeout(120)

BAD = 500


def fails_at_500(x: int) -> int:
    if x == BAD:
        raise ValueError(f"record {x} is broken")
    return x


def slow_fails_at_500(x: int) -> int:
    time.sleep(0.0003)  # waits (releases the interpreter lock): reads move to reader threads
    return fails_at_500(x)


def build(workers: int, transform: Any = fails_at_500, n: int = 1000) -> Any:
    ds = (
        MapDataset.range(n)
        .map(transform)
        .to_iter_dataset(read_options=lite.ReadOptions(num_threads=4, prefetch_buffer_size=64))
    )
    if workers:
        ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=workers))
    return ds


def skip_loop(iterator: Any) -> tuple[list[int], int, Any]:
    """The usual loop that skips failed records: (elements, errors, state after the error)."""
    got: list[int] = []
    errors, state_after_error = 0, None
    while True:
        try:
            got.append(next(iterator))
        except StopIteration:
            return got, errors, state_after_error
        except ValueError as error:
            assert str(error) == f"record {BAD} is broken"
            errors += 1
            assert errors == 1, "the same error was raised again"
            state_after_error = iterator.get_state()


@pytest.mark.parametrize("workers", [0, 2], ids=["W=0", "W=2"])
def test_every_good_record_is_delivered_once_and_the_error_once_at_its_place(workers):
    with iter(build(workers)) as iterator:
        got, errors, _ = skip_loop(iterator)
    assert errors == 1
    assert sorted(got) == [x for x in range(1000) if x != BAD]
    assert len(got) == len(set(got))
    if workers == 0:
        assert got == [x for x in range(1000) if x != BAD]  # in order, the error at 500's place


@pytest.mark.parametrize("workers", [0, 2], ids=["W=0", "W=2"])
def test_a_state_taken_right_after_the_error_resumes_after_it(workers):
    with iter(build(workers)) as first:
        delivered: list[int] = []
        while True:
            try:
                delivered.append(next(first))
            except ValueError:
                state = first.get_state()
                break
    if workers == 0:
        assert state == {"next_index": BAD + 1} and delivered == list(range(BAD))
    with iter(build(workers)) as resumed:
        resumed.set_state(state)
        rest, errors, _ = skip_loop(resumed)
    assert errors == 0, "the restored stream raised the error again"
    assert sorted(delivered + rest) == [x for x in range(1000) if x != BAD]


def test_reader_threads_deliver_every_good_record_around_the_error_and_go_on():
    iterator = iter(build(0, slow_fails_at_500, n=1500))
    threads_seen = False
    got: list[int] = []
    errors = 0
    while True:
        try:
            got.append(next(iterator))
        except StopIteration:
            break
        except ValueError:
            errors += 1
            assert iterator.get_state() == {"next_index": BAD + 1}
        threads_seen = threads_seen or bool(iterator.read_threads)
    iterator.close()
    assert threads_seen, "slow reads should have moved to reader threads"
    assert errors == 1
    assert got == [x for x in range(1500) if x != BAD]
