"""len(loader) equals the elements one iteration yields, or raises TypeError saying why it cannot;
the Dataset API keeps Grain's own len() semantics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import grainlite as grain


class Plus(grain.MapTransform):
    def map(self, x):
        return np.int64(x + 1)


class KeepEven(grain.FilterTransform):
    def filter(self, x):
        return x % 2 == 0


class Twice(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, x):
        return [x, x]


def make_loader(records, batch, drop_remainder, shard, epochs, workers):
    shard_index, shard_count = shard
    operations = [Plus()]
    if batch:
        operations.append(grain.Batch(batch, drop_remainder=drop_remainder))
    options = grain.ShardOptions(shard_index, shard_count, drop_remainder=False)
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, records, 1),
        sampler=grain.IndexSampler(records, options, shuffle=True, num_epochs=epochs, seed=3),
        operations=operations,
        worker_count=workers,
    )


GRID = [
    (records, batch, drop, shard, epochs, 0)
    for records, (batch, drop), shard, epochs in itertools.product(
        [3, 7, 10], [(None, False), (3, False), (3, True)], [(0, 1), (0, 3), (2, 3)], [1, 2]
    )
] + [  # each worker batches its own records (a partial batch each): the count differs from one
    # process's in these cases; a few only, processes are slow to start
    (10, 4, False, (0, 1), 1, 2),
    (14, 4, True, (0, 1), 2, 2),
    (10, 3, True, (0, 3), 1, 2),
]


@pytest.mark.parametrize(
    ("records", "batch", "drop", "shard", "epochs", "workers"),
    GRID,
    ids=[
        f"n{n}-b{b}{'-drop' if d else ''}-shard{s[0]}of{s[1]}-e{e}-w{w}"
        for n, b, d, s, e, w in GRID
    ],
)
def test_len_equals_the_elements_one_iteration_yields(records, batch, drop, shard, epochs, workers):
    loader = make_loader(records, batch, drop, shard, epochs, workers)
    with iter(loader) as iterator:
        assert len(loader) == sum(1 for _ in iterator)


def test_len_with_a_filter_raises_type_error_naming_the_operation():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10, 1),
        sampler=grain.IndexSampler(10, grain.NoSharding(), num_epochs=1),
        operations=[Plus(), KeepEven(), grain.Batch(2)],
    )
    with pytest.raises(TypeError) as raised:
        len(loader)
    assert str(raised.value) == (
        "len(loader) is unknown: operations[1] (KeepEven) is a filter, so how many elements "
        "come out depends on the data. Count one pass instead (sum(1 for _ in loader)), or "
        "iterate without a total."
    )


def test_len_with_a_flat_map_raises_type_error():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10, 1),
        sampler=grain.IndexSampler(10, grain.NoSharding(), num_epochs=1),
        operations=[Twice()],
    )
    with pytest.raises(TypeError, match=r"operations\[0\] \(Twice\) is a flat map"):
        len(loader)


def test_len_of_an_endless_loader_raises_type_error_saying_so():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10, 1),
        sampler=grain.IndexSampler(10, grain.NoSharding(), num_epochs=None),
    )
    with pytest.raises(TypeError) as raised:
        len(loader)
    assert str(raised.value) == (
        "len(loader) is unknown: the sampler is endless (num_epochs=None). Pass "
        "IndexSampler(..., num_epochs=N) for N passes over the data, or iterate without a total."
    )


class CustomSampler:
    """A sampler without __len__: the stream ends where it raises IndexError."""

    def __getitem__(self, index):
        if index >= 5:
            raise IndexError(index)
        return grain.RecordMetadata(index=index, record_key=index)


def test_len_with_a_sampler_without_a_length_raises_type_error():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10, 1),
        sampler=CustomSampler(),
        shard_options=grain.NoSharding(),
    )
    with pytest.raises(TypeError, match=r"the sampler \(CustomSampler\) has no __len__"):
        len(loader)


def test_dataset_api_len_is_grains_own():
    # Imported here: worker processes import this module to unpickle its transforms.
    import grain as reference

    for module in (grain, reference):
        batched = module.MapDataset.range(10).batch(3)
        assert len(batched) == 4
        assert len(module.MapDataset.range(10).batch(3, drop_remainder=True)) == 3
        assert len(module.MapDataset.range(10).filter(lambda x: x % 2)) == 10  # holes count
        with pytest.raises(TypeError):
            len(module.MapDataset.range(10).to_iter_dataset())


def test_tqdm_gets_the_total_from_len():
    tqdm = pytest.importorskip("tqdm")
    loader = make_loader(10, 3, False, (0, 1), 1, 0)
    with tqdm.tqdm(loader, disable=True) as bar:
        assert bar.total == 4
        assert sum(1 for _ in bar) == 4
