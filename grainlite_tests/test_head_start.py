"""The head start: the first element made in the parent while the workers start, then handed on.

Whatever makes the first element, the elements, their order and every state are those of a
stream made wholly in workers (and of ``worker_count=0``).
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grainlite as grain
from grainlite_tests.contracts import run_with_states


class WhereMade(grain.MapTransform):
    """The record and the pid of the process that made it."""

    def map(self, element: int) -> dict[str, np.ndarray]:
        return {"record": np.int64(element), "pid": np.int64(os.getpid())}


class DropMultiplesOf(grain.FilterTransform):
    def __init__(self, every: int) -> None:
        self.every = every

    def filter(self, element: dict[str, np.ndarray]) -> bool:
        return int(element["record"]) % self.every != 0


def make_loader(records: int, workers: int, batch: int, every: int, seed: int) -> grain.DataLoader:
    operations: list[object] = [WhereMade()]
    if every:
        operations.append(DropMultiplesOf(every))
    if batch:
        operations.append(grain.Batch(batch))
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, records, 1),
        sampler=grain.IndexSampler(
            records, grain.NoSharding(), shuffle=True, seed=seed, num_epochs=1
        ),
        operations=operations,
        worker_count=workers,
    )


def records_and_pids(elements: list[dict[str, np.ndarray]]) -> tuple[list[list[int]], list[int]]:
    return [np.atleast_1d(e["record"]).tolist() for e in elements], [
        int(np.atleast_1d(e["pid"])[0]) for e in elements
    ]


@pytest.fixture
def head_start_off():
    grain.config.update("first_element_in_parent", False)
    yield
    grain.config.update("first_element_in_parent", True)


def test_the_first_element_is_made_in_the_parent_and_the_rest_in_workers():
    with iter(make_loader(24, 2, 0, 0, 0)) as iterator:
        elements = list(iterator)
    _, pids = records_and_pids(elements)
    assert pids[0] == os.getpid()
    assert os.getpid() not in pids[1:] and len(set(pids[1:])) == 2


def test_with_the_option_off_every_element_is_made_in_a_worker(head_start_off):
    with iter(make_loader(8, 2, 0, 0, 0)) as iterator:
        _, pids = records_and_pids(list(iterator))
    assert os.getpid() not in pids


def records_in(plain_elements: list[dict]) -> list[object]:
    """The record values of elements as :func:`run_with_states` records them (the pid left out)."""
    return [dict(e["dict"])["record"] for e in plain_elements]


@settings(max_examples=6, deadline=None)
@given(
    records=st.integers(1, 40),
    workers=st.integers(1, 3),
    batch=st.sampled_from([0, 1, 3]),
    every=st.sampled_from([0, 2, 3]),
    seed=st.integers(0, 2**16),
)
def test_elements_and_states_match_a_stream_made_wholly_in_workers(
    records, workers, batch, every, seed
):
    loader = make_loader(records, workers, batch, every, seed)
    with iter(loader) as iterator:
        head_started, head_states = run_with_states(iterator)
    grain.config.update("first_element_in_parent", False)
    try:
        with iter(loader) as iterator:
            in_workers, worker_states = run_with_states(iterator)
    finally:
        grain.config.update("first_element_in_parent", True)
    assert records_in(head_started) == records_in(in_workers)
    assert head_states == worker_states


def test_a_restored_iterator_gets_its_head_start_from_the_saved_position():
    loader = make_loader(30, 3, 2, 0, 1)
    with iter(loader) as iterator:
        expected, states = run_with_states(iterator)
    for k in (1, 4, len(expected) - 1):
        with iter(loader) as iterator:
            iterator.set_state(states[k])
            rest, rest_states = run_with_states(iterator)
        assert records_in(rest) == records_in(expected[k:])
        assert rest_states == states[k:]


def test_a_head_start_on_a_worker_with_nothing_left_goes_on_to_the_next():
    # 2 records, 3 workers: after the first element, workers 1 and 2 have nothing to read.
    loader = make_loader(2, 3, 0, 0, 0)
    with iter(loader) as iterator:
        expected, states = run_with_states(iterator)
    with iter(loader) as iterator:
        iterator.set_state(states[1])
        rest, _ = run_with_states(iterator)
    assert records_in(rest) == records_in(expected[1:])


class ExitsOnFirst(grain.MapTransform):
    def map(self, element: int) -> int:
        sys.exit(3)


def test_sys_exit_in_the_first_element_is_the_error_a_worker_would_report():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 4, 1),
        sampler=grain.IndexSampler(4, grain.NoSharding(), num_epochs=1),
        operations=[ExitsOnFirst()],
        worker_count=2,
    )
    with (
        iter(loader) as iterator,
        pytest.raises(grain.GrainliteRuntimeError, match=r"SystemExit\(3\)"),
    ):
        next(iterator)


def test_the_first_element_counts_in_the_stats_once():
    with iter(make_loader(40, 2, 4, 0, 0)) as iterator:
        delivered = sum(1 for _ in iterator)
        stats = iterator.stats()
    read = next(stage for stage in stats.stages if stage.name.startswith("read"))
    assert delivered == 10 and read.elements_in == read.elements_out == 40


def test_the_option_is_a_bool_read_back_by_name():
    assert grain.config.first_element_in_parent is True
    grain.config.update("first_element_in_parent", False)
    try:
        assert grain.config.get_or_default("first_element_in_parent") is False
    finally:
        grain.config.update("first_element_in_parent", True)
    with pytest.raises(grain.GrainliteTypeError, match=r"must be a bool .*pass False"):
        grain.config.update("first_element_in_parent", "no")


def test_a_dataset_api_pipeline_makes_every_element_in_its_workers():
    # mp_prefetch slices its pipeline in place and runs worker_init_fn: only workers do that.
    dataset = grain.MapDataset.range(8).map(lambda x: os.getpid()).to_iter_dataset()
    prefetched = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    iterator = iter(prefetched)
    try:
        assert os.getpid() not in list(iterator)
    finally:
        iterator.close()


def test_after_start_prefetch_every_element_comes_from_a_worker():
    with iter(make_loader(8, 2, 0, 0, 0)) as iterator:
        iterator.start_prefetch()
        _, pids = records_and_pids(list(iterator))
    assert os.getpid() not in pids


class LazyLock(grain.MapTransform):
    """Takes a lock on first use, as transforms that open files or clients lazily do."""

    def __init__(self) -> None:
        self.lock = None

    def map(self, element: int) -> int:
        if self.lock is None:
            self.lock = threading.Lock()
        return element


class LazyFileSource:
    """A source that opens its file on the first read."""

    def __init__(self, path: str) -> None:
        self.path, self.file = path, None

    def __len__(self) -> int:
        return 6

    def __getitem__(self, key: int) -> bytes:
        if self.file is None:
            self.file = open(self.path, "rb")  # noqa: SIM115  (kept open, as such sources do)
        self.file.seek(key)
        return self.file.read(1)


def test_the_head_start_leaves_the_users_objects_unused_so_the_next_iterator_pickles_them(
    tmp_path,
):
    path = tmp_path / "data"
    path.write_bytes(bytes(range(6)))
    loader = grain.DataLoader(
        data_source=LazyFileSource(str(path)),
        sampler=grain.IndexSampler(6, grain.NoSharding(), num_epochs=1),
        operations=[LazyLock()],
        worker_count=2,
    )
    for _ in range(2):  # a second epoch pickles the pipeline again
        with iter(loader) as iterator:
            assert list(iterator) == [bytes([i]) for i in range(6)]
    assert loader._pipeline.source.file is None
    assert loader._pipeline.operations[0].lock is None
