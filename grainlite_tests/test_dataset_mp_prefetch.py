"""``IterDataset.mp_prefetch`` on grainlite's worker engine: Grain's elements, order and states,
restores both ways, the worker slicing rules, errors from workers, and every exit path leak-free.

Grain is imported lazily (the ``real_grain`` fixture): the worker processes import this module to
find its transforms, and must not import Grain (nor absl, nor JAX) by doing so.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref
from typing import Any

import numpy as np
import pytest
from leak_check import alive, live_children

import grainlite as lite
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.mp.pipeline import DatasetPipeline
from grainlite.dataset.mp.prefetch import MultiprocessPrefetchDatasetIterator
from grainlite.options import MultiprocessingOptions
from grainlite.transforms.batch import make_batch
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, to_plain
from grainlite_tests.support.waiting import assert_gone

pytestmark = pytest.mark.timeout(120)


def options(workers: int, buffer: int = 1) -> MultiprocessingOptions:
    return MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)


# Transforms the workers run (module level: Grain's workers import them by name) -----------------
def times_ten(x: Any) -> Any:
    return x * 10


def fails_at_five(x: int) -> int:
    if x == 5:
        raise KeyError(f"no record {x}")
    return x


def sleeps_long(x: int) -> int:
    if x >= 1:
        time.sleep(60)  # only ever interrupted: the test ends the workers first
    return x


def spins_at_three(x: int) -> int:
    while x == 3:  # never returns, never reads the Stop message: only a kill ends it
        pass
    return x


GATE_AT = 40  # the element that waits for the test's gate (not the first of a block read)


def waits_for_the_gate(x: int, gate: str) -> int:
    """``x``; the element ``GATE_AT`` waits until the file ``gate`` exists (the test makes it
    once it holds every element before), and is -1 if that never happened within 30 s."""
    if x == GATE_AT:
        deadline = time.monotonic() + 30
        while not os.path.exists(gate):
            if time.monotonic() > deadline:
                return -1
            time.sleep(0.01)
    return x


class CountsItsReads:
    """A source with a batched read (``__getitems__``, as ArrayRecord's) that appends the number
    of keys of each read to the file ``log`` (from whichever process reads)."""

    def __init__(self, n: int, log: str) -> None:
        self.n, self.log = n, log

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: int) -> int:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list[int]) -> list[int]:
        with open(self.log, "a") as log:
            log.write(f"{len(keys)}\n")
        return list(keys)


class CountUp(IterDataset):
    """A user's source: an ``IterDataset`` with no ``MapDataset`` below it."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def __iter__(self) -> DatasetIterator:
        return CountUpIterator(self.n)


class CountUpIterator(DatasetIterator):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.i, self.n = 0, n

    def __next__(self) -> int:
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i - 1

    def get_state(self) -> dict[str, Any]:
        return {"i": self.i}

    def set_state(self, state: dict[str, Any]) -> None:
        self.i = state["i"]


class PlusHundred(IterDataset):
    """A user's node over another ``IterDataset``, keeping its parent under its own name."""

    def __init__(self, parent: IterDataset) -> None:
        super().__init__(parent)
        self.mine = parent

    def __iter__(self) -> DatasetIterator:
        return PlusHundredIterator(self.mine.__iter__())


class PlusHundredIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator) -> None:
        super().__init__(parent)

    def __next__(self) -> int:
        return next(self._parent) + 100

    def get_state(self) -> dict[str, Any]:
        return self._parent.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state)


# Helpers ----------------------------------------------------------------------------------------
@pytest.fixture
def real_grain() -> Any:
    """The installed Grain, with the absl flags its mp_prefetch needs (its bug #1355)."""
    import grain
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    return grain


def run(iterator: Any) -> tuple[list[Any], list[Any]]:
    """Elements, and the state before each element, after the last and after StopIteration."""
    elements, states = [], [iterator.get_state()]
    try:
        for element in iterator:
            elements.append(to_plain(element))
            states.append(iterator.get_state())
        states.append(iterator.get_state())
    finally:
        iterator.close()
    return elements, states


