"""A ``RepeatIterDataset`` over ``mp_prefetch`` reuses the same worker processes for every epoch
(as Grain does), with exact states, and the workers end with the last epoch."""

from __future__ import annotations

import os

import pytest
from leak_check import live_children

import grainlite as grain
from grainlite.experimental import RepeatIterDataset

pytestmark = pytest.mark.timeout(120)


class TagWithPid(grain.transforms.Map):
    def map(self, x: int) -> tuple[int, int]:
        return x, os.getpid()


def _repeated(epochs: int) -> RepeatIterDataset:
    options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=1)
    ds = grain.MapDataset.range(7).to_iter_dataset().map(TagWithPid()).mp_prefetch(options)
    return RepeatIterDataset(ds, num_epochs=epochs)


def test_every_epoch_of_a_repeat_over_mp_prefetch_runs_in_the_same_worker_processes():
    before = live_children()
    iterator = iter(_repeated(3))
    out = list(iterator)
    assert [x for x, _ in out] == list(range(7)) * 3
    assert len({pid for _, pid in out}) == 2
    assert live_children() == before  # the last epoch ended the workers, no close() needed
    iterator.close()


def test_a_state_taken_in_a_later_epoch_resumes_there_with_the_same_elements():
    iterator = iter(_repeated(3))
    head = [next(iterator)[0] for _ in range(10)]  # into the second epoch
    state = iterator.get_state()
    rest = [x for x, _ in iterator]
    assert head + rest == list(range(7)) * 3
    with iter(_repeated(3)) as restored:
        restored.set_state(state)
        assert [x for x, _ in restored] == rest
        assert restored.get_state() == iterator.get_state()
    iterator.close()
