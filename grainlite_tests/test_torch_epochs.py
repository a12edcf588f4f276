"""EpochSampler and the epoch arithmetic: Grain's endless sampler cut into epochs, and counts."""

from __future__ import annotations

import grain.python as reference
import numpy as np
import pytest

import grainlite as grain
from grainlite.loader.state.decoding import decode
from grainlite.torch.epochs import (
    EpochSampler,
    epoch_batches,
    outputs_per_worker,
    positions_after,
    rank_records,
)
from grainlite.torch.plan import Plan, Settings, check_steps

pytestmark = pytest.mark.timeout(60)


def grain_epoch_keys(num_records: int, rank: int, world: int, epoch: int, seed: int) -> list[int]:
    """Record keys of epoch ``epoch`` on ``rank`` from the installed Grain's endless sampler."""
    sampler = reference.IndexSampler(
        num_records,
        reference.ShardOptions(rank, world),
        shuffle=True,
        num_epochs=None,
        seed=seed,
    )
    length = rank_records(num_records, rank, world)
    return [sampler[rank + world * (epoch * length + j)].record_key for j in range(length)]


@pytest.mark.parametrize(("num_records", "world"), [(23, 1), (23, 2), (23, 3), (10, 4)])
def test_epoch_e_holds_the_keys_of_epoch_e_of_grains_endless_sampler(num_records, world):
    for rank in range(world):
        sampler = EpochSampler(num_records, grain.ShardOptions(rank, world), True, 11, 2, True)
        for epoch in range(3):
            ours = [
                sampler[epoch * sampler.stride + j].record_key for j in range(sampler.epoch_length)
            ]
            assert ours == grain_epoch_keys(num_records, rank, world, epoch, 11)


def test_each_record_gets_the_rng_of_its_global_index_as_in_grain():
    sampler = EpochSampler(9, grain.ShardOptions(1, 2), True, 5, 3, True)
    endless = reference.IndexSampler(
        9, reference.ShardOptions(1, 2), shuffle=True, num_epochs=None, seed=5
    )
    metadata = sampler[2 * sampler.stride + 3]  # record 3 of epoch 2
    expected = endless[1 + 2 * (2 * 4 + 3)]
    assert metadata.index == expected.index
    assert metadata.rng.random() == expected.rng.random()


def test_records_get_no_rng_when_no_operation_uses_one():
    sampler = EpochSampler(9, grain.ShardOptions(0, 1), True, 5, 1, with_rngs=False)
    assert sampler[0].rng is None


def test_indices_between_epochs_raise_index_error_so_every_worker_stream_ends():
    sampler = EpochSampler(10, grain.ShardOptions(0, 1), False, None, 3, False)
    assert sampler.stride % 3 == 0 and sampler.stride >= 10 + 3
    for gap in range(10, sampler.stride):
        with pytest.raises(IndexError):
            sampler[gap]
    assert sampler[sampler.stride].record_key == 0  # epoch 1 starts after the gap


def test_a_batch_drops_or_keeps_each_workers_remainder():
    steps = check_steps([grain.Batch(4)])
    assert outputs_per_worker(10, steps) == 3
    assert outputs_per_worker(10, check_steps([grain.Batch(4, drop_remainder=True)])) == 2
    assert epoch_batches(10, 2, steps) == 4  # 5 + 5 records: 2 batches each


class _Even(grain.FilterTransform):
    def filter(self, element):
        return element % 2 == 0


def test_counts_are_unknown_when_a_filter_decides():
    assert outputs_per_worker(10, check_steps([_Even(), grain.Batch(2)])) is None
    assert epoch_batches(10, 2, check_steps([_Even(), grain.Batch(2)])) is None


@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("drop", [False, True], ids=["keep-remainder", "drop-remainder"])
def test_computed_positions_equal_the_iterators_own_state_after_every_batch(workers, drop):
    source = list(range(17))
    settings = Settings(
        data_source=source,
        operations=(grain.Batch(3, drop_remainder=drop),),
        steps=check_steps([grain.Batch(3, drop_remainder=drop)]),
        shuffle=True,
        seed=2,
        worker_count=workers,
        worker_buffer_size=1,
        read_options=None,
        batches_per_epoch=None,
    )
    plan = Plan(settings, grain.ShardOptions(0, 1))
    layout = plan.loader._layout
    with iter(plan.loader) as iterator:
        iterator.set_state(plan.state_at(1, 0))
        total = epoch_batches(17, max(workers, 1), settings.steps)
        for batch in range(1, total + 1):
            next(iterator)
            actual = decode(iterator.get_state(), layout)
            computed = decode(plan.state_at(1, batch), layout)
            assert computed.states == actual.states, batch
            assert computed.next_worker == actual.next_worker, batch


def test_positions_after_the_whole_epoch_are_every_workers_records():
    steps = check_steps([grain.Batch(2)])
    read, _ = positions_after(7, 3, steps, epoch_batches(7, 3, steps) or 0)
    assert read == [3, 2, 2]
    assert np.sum(read) == 7
