"""Local workers share the CPUs they have (grainlite.engine.flow): a worker makes its next
element while it waits for a credit only where each worker has a CPU (makes_ahead): with more
workers than CPUs it makes an element only once it may send it, so it holds no element (and no
slab) beyond its credits; and then only one worker per CPU starts, in the order the elements are
taken, the others once the first element has come (starting_credits), so the first element has a
CPU to itself. Real worker processes; what they made is counted in a file each element appends
to."""

from __future__ import annotations

import time

import pytest

import grainlite as grain
from grainlite.engine import flow
from grainlite_tests.support import ray_pipelines as rp

pytestmark = pytest.mark.timeout(120)


def _settled_count(log, at_least: int) -> int:
    """The elements made, once the workers have made at least ``at_least`` and then nothing
    more for a second."""
    deadline = time.monotonic() + 30
    count = 0
    while time.monotonic() < deadline:
        count = len(log.read_text().splitlines()) if log.exists() else 0
        if count >= at_least:
            break
        time.sleep(0.02)
    time.sleep(1.0)  # time enough to make more, if anything let them
    return len(log.read_text().splitlines())


def _over_range(api: str, workers: int, transform: grain.MapTransform):
    """An iterator (not started) of ``workers`` workers with 1 credit each over 0..99, each
    element through ``transform``: worker ``w`` makes ``w``, ``w + workers``, ..."""
    if api == "loader":
        return iter(
            grain.DataLoader(
                data_source=grain.RangeDataSource(0, 100, 1),
                sampler=grain.SequentialSampler(100, grain.NoSharding()),
                operations=[transform],
                worker_count=workers,
                worker_buffer_size=1,
                read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=1),
            )
        )
    dataset = grain.MapDataset.range(100).to_iter_dataset(grain.ReadOptions(num_threads=0))
    options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=1)
    return iter(dataset.map(transform).mp_prefetch(options))


@pytest.mark.parametrize("api", ["loader", "dataset"])
@pytest.mark.parametrize(("cpus", "made"), [(64, 5), (1, 3)], ids=["a-cpu-each", "fewer-cpus"])
def test_workers_make_an_element_ahead_of_their_credit_only_with_a_cpu_each(
    tmp_path, monkeypatch, api, cpus, made
):
    # 2 workers, 1 credit each, 1 element taken: worker 0 sent elements 0 and 2, worker 1 sent
    # element 1; each makes one more (4 and 3) while it waits, where it has a CPU of its own.
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: cpus)
    log = tmp_path / "made"
    iterator = _over_range(api, 2, rp.Logged(str(log)))
    try:
        assert int(next(iterator)) == 0
        assert _settled_count(log, made) == made
        assert [int(next(iterator)) for _ in range(20)] == list(range(1, 21))
    finally:
        iterator.close()  # type: ignore[attr-defined]


def _made(log) -> list[int]:
    return sorted(int(line) for line in log.read_text().splitlines()) if log.exists() else []


def _three_workers(api: str, log, state: object = None):
    """An iterator of 3 workers with 1 credit each over 0..99 (worker w makes w, w + 3, ...),
    from ``state`` if given, started (its workers run) before any ``next()``."""
    iterator = _over_range(api, 3, rp.Logged(str(log)))
    if state is not None:
        iterator.set_state(state)  # type: ignore[attr-defined]
    iterator.start_prefetch()  # type: ignore[attr-defined]
    return iterator


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_with_fewer_cpus_than_workers_only_one_per_cpu_starts_until_the_first_element(
    tmp_path, monkeypatch, api
):
    # One CPU, three workers: worker 0 makes element 0 alone (with a CPU to itself); workers 1
    # and 2 make nothing until element 0 has arrived, then the stream goes on in order.
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: 1)
    log = tmp_path / "made"
    iterator = _three_workers(api, log)
    try:
        assert _settled_count(log, 1) == 1
        assert _made(log) == [0]
        assert int(next(iterator)) == 0
        _settled_count(log, 3)
        assert _made(log) == [0, 1, 2, 3]  # each has its credit; worker 0 its second
        assert [int(next(iterator)) for _ in range(20)] == list(range(1, 21))
    finally:
        iterator.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_a_restored_iterator_starts_the_worker_whose_element_comes_next(tmp_path, monkeypatch, api):
    # Four elements taken (0..3), so element 4, worker 1's, comes next: worker 1 starts alone.
    # (The iterator started at the beginning before set_state moved it: worker 0 may have made
    # element 0 by then.)
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: 1)
    first = _three_workers(api, tmp_path / "first")
    try:
        assert [int(next(first)) for _ in range(4)] == [0, 1, 2, 3]
        state = first.get_state()  # type: ignore[attr-defined]
    finally:
        first.close()  # type: ignore[attr-defined]
    log = tmp_path / "made"
    iterator = _three_workers(api, log, state)
    try:
        _settled_count(log, 1)
        assert [made for made in _made(log) if made] == [4]
        assert [int(next(iterator)) for _ in range(10)] == list(range(4, 14))
    finally:
        iterator.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_with_a_cpu_each_every_worker_starts_at_once(tmp_path, monkeypatch, api):
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: 64)
    log = tmp_path / "made"
    iterator = _three_workers(api, log)
    try:
        _settled_count(log, 6)
        assert _made(log) == [0, 1, 2, 3, 4, 5]  # each sent one and made one ahead
    finally:
        iterator.close()  # type: ignore[attr-defined]


class SlowFirst(grain.MapTransform):
    """Element 0 takes 2 s; the others are immediate."""

    def map(self, element: int) -> int:
        if int(element) == 0:
            time.sleep(2.0)
        return element


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_a_held_back_worker_busy_when_set_state_moves_it_keeps_the_credit_that_releases_it(
    monkeypatch, api
):
    # One CPU, three workers. The iterator starts at the beginning: worker 0 alone makes
    # element 0 (2 s). set_state then moves it to element 4, worker 1's: worker 1 starts, and
    # worker 0 is held back. Element 4 comes while worker 0 is still busy: worker 0 reads the
    # Restart and the Ack that releases it together, after its old element; the Ack's credit
    # is the new generation's (dropped with the old one, the stream hung at element 6).
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: 1)
    state = None
    for _ in range(2):
        iterator = _over_range(api, 3, SlowFirst())
        try:
            if state is None:
                assert [int(next(iterator)) for _ in range(4)] == [0, 1, 2, 3]
                state = iterator.get_state()  # type: ignore[attr-defined]
                continue
            iterator.set_state(state)  # type: ignore[attr-defined]
            assert [int(next(iterator)) for _ in range(10)] == list(range(4, 14))
        finally:
            iterator.close()  # type: ignore[attr-defined]
