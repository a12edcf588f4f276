"""A transformation that fails for one record of a ``MapDataset`` read through
``to_iter_dataset()`` (block reads): every good record is delivered once, the error is raised once
at its place and the stream goes on after it, in one process (W=0, reads in the consuming thread
or in reader threads) and under ``mp_prefetch`` (W=2); a state taken right after the error
resumes after it."""

from __future__ import annotations

import collections
import functools
import time
from typing import Any

import pytest

import grainlite as lite
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.options import MultiprocessingOptions

pytestmark = pytest.mark.timeout(120)

BAD = 500


def fails_at_500(x: int) -> int:
    if x == BAD:
        raise ValueError(f"record {x} is broken")
    return x


def slow_fails_at_500(x: int) -> int:
    time.sleep(0.0003)  # waits (releases the interpreter lock): reads move to reader threads
    return fails_at_500(x)


def logs_and_fails_at_500(x: int, log: str) -> int:
    """``fails_at_500``, appending ``x`` to the file ``log`` each time it is made."""
    with open(log, "a") as made:
        made.write(f"{x}\n")
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


def test_in_a_worker_the_records_before_an_error_in_its_block_are_made_once(tmp_path):
    # A worker hands out each element of a block as it is made: the error stops the block at
    # 500, and only 500 is made again (alone, to find whose error it is). Reads stay in the
    # worker's own thread (no reader threads), whatever the load of the machine.
    log = tmp_path / "made"
    transform = functools.partial(logs_and_fails_at_500, log=str(log))
    no_threads = lite.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    ds = MapDataset.range(1000).map(transform).to_iter_dataset(read_options=no_threads)
    with iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=1))) as iterator:
        got, errors, _ = skip_loop(iterator)
    assert errors == 1 and got == [x for x in range(1000) if x != BAD]
    made = collections.Counter(int(x) for x in log.read_text().split())
    assert sorted(made) == list(range(1000))
    twice = sorted(x for x, times in made.items() if times > 1)
    assert twice == [BAD], f"made more than once: {twice[:10]} ... ({len(twice)})"


def test_in_a_worker_an_error_in_a_node_that_reads_whole_blocks_is_found_and_the_rest_delivered():
    # concatenate reads its parent's block at once, so the error surfaces at its block's first
    # element; the worker reads that element alone, then the rest of the block as before.
    ds = MapDataset.concatenate([MapDataset.range(1000).map(fails_at_500)]).to_iter_dataset()
    with iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=1))) as iterator:
        got, errors, state = skip_loop(iterator)
    assert errors == 1 and got == [x for x in range(1000) if x != BAD]
    assert state is not None and state["iterators_in_use_states"] == [{"next_index": BAD + 1}]


class FailsWithoutMoving(IterDataset):
    """A user's node whose iterator raises at element 5 and never moves past it."""

    def __init__(self, parent: IterDataset) -> None:
        super().__init__(parent)

    def __iter__(self) -> DatasetIterator:
        return _FailsWithoutMovingIterator(self._parent.__iter__())


class _FailsWithoutMovingIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator) -> None:
        super().__init__(parent)
        self._peeked: Any = None

    def __next__(self) -> Any:
        if self._peeked is None:
            self._peeked = [next(self._parent)]
        if self._peeked[0] == 5:
            raise ValueError("record 5 is stuck")
        element, self._peeked = self._peeked[0], None
        return element

    def get_state(self) -> dict[str, Any]:
        return self._parent.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state)
        self._peeked = None


def test_a_worker_whose_iterator_cannot_move_past_an_error_says_so_with_it_never_silently():
    ds = FailsWithoutMoving(MapDataset.range(12).to_iter_dataset()).mp_prefetch(
        MultiprocessingOptions(num_workers=2)
    )
    got: list[int] = []
    notes: list[str] = []
    with iter(ds) as iterator:
        while True:
            try:
                got.append(next(iterator))
            except StopIteration:
                break
            except ValueError as error:
                assert str(error) == "record 5 is stuck"
                notes.extend(n for n in getattr(error, "__notes__", []) if "move past" in n)
    assert len(notes) == 1 and "worker 1 of 2 did not move past this error" in notes[0]
    assert sorted(got) == [0, 1, 2, 3, 4, 6, 8, 10]  # worker 1's share ends at 5, said so
