"""With workers, every element is made in a worker process, with the worker environment.

A transform records the process it ran in and what it saw of the accelerator variables; the
training process sets them to values the workers must never see. The first element of every
iterator, the first after a ``set_state`` (on live workers and on a new iterator) and every other
element must come from a worker, for the DataLoader and for ``mp_prefetch`` (with and without
``start_prefetch()``).
"""

from __future__ import annotations

import os

import pytest

import grainlite as grain

pytestmark = pytest.mark.timeout(180)


class WhereMade(grain.MapTransform):
    """Tags each record with the pid and the accelerator variables of the process that made it."""

    def map(self, element: int) -> tuple[int, int, str | None, str | None]:
        env = os.environ
        return element, os.getpid(), env.get("JAX_PLATFORMS"), env.get("CUDA_VISIBLE_DEVICES")


@pytest.fixture
def parent_with_an_accelerator(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")


def _loader(workers: int) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, 12, 1),
        sampler=grain.IndexSampler(12, grain.NoSharding(), shuffle=False, num_epochs=1, seed=0),
        operations=[WhereMade()],
        worker_count=workers,
    )


def _check_made_in_workers(made: list[tuple[int, int, str | None, str | None]]) -> None:
    parent = os.getpid()
    in_parent = [record for record, pid, _, _ in made if pid == parent]
    assert not in_parent, f"records {in_parent} were made in the training process"
    assert {(jax, cuda) for _, _, jax, cuda in made} == {("cpu", "-1")}, made


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_element_of_an_epoch_is_made_in_a_worker_with_the_worker_environment(
    workers, parent_with_an_accelerator
):
    with iter(_loader(workers)) as iterator:
        made = list(iterator)
    assert [record for record, *_ in made] == list(range(12))
    _check_made_in_workers(made)
    assert len({pid for _, pid, _, _ in made}) == workers


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_first_element_after_a_set_state_is_made_in_a_worker(
    workers, parent_with_an_accelerator
):
    loader = _loader(workers)
    with iter(loader) as iterator:
        made = [next(iterator) for _ in range(5)]
        state = iterator.get_state()
        iterator.set_state(state)  # the running workers move
        made.append(next(iterator))
        iterator.set_state(state)
        made += list(iterator)
    with iter(loader) as restored:  # a new iterator restored before its first element
        restored.set_state(state)
        made.append(next(restored))
    _check_made_in_workers(made)
    assert [record for record, *_ in made] == [0, 1, 2, 3, 4, 5, *range(5, 12), 5]


def test_the_first_element_of_each_of_many_iterators_is_made_in_a_worker(
    parent_with_an_accelerator,
):
    loader = _loader(2)
    firsts = []
    for _ in range(4):
        with iter(loader) as iterator:
            firsts.append(next(iterator))
    _check_made_in_workers(firsts)


def test_iter_starts_the_workers_before_the_first_next():
    with iter(_loader(2)) as iterator:
        pids = iterator._stream.pids()
        assert len(pids) == 2 and os.getpid() not in pids
        _, pid, _, _ = next(iterator)
        assert pid in pids


def test_an_mp_prefetch_iterator_starts_its_workers_at_start_prefetch(parent_with_an_accelerator):
    dataset = (
        grain.MapDataset.range(12)
        .map(WhereMade())
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    iterator = iter(dataset)
    try:
        iterator.start_prefetch()
        iterator.start_prefetch()  # idempotent
        pids = iterator._stream.pids()
        assert len(pids) == 2 and os.getpid() not in pids
        made = list(iterator)
    finally:
        iterator.close()
    assert sorted(record for record, *_ in made) == list(range(12))
    _check_made_in_workers(made)
    assert {pid for _, pid, _, _ in made} == set(pids)


def _prefetched(workers: int) -> grain.IterDataset:
    return (
        grain.MapDataset.range(12)
        .map(WhereMade())
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    )


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_element_of_an_mp_prefetch_epoch_is_made_in_a_worker_without_start_prefetch(
    workers, parent_with_an_accelerator
):
    iterator = iter(_prefetched(workers))
    try:
        made = list(iterator)
    finally:
        iterator.close()
    assert sorted(record for record, *_ in made) == list(range(12))
    _check_made_in_workers(made)
    assert len({pid for _, pid, _, _ in made}) == workers


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_first_mp_prefetch_element_after_a_set_state_is_made_in_a_worker(
    workers, parent_with_an_accelerator
):
    dataset = _prefetched(workers)
    iterator = iter(dataset)
    try:
        made = [next(iterator) for _ in range(5)]
        state = iterator.get_state()
        iterator.set_state(state)  # the running workers move
        made.append(next(iterator))
        iterator.set_state(state)
        rest = list(iterator)
    finally:
        iterator.close()
    restored = iter(dataset)  # a new iterator restored before its first element
    try:
        restored.set_state(state)
        first_restored = next(restored)
    finally:
        restored.close()
    _check_made_in_workers([*made, *rest, first_restored])
    assert made[5][0] == rest[0][0] == first_restored[0]
    assert sorted(record for record, *_ in made[:5] + rest) == list(range(12))


def test_the_first_element_of_each_of_many_mp_prefetch_iterators_is_made_in_a_worker(
    parent_with_an_accelerator,
):
    dataset = _prefetched(2)
    firsts = []
    for _ in range(4):
        iterator = iter(dataset)
        try:
            firsts.append(next(iterator))
        finally:
            iterator.close()
    _check_made_in_workers(firsts)
    assert [record for record, *_ in firsts] == [firsts[0][0]] * 4


def test_iter_of_an_mp_prefetch_dataset_starts_the_workers_before_the_first_next(
    parent_with_an_accelerator,
):
    iterator = iter(_prefetched(2))
    try:
        pids = iterator._stream.pids()
        assert len(pids) == 2 and os.getpid() not in pids
        made = list(iterator)
    finally:
        iterator.close()
    _check_made_in_workers(made)
    assert {pid for _, pid, _, _ in made} == set(pids)


class HoldsALock(grain.MapTransform):
    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()

    def map(self, element: int) -> int:
        return element


def test_an_mp_prefetch_pipeline_that_cannot_be_pickled_fails_at_the_first_next_not_at_iter():
    dataset = (
        grain.MapDataset.range(4)
        .map(HoldsALock())
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    iterator = iter(dataset)  # starts nothing that stays: the error waits for next()
    try:
        assert iterator._stream is None
        with pytest.raises(TypeError, match="cannot pickle"):
            next(iterator)
    finally:
        iterator.close()