def seven(lib: Any) -> Any:
    return lib.MapDataset.range(7).to_iter_dataset().map(times_ten)


def close_grain(iterator: Any) -> None:
    iterator.close()
    del iterator
    gc.collect()


# Grain's elements and states ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("workers", "length", "sequential"),
    [(1, 7, False), (2, 7, False), (3, 8, False), (3, 7, True)],
    ids=["1-worker", "2-workers", "3-workers-last-one-short", "3-workers-sequential"],
)
def test_elements_and_every_state_match_grain(real_grain, workers, length, sequential):
    def build(lib: Any) -> Any:
        ds = lib.MapDataset.range(length).to_iter_dataset().map(times_ten)
        return ds.mp_prefetch(
            lib.MultiprocessingOptions(num_workers=workers), sequential_slice=sequential
        )

    grain_it = iter(build(real_grain))
    expected = run(grain_it)
    close_grain(grain_it)
    assert run(iter(build(lite))) == expected


def test_a_state_saved_by_grain_restores_here_and_ours_restores_in_grain(real_grain):
    grain_ds = seven(real_grain).mp_prefetch(real_grain.MultiprocessingOptions(num_workers=2))
    ours = seven(lite).mp_prefetch(options(2))
    grain_it = iter(grain_ds)
    for _ in range(3):
        next(grain_it)
    grain_state = grain_it.get_state()
    expected_rest = list(grain_it)
    close_grain(grain_it)
    with iter(ours) as it:
        it.set_state(json.loads(json.dumps(grain_state)))
        assert list(it) == expected_rest == [30, 40, 50, 60]
    with iter(ours) as it:
        for _ in range(4):
            next(it)
        our_state = it.get_state()
    grain_it = iter(grain_ds)
    grain_it.set_state(json.loads(json.dumps(our_state)))
    assert list(grain_it) == [40, 50, 60]
    close_grain(grain_it)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_resumes_at_every_step(workers):
    ds = MapDataset.range(8).to_iter_dataset().map(times_ten).mp_prefetch(options(workers))
    # Fresh iterators (new processes each) restore at two positions; the same running iterator
    # is moved to every position in turn.
    assert_dataset_resumes_at_every_step(lambda: iter(ds), steps=[0, 5])


def test_uneven_shares_interleave_round_robin_skipping_finished_workers():
    ds = MapDataset.range(8).to_iter_dataset().mp_prefetch(options(3), sequential_slice=True)
    # Shares [0, 1, 2], [3, 4, 5], [6, 7]: the third worker finishes first.
    assert list(iter(ds)) == [0, 3, 6, 1, 4, 7, 2, 5]


def test_set_state_on_a_running_iterator_moves_the_same_worker_processes():
    ds = MapDataset.range(9).to_iter_dataset().mp_prefetch(options(2))
    with iter(ds) as it:
        assert isinstance(it, MultiprocessPrefetchDatasetIterator)
        first = [next(it) for _ in range(3)]
        saved = it.get_state()
        pids = it._stream.pids()
        assert [next(it) for _ in range(4)] == [3, 4, 5, 6]
        it.set_state(saved)
        assert next(it) == 3
        assert it._stream.pids() == pids
        assert list(it) == [4, 5, 6, 7, 8]
        assert first == [0, 1, 2]


def test_a_state_with_another_worker_count_is_refused_naming_both_counts():
    state = iter(MapDataset.range(4).to_iter_dataset().mp_prefetch(options(2))).get_state()
    it = iter(MapDataset.range(4).to_iter_dataset().mp_prefetch(options(3)))
    with pytest.raises(ValueError) as raised:
        it.set_state(state)
    assert str(raised.value) == (
        "The mp_prefetch state holds 2 worker states, this iterator has 3 workers; restore it "
        "with MultiprocessingOptions(num_workers=2), the worker count it was saved with."
    )


