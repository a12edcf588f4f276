"""One rank's plan: batches per epoch, the same on every rank, and when the data decides."""

from __future__ import annotations

import pytest

import grainlite as grain
from grainlite.torch.plan import Plan, Settings, check_steps
from grainlite_tests.support.torch_records import KeepEven, records

pytestmark = pytest.mark.timeout(30)


def settings(operations, num_records=23, workers=0, batches_per_epoch=None) -> Settings:
    return Settings(
        data_source=records(num_records),
        operations=tuple(operations),
        steps=check_steps(operations),
        shuffle=False,
        seed=None,
        worker_count=workers,
        worker_buffer_size=1,
        read_options=None,
        batches_per_epoch=batches_per_epoch,
    )


def test_batches_per_epoch_is_the_smallest_ranks_count():
    # 23 records on 3 ranks: 8, 8, 7 records; full batches of 2: 4, 4, 3 batches.
    plans = [
        Plan(settings([grain.Batch(2, drop_remainder=True)]), grain.ShardOptions(r, 3))
        for r in range(3)
    ]
    assert [plan.batches_per_epoch for plan in plans] == [3, 3, 3]


def test_a_filter_leaves_the_count_to_the_data_unless_batches_per_epoch_is_given():
    assert Plan(settings([KeepEven()]), grain.ShardOptions(0, 1)).batches_per_epoch is None
    plan = Plan(settings([KeepEven()], batches_per_epoch=3), grain.ShardOptions(0, 2))
    assert plan.batches_per_epoch == 3
    plan.check_iterable()  # no error: every rank stops after 3


def test_batches_per_epoch_above_the_natural_count_is_refused_with_the_numbers():
    with pytest.raises(ValueError) as raised:
        Plan(settings([grain.Batch(4)], batches_per_epoch=9), grain.ShardOptions(0, 2))
    assert str(raised.value) == (
        "batches_per_epoch=9 is more than an epoch holds: with 23 records on 2 rank(s) and 1 "
        "stream(s) per rank, the smallest rank makes 3 batches per epoch. Pass "
        "batches_per_epoch <= 3, or None for 3."
    )