# Slicing rules -----------------------------------------------------------------------------------
@pytest.mark.parametrize("sequential", [False, True], ids=["strided", "sequential"])
@pytest.mark.parametrize("workers", [2, 3])
def test_batch_with_drop_remainder_before_mp_prefetch_gives_one_workers_batches(
    workers, sequential
):
    # Grain's workers each drop a partial batch here and lose elements (google/grain#1129).
    ds = MapDataset.range(10).to_iter_dataset().map(times_ten).batch(3, drop_remainder=True)
    expected = [to_plain(b) for b in ds]
    assert expected == [to_plain(np.array(v)) for v in ([0, 10, 20], [30, 40, 50], [60, 70, 80])]
    got = [to_plain(b) for b in ds.mp_prefetch(options(workers), sequential_slice=sequential)]
    if sequential:
        got.sort(key=repr)
        expected.sort(key=repr)
    assert got == expected


@pytest.mark.usefixtures("as_a_worker")
def test_a_last_batch_stacks_straight_into_the_workers_shared_memory():
    allocated: list[tuple[tuple[int, ...], np.dtype]] = []

    def allocate(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        allocated.append((shape, np.dtype(dtype)))
        return np.empty(shape, dtype)

    pipeline = DatasetPipeline(arrays(5).batch(2))
    assert pipeline.batches_last
    assert not DatasetPipeline(arrays(5).batch(2, batch_fn=list)).batches_last
    assert not DatasetPipeline(arrays(5).batch(2).map(times_ten)).batches_last
    batches = [batch for batch, _ in pipeline.iterate(0, 1, None, allocate)]
    assert allocated == [((2, 1000), np.dtype(np.int64))] * 2 + [((1, 1000), np.dtype(np.int64))]
    assert [batch[:, 0].tolist() for batch in batches] == [[0, 1], [2, 3], [4]]


def picture(x: int) -> dict[str, Any]:
    """A 24 KiB element (large enough for rows filled one by one) with a scalar label."""
    return {"label": np.int32(x), "pixels": np.full((32, 32, 3), x, np.float64) + np.arange(3)}


def odd_one_at_seven(x: int) -> dict[str, Any]:
    element = picture(x)
    if x == 7:
        element["pixels"] = element["pixels"][:16]  # cannot be stacked with the others
    return element


@pytest.fixture
def as_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undoes, after the test, what ``DatasetPipeline.iterate`` declares about this process
    when a test runs it here, as in a worker (its share of the CPUs, streamed blocks)."""
    from grainlite.dataset import reading_process

    monkeypatch.setattr(reading_process, "_cpus_for_reads", reading_process._cpus_for_reads)
    monkeypatch.setattr(reading_process, "_workers_sharing", reading_process._workers_sharing)
    monkeypatch.setattr(reading_process, "_streaming", reading_process._streaming)


@pytest.mark.usefixtures("as_a_worker")
def test_a_map_dataset_batch_read_last_fills_rows_in_shared_memory_when_sent():
    allocated: list[np.ndarray] = []

    def allocate(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        allocated.append(np.empty(shape, dtype))
        return allocated[-1]

    dataset = MapDataset.range(7).map(picture).batch(3).to_iter_dataset()
    expected = list(dataset)
    pipeline = DatasetPipeline(dataset)
    assert pipeline.batches_last
    assert not DatasetPipeline(MapDataset.range(7).map(picture).batch(3, batch_fn=list)
                               .to_iter_dataset()).batches_last  # fmt: skip
    assert not DatasetPipeline(MapDataset.range(7).map(picture).batch(3).map(times_ten)
                               .to_iter_dataset()).batches_last  # fmt: skip
    got = []
    for batch, _ in pipeline.iterate(1, 2, None, allocate):  # worker 1 of 2: batches 1
        got.append(batch)
        assert len(allocated) == 2 * len(got)  # both leaves of this batch, allocated just now
        for name in ("label", "pixels"):
            assert any(np.shares_memory(batch[name], buffer) for buffer in allocated[-2:])
    assert [to_plain(b) for b in got] == [to_plain(expected[1])]
    assert list(got[0]) == list(expected[1]) == ["label", "pixels"]
    assert got[0]["label"].dtype == expected[1]["label"].dtype


def _batched(dataset: MapDataset, kind: str, batch_fn: Any = None) -> IterDataset:
    """``dataset`` batched by 4: a ``MapDataset.batch`` read by ``to_iter_dataset()``, or an
    ``IterDataset.batch`` after it."""
    if kind == "map":
        return dataset.batch(4, batch_fn=batch_fn).to_iter_dataset()
    return dataset.to_iter_dataset().batch(4, batch_fn=batch_fn)


def _batches_or_error(dataset: IterDataset) -> list[Any]:
    """The batches, in plain form, up to the first ValueError (its message last)."""
    out: list[Any] = []
    with iter(dataset) as iterator:
        while True:
            try:
                out.append(to_plain(next(iterator)))
            except StopIteration:
                return out
            except ValueError as error:
                return [*out, str(error)]


@pytest.mark.parametrize("kind", ["map", "iter"])
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.usefixtures("as_a_worker")
def test_batches_filled_in_the_workers_equal_stacking_and_fail_alike(workers, kind):
    # Against the same batches stacked by a batch_fn of the user's (never filled in rows).
    for make in (picture, odd_one_at_seven):
        source = MapDataset.range(11).shuffle(seed=3).map(make)
        filled = _batched(source, kind).mp_prefetch(options(workers))
        stacked = _batched(source, kind, make_batch).mp_prefetch(options(workers))
        got = _batches_or_error(filled)
        assert got == _batches_or_error(stacked)
        assert isinstance(got[-1], str) == (make is odd_one_at_seven)
    if kind == "map":  # a MapDataset.batch's batches are the same in one process
        odd = _batched(MapDataset.range(11).map(odd_one_at_seven), kind)
        with pytest.raises(ValueError) as in_process:
            list(odd)
        assert _batches_or_error(odd.mp_prefetch(options(workers)))[-1] == str(in_process.value)


def picture_and_malloc(x: int) -> dict[str, Any]:
    """:func:`picture`, with whether this process keeps freed memory (grainlite.engine.malloc)."""
    from grainlite.engine import malloc

    return {**picture(x), "kept": np.int8(-1 if malloc._kept is None else malloc._kept)}


def small_and_malloc(x: int) -> dict[str, Any]:
    from grainlite.engine import malloc

    return {"x": np.int64(x), "kept": np.int8(-1 if malloc._kept is None else malloc._kept)}


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallopt")
def test_only_workers_that_free_whole_batches_of_large_elements_change_malloc_settings():
    def kept(transform: Any) -> list[int]:
        dataset = MapDataset.range(8).map(transform).batch(2).to_iter_dataset()
        return [int(k) for batch in dataset.mp_prefetch(options(1)) for k in batch["kept"]]

    # A worker that copies each large element into its row as it is made frees the elements
    # one by one, as one that stacks small elements does: neither asks. (Only a batch read
    # ahead, by reader threads, and filled when sent frees its elements together.)
    assert kept(picture_and_malloc) == [-1] * 8
    assert kept(small_and_malloc) == [-1] * 8


_PICTURES_MADE: list[weakref.ref] = []


def picture_and_company(x: int) -> dict[str, Any]:
    """:func:`picture`, with how many pictures made before it in this process are still held."""
    held = sum(made() is not None for made in _PICTURES_MADE)
    element = picture(x)
    _PICTURES_MADE.append(weakref.ref(element["pixels"]))
    return {**element, "held": np.int64(held)}


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_a_worker_copies_each_element_of_a_batch_into_its_row_as_it_is_made(kind):
    # Batches of 8 large elements: stacking at the end held 7 when the 8th was made; filled row
    # by row, an element is dropped once it is in its row. Both batch nodes.
    pictures = MapDataset.range(24).map(picture_and_company)
    read = lite.ReadOptions(num_threads=0)
    if kind == "map":
        dataset = pictures.batch(8).to_iter_dataset(read)
    else:
        dataset = pictures.to_iter_dataset(read).batch(8)
    expected = [to_plain({k: v for k, v in b.items() if k != "held"}) for b in dataset]
    got = list(dataset.mp_prefetch(options(1)))
    assert [to_plain({k: v for k, v in b.items() if k != "held"}) for b in got] == expected
    assert max(int(batch["held"].max()) for batch in got) <= 1


def test_a_users_source_cannot_be_shared_by_several_workers_as_in_grain():
    with pytest.raises(ValueError, match=r"^Cannot slice `IterDataset` source\. .*CountUp"):
        iter(CountUp(5).mp_prefetch(options(2)))


def test_a_users_source_runs_whole_in_one_worker():
    with iter(CountUp(5).mp_prefetch(options(1))) as it:
        assert list(it) == [0, 1, 2, 3, 4]
        assert it.get_state()["iterators_in_use_states"] == [{"i": 5}]


def test_a_users_node_over_to_iter_dataset_is_sliced_below_it():
    ds = PlusHundred(MapDataset.range(7).to_iter_dataset()).mp_prefetch(options(2))
    with iter(ds) as it:
        assert list(it) == [100, 101, 102, 103, 104, 105, 106]
        assert it.get_state()["iterators_in_use_states"] == [{"next_index": 4}, {"next_index": 3}]


def test_both_branches_of_a_mix_are_sliced_as_in_grain():
    a = MapDataset.range(6).to_iter_dataset()
    b = MapDataset.range(100, 106).to_iter_dataset()
    with iter(IterDataset.mix([a, b]).mp_prefetch(options(2))) as it:
        # Grain 0.2.18's output for this pipeline: each worker mixes a[w::2] and b[w::2].
        assert list(it) == [0, 1, 100, 101, 2, 3, 102, 103, 4, 5, 104, 105]


# Options, worker_init_fn, the deprecated alias ---------------------------------------------------
def test_zero_workers_iterates_the_pipeline_in_this_process():
    children = live_children()
    with iter(MapDataset.range(3).to_iter_dataset().mp_prefetch(options(0))) as it:
        assert it.get_state() == {"next_index": 0}
        assert list(it) == [0, 1, 2]
        assert live_children() == children


def _record_init(path: str) -> Any:
    def init(worker: int, workers: int) -> None:
        with open(path, "a") as out:
            out.write(f"{worker} {workers} {os.getpid()}\n")

    return init


def test_worker_init_fn_runs_once_in_each_worker_process(tmp_path):
    path = str(tmp_path / "init.txt")
    ds = (
        MapDataset.range(6)
        .to_iter_dataset()
        .mp_prefetch(options(2), worker_init_fn=_record_init(path))
    )
    with iter(ds) as it:
        next(it)
        state = it.get_state()
        assert [next(it) for _ in range(3)] == [1, 2, 3]
        it.set_state(state)  # a restart in the same processes does not run it again
        assert list(it) == [1, 2, 3, 4, 5]
    with open(path) as records:
        lines = sorted(records.read().split("\n")[:-1])
    assert [line.rsplit(" ", 1)[0] for line in lines] == ["0 2", "1 2"]
    assert len({line.rsplit(" ", 1)[1] for line in lines}) == 2


def test_prefetch_is_the_deprecated_spelling_and_warns_as_grain_does():
    ds = MapDataset.range(4).to_iter_dataset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prefetched = ds.prefetch(options(2))
    assert [(w.category, str(w.message)) for w in caught] == [
        (DeprecationWarning, "Please use `mp_prefetch` instead.")
    ]
    assert list(iter(prefetched)) == [0, 1, 2, 3]


# Errors from workers -----------------------------------------------------------------------------
def test_a_worker_exception_is_raised_in_its_place_with_type_and_message_and_the_stream_goes_on():
    ds = MapDataset.range(10).to_iter_dataset().map(fails_at_five).mp_prefetch(options(2))
    got: list[int] = []
    start = time.monotonic()
    with iter(ds) as it:
        with pytest.raises(KeyError) as raised:
            for element in it:
                got.append(element)
        assert time.monotonic() - start < 10
        assert raised.value.args == ("no record 5",)
        assert got == [0, 1, 2, 3, 4]
        assert it.get_state()["iterators_in_use_states"] == [{"next_index": 3}, {"next_index": 3}]
        assert list(it) == [6, 7, 8, 9]


# Leaks -------------------------------------------------------------------------------------------
def held_children(it: Any) -> set[int]:
    """The worker processes of ``it`` alive now (asserted while held, not after release)."""
    children = set(it._stream.pids())
    assert children and all(alive(pid) for pid in children)
    return children


def arrays(n: int) -> Any:
    return MapDataset.range(n).to_iter_dataset().map(lambda x: np.full(1000, x, np.int64))


@pytest.mark.parametrize("how", ["close", "exhaustion", "early_break_and_gc", "context_manager"])
def test_every_exit_leaves_no_process_or_segment(how):
    # The autouse fixture also checks /dev/shm and this process's children after the test.
    it = iter(arrays(20).mp_prefetch(options(2, buffer=2)))
    first = next(it)
    assert first[0] == 0
    pids = held_children(it)
    if how == "close":
        it.close()
        assert it._stream is None
    elif how == "exhaustion":
        assert len(list(it)) == 19
        assert it._stream is None  # released at StopIteration, before the iterator is dropped
    elif how == "early_break_and_gc":
        for element in it:
            if element[0] == 5:
                break
        del it, element, first
        gc.collect()
    else:
        with it:
            next(it)
    assert_gone(pids)


def test_an_error_that_ends_the_stream_leaves_no_process():
    def init(worker: int, workers: int) -> None:
        raise RuntimeError(f"worker {worker} cannot start")

    it = iter(MapDataset.range(4).to_iter_dataset().mp_prefetch(options(2), worker_init_fn=init))
    with pytest.raises(RuntimeError) as raised:
        next(it)
    assert raised.value.args == ("worker 0 cannot start",)
    assert it._stream is None
    with pytest.raises(RuntimeError, match="stopped at an earlier error"):
        next(it)


def test_close_kills_a_worker_spinning_in_a_transform_that_never_returns():
    # 2 and 3 are one block read in the worker: 2 is sent before 3 is made, as in Grain.
    ds = MapDataset.source([1, 2, 3]).map(spins_at_three).to_iter_dataset()
    it = iter(ds.mp_prefetch(options(1)))
    assert next(it) == 1
    assert next(it) == 2
    pids = held_children(it)
    time.sleep(0.2)  # the worker is inside spins_at_three(3)
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (it.close(), closed.set()), daemon=True)
    closer.start()
    closer.join(60)
    assert closed.is_set(), "close() waited for a worker that never answers"
    assert_gone(pids)


@pytest.mark.parametrize(
    ("workers", "batch"),
    [(1, 0), (2, 0), (1, 4)],
    ids=["1-worker", "2-workers", "1-worker-map-dataset-batch"],
)
def test_an_element_made_before_a_hanging_one_of_its_block_reaches_the_consumer(
    tmp_path, workers, batch
):
    # The worker reads its elements in blocks (1, 2, 4, 8, ... indices), one read of the source
    # each; GATE_AT is inside a block, and hangs until the test has every element before it.
    gate = str(tmp_path / "gate")
    ds = MapDataset.source(list(range(100))).map(functools.partial(waits_for_the_gate, gate=gate))
    if batch:
        ds = ds.batch(batch)
    it = iter(ds.to_iter_dataset().mp_prefetch(options(workers)))
    try:
        before = GATE_AT // (batch or 1)
        got = [np.asarray(next(it)).tolist() for _ in range(before)]  # while GATE_AT is being made
        expected = list(range(GATE_AT))
        assert got == (
            [expected[k : k + batch] for k in range(0, GATE_AT, batch)] if batch else expected
        )
        open(gate, "w").close()
        after = np.asarray(next(it)).tolist()
        assert after == (list(range(GATE_AT, GATE_AT + batch)) if batch else GATE_AT), (
            "the elements before the hanging one came only after it was made"
        )
    finally:
        it.close()


def test_a_workers_source_is_still_read_in_blocks_while_its_elements_are_sent_one_by_one(
    tmp_path,
):
    log = tmp_path / "reads"
    ds = MapDataset.source(CountsItsReads(300, str(log))).map(times_ten).to_iter_dataset()
    it = iter(ds.mp_prefetch(options(1)))
    try:
        assert [next(it) for _ in range(300)] == [10 * x for x in range(300)]
    finally:
        it.close()
    reads = [int(line) for line in log.read_text().split()]
    assert sum(reads) == 300, "a record was read twice or not at all"
    assert max(reads) >= 8, f"the worker read its source record by record: {reads[:20]}"


def test_ctrl_c_while_waiting_for_workers_leaves_no_process():
    it = iter(MapDataset.range(4).to_iter_dataset().map(sleeps_long).mp_prefetch(options(2)))
    assert next(it) == 0
    pids = held_children(it)

    def interrupt() -> None:
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.2, interrupt)  # the parent is blocked waiting for element 1
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(it)
    finally:
        timer.join()
    assert it._stream is None
    assert_gone(pids)


# Worker environment: no JAX on accelerators, no absl flags, time to first element ----------------
WORKER_SCRIPT = """
import os, sys, time
import grainlite as grain

def probe(x):
    return (os.environ.get("JAX_PLATFORMS"), "jax" in sys.modules, "absl" in sys.modules, x)

ds = grain.MapDataset.range(4).to_iter_dataset().map(probe)
start = time.perf_counter()
with iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))) as it:
    first = next(it)
    ttfb = time.perf_counter() - start
    rest = list(it)
print(repr([first] + rest), "absl" in sys.modules, ttfb)
"""


def test_workers_keep_jax_on_the_cpu_and_need_no_absl_flags():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WORKER_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    elements, parent_absl, ttfb = result.stdout.rsplit(" ", 2)
    assert eval(elements) == [("cpu", False, False, x) for x in range(4)]
    assert parent_absl == "False"
    assert float(ttfb) < 5.0  # about 0.3 s; generous for a loaded 2-core machine


def test_a_state_is_taken_and_set_before_the_worker_starts_without_pickling_the_pipeline():
    # A spawn-context Event can only reach another process by inheritance, so this pipeline can
    # never be pickled for a worker; as in Grain, iter(), get_state() and set_state() still work
    # (they run no transform and start nothing) and the pickling error comes at the first next().
    import multiprocessing

    event = multiprocessing.get_context("spawn").Event()

    def sets_the_event(x: int) -> int:
        event.set()
        return x

    ds = MapDataset.source([1, 2, 3]).map(sets_the_event).to_iter_dataset()
    it = iter(ds.mp_prefetch(options(1)))
    state = it.get_state()
    assert state["iterators_in_use_states"] == [{"next_index": 0}]
    it.set_state(state)
    assert not event.is_set() and it._stream is None
    with pytest.raises(
        RuntimeError, match="shared between processes through inheritance"
    ) as caught:
        next(it)
    assert "MultiprocessingOptions(num_workers=0)" in "".join(caught.value.__notes__)
    assert it._stream is None and not event.is_set()
