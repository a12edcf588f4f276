"""StreamingSampler: shards shuffled, then records within windows of K shards, in the DataLoader.

The promises (``docs/how-to/streaming-order.md``): the order is a pure function of the seed and
the index; every epoch reads every record once, in a new order; the records of each window come
from at most K shards, so a reader holds at most K shards at a time; a checkpoint resumes exactly,
and onto other worker and host counts every record not yet delivered comes exactly once.
"""

from __future__ import annotations

import collections
import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grainlite as grain
from grainlite.errors import CheckpointMismatchError, GrainliteTypeError, GrainliteValueError
from grainlite.experimental import StreamingSampler
from grainlite_tests.support import elastic_helpers as helpers
from grainlite_tests.support.contracts import assert_resumes_at_every_step

pytestmark = pytest.mark.timeout(120)

SIZES = [10, 30, 5, 20, 35, 7, 1, 12]  # uneven files: 120 records in 8 shards
N = sum(SIZES)
NO_READ_AHEAD = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _sampler(**kwargs):
    args = {"shard_sizes": SIZES, "window_shards": 3, "seed": 5, "num_epochs": 1} | kwargs
    return StreamingSampler(N, **args)


def _loader(sampler, workers=0, host=0, hosts=1, operations=(), source_size=N):
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, source_size, 1),
        sampler=sampler,
        operations=list(operations),
        worker_count=workers,
        shard_options=grain.ShardOptions(host, hosts),
        read_options=NO_READ_AHEAD,
    )


def _open_shards_at_most(shards: np.ndarray) -> int:
    """The most shards "in use" at once in a stream of shard ids: begun and not yet finished."""
    first = {int(s): int(np.argmax(shards == s)) for s in np.unique(shards)}
    last = {s: len(shards) - 1 - int(np.argmax(shards[::-1] == s)) for s in first}
    return max(sum(first[s] <= t <= last[s] for s in first) for t in range(len(shards)))


def test_the_order_is_a_pure_function_of_the_seed_and_index():
    keys = _sampler(num_epochs=3).record_keys(np.arange(3 * N))
    again = _sampler(num_epochs=3).record_keys(np.arange(3 * N))
    np.testing.assert_array_equal(keys, again)
    one_by_one = [_sampler(num_epochs=3)[i].record_key for i in range(0, 3 * N, 7)]
    assert one_by_one == keys[::7].tolist()
    other_seed = _sampler(num_epochs=3, seed=6).record_keys(np.arange(3 * N))
    assert keys.tolist() != other_seed.tolist()
    epochs = keys.reshape(3, N)
    assert len({tuple(epoch) for epoch in epochs.tolist()}) == 3  # a new order every epoch


def test_each_record_has_the_generator_of_its_index_as_in_grains_samplers():
    record = _sampler()[17]
    expected = np.random.Generator(np.random.Philox(key=5 + 17)).integers(10**9)
    assert record.index == 17 and record.rng.integers(10**9) == expected


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "shards",
    [{"shard_sizes": SIZES}, {"records_per_shard": 16}, {"records_per_shard": 1}],
    ids=["files", "fixed-ranges", "one-record-shards"],
)
def test_every_record_comes_once_per_epoch_through_the_data_loader(workers, shards):
    sampler = StreamingSampler(N, window_shards=2, seed=1, num_epochs=2, **shards)
    delivered = list(_loader(sampler, workers))
    assert sorted(delivered[:N]) == list(range(N))
    assert sorted(delivered[N:]) == list(range(N))
    assert delivered == sampler.record_keys(np.arange(2 * N)).tolist()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_window_of_k_shards_bounds_the_shards_in_use_at_once(workers):
    for window in (1, 2, 3):
        sampler = _sampler(window_shards=window, num_epochs=2)
        delivered = np.array(list(_loader(sampler, workers)))
        order = sampler.order
        for epoch in range(2):
            shards = order.shard_of(delivered[epoch * N : (epoch + 1) * N])
            assert _open_shards_at_most(shards) <= window
            for start, stop in order.windows(0, epoch):  # and each window is its own K shards
                assert len(set(shards[start:stop].tolist())) <= window


def test_window_one_reads_shard_after_shard_and_one_window_of_all_shards_is_a_global_shuffle():
    shard_by_shard = _sampler(window_shards=1)
    shards = shard_by_shard.order.shard_of(shard_by_shard.record_keys(np.arange(N)))
    assert _open_shards_at_most(shards) == 1
    everything = _sampler(window_shards=len(SIZES))
    assert everything.order.windows(0, 0) == [(0, N)]


@pytest.mark.parametrize("workers", [0, 2])
def test_each_host_reads_only_its_partition_and_the_hosts_together_every_record_once(workers):
    hosts = 3
    per_host = []
    for host in range(hosts):
        sampler = _sampler(shard_options=grain.ShardOptions(host, hosts), num_epochs=2)
        assert sampler.order.partitions == hosts
        per_host.append(list(_loader(sampler, workers, host, hosts)))
    blocks = [range(40 * s, 40 * (s + 1)) for s in range(hosts)]  # 120 records, 3 blocks of 40
    for host, delivered in enumerate(per_host):
        assert len(delivered) == 80 and set(delivered) == set(blocks[host])
        shards = _sampler(shard_options=grain.ShardOptions(host, hosts)).order.shard_of(
            np.array(delivered[:40])
        )
        assert _open_shards_at_most(shards) <= 3
    assert sorted(k for d in per_host for k in d) == sorted(list(range(N)) * 2)


def test_the_sampler_repr_names_no_host_so_every_host_builds_the_same_one():
    reprs = {repr(_sampler(shard_options=grain.ShardOptions(s, 4))) for s in range(4)}
    assert reprs == {
        "StreamingSampler(num_records=120, shards=8, hash_of_shard_sizes="
        f"{_sampler().__repr__().split('hash_of_shard_sizes=')[1].split(',')[0]}, "
        "window_shards=3, partitions=4, drop_remainder=False, num_epochs=1, seed=5)"
    }


def test_drop_remainder_gives_every_partition_the_same_number_of_records():
    options = grain.ShardOptions(1, 7, drop_remainder=True)
    sampler = _sampler(shard_options=options)
    assert len(sampler) == 7 * (N // 7)
    keys = sampler.record_keys(np.arange(len(sampler)))
    assert len(set(keys.tolist())) == len(sampler)
    assert set(keys[1::7].tolist()) == set(range(N // 7, 2 * (N // 7)))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_checkpoint_at_every_step_resumes_the_uninterrupted_run(workers):
    def make():
        return _loader(_sampler(num_epochs=2, window_shards=2), workers, 1, 2, [grain.Batch(7)])

    steps = None if workers == 0 else [0, 1, 5, 9, 17]
    assert_resumes_at_every_step(make, new_loader_steps=steps)


def _elastic_loader(partitions):
    """Host ``host`` of ``hosts``: the sampler carries the shard options, the loader inherits them
    (as with ShardByJaxProcess); ``partitions`` stays what it was when saving."""

    def make(ops, host, hosts, workers):
        sampler = StreamingSampler(
            helpers.NUM_RECORDS,
            records_per_shard=4,
            window_shards=2,
            seed=helpers.SEED,
            num_epochs=helpers.EPOCHS,
            shard_options=grain.ShardOptions(host, hosts),
            partitions=partitions,
        )
        return grain.DataLoader(
            data_source=grain.RangeDataSource(0, helpers.NUM_RECORDS, 1),
            sampler=sampler,
            operations=ops,
            worker_count=workers,
            read_options=NO_READ_AHEAD,
        )

    return make


@settings(max_examples=25, deadline=None)
@given(
    partitions=st.integers(1, 3),
    hosts=st.integers(1, 3),
    new_hosts=st.integers(1, 3),
    spec=st.lists(st.sampled_from(["filter", "fan"]), max_size=2).map(tuple),
    steps=st.lists(st.integers(0, 30), min_size=3, max_size=3),
)
def test_resuming_on_another_host_count_delivers_every_record_once(
    partitions, hosts, new_hosts, spec, steps
):
    _check_exactly_once(partitions, (hosts, 0, new_hosts, 0), spec, steps)


@settings(max_examples=3, deadline=None)
@given(
    layout=st.sampled_from([(1, 2, 2, 0), (2, 1, 1, 2), (1, 0, 1, 2), (1, 2, 1, 1)]),
    steps=st.lists(st.integers(0, 30), min_size=2, max_size=2),
)
def test_resuming_on_another_worker_count_delivers_every_record_once(layout, steps):
    _check_exactly_once(2, layout, ("filter",), steps)


def _check_exactly_once(partitions, layout, spec, steps):
    hosts, workers, new_hosts, new_workers = layout
    make = _elastic_loader(partitions)
    ops = helpers.operations(spec, None)
    before, states = helpers.save(ops, hosts, workers, steps, make)
    rests = helpers.resume(ops, states, new_hosts, new_workers, make)
    delivered = collections.Counter(helpers.flatten(before + [e for r in rests for e in r]))
    assert delivered == collections.Counter(helpers.flatten(list(make(ops, 0, 1, 0))))


def test_a_state_of_another_window_or_partition_count_is_refused():
    with iter(_loader(_sampler())) as iterator:
        next(iterator)
        state = iterator.get_state()
    for other in (_sampler(window_shards=4), _sampler(partitions=2), _sampler(seed=6)):
        with iter(_loader(other)) as iterator, pytest.raises(CheckpointMismatchError):
            iterator.set_state(state)
    assert "StreamingSampler" in json.loads(state)["sampler"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"records_per_shard": 4}, GrainliteValueError, "exactly one of shard_sizes"),
        ({"shard_sizes": None}, GrainliteValueError, "exactly one of shard_sizes"),
        ({"shard_sizes": [10, 20]}, GrainliteValueError, "add up to 30 records"),
        ({"shard_sizes": [N, 0]}, GrainliteValueError, r"shard_sizes\[1\] must be >= 1"),
        ({"shard_sizes": "abc"}, GrainliteTypeError, "sequence of ints"),
        ({"window_shards": 0}, GrainliteValueError, "window_shards must be >= 1"),
        ({"partitions": N + 1}, GrainliteValueError, "partitions must be in"),
        ({"seed": -1}, GrainliteValueError, r"seed must be an int in \[0, 2\*\*32 - 1\]"),
        ({"seed": 1.5}, GrainliteTypeError, "Expected seed of int type"),
        ({"num_epochs": 0}, GrainliteValueError, "num_epochs must be >= 1"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(kwargs, error, message):
    with pytest.raises(error, match=message):
        _sampler(**kwargs)


def _documented_order(n, sizes, window, seed, partitions, epochs):
    """The keys of indices ``0 .. epochs * n - 1`` by the rule in docs/how-to/streaming-order.md,
    written out in plain Python (Grain's index_shuffle, numpy's SeedSequence, SplitMix64)."""
    mask = 2**64 - 1
    shuffle = grain.experimental.index_shuffle

    def splitmix64(x):
        z = (x + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    def partition_epoch(q, e):  # the keys at positions p = 0, 1, ... of partition q in epoch e
        per, rest = divmod(n, partitions)
        start = per * q + min(q, rest)
        stop = start + per + (q < rest)
        ends = [int(x) for x in np.cumsum(sizes)]
        cuts = [start] + [x for x in ends if start < x < stop] + [stop]
        units = list(itertools.pairwise(cuts))
        count = -(-len(units) // window)
        seeds = np.random.SeedSequence([seed, q, e]).generate_state(1 + count).tolist()
        order = [shuffle(j, len(units) - 1, seeds[0]) for j in range(len(units))]
        out = []
        for w in range(count):
            laid = [k for u in order[w * window : (w + 1) * window] for k in range(*units[u])]
            m = len(laid)
            if m > 2**14:
                places = [shuffle(o, m - 1, seeds[1 + w]) for o in range(m)]
            else:
                first = (seeds[1 + w] * 0x9E3779B97F4A7C15) & mask
                hashed = [splitmix64((first + j) & mask) for j in range(m)]
                places = sorted(range(m), key=lambda j: hashed[j])
            out += [laid[place] for place in places]
        return out

    keys = []
    for e in range(epochs):
        orders = [partition_epoch(q, e) for q in range(partitions)]
        keys += [orders[r % partitions][r // partitions] for r in range(n)]
    return keys


@pytest.mark.parametrize("partitions", [1, 2])
def test_the_order_is_exactly_the_documented_rule(partitions):
    # Small windows (the SplitMix64 sort); with one partition also a window of more than 2**14
    # keys (Grain's index shuffle); two partitions cut the large shard; two epochs.
    sizes = [7, 2**14, 29, 5, 40, 33]
    n = sum(sizes)
    sampler = StreamingSampler(
        n, shard_sizes=sizes, window_shards=2, seed=9, num_epochs=2, partitions=partitions
    )
    expected = _documented_order(n, sizes, 2, 9, partitions, 2)
    assert sampler.record_keys(np.arange(2 * n)).tolist() == expected
    windows = [b - a for q in range(partitions) for a, b in sampler.order.windows(q, 0)]
    assert (max(windows) > 2**14) == (partitions == 1)
    assert min(windows) <= 2**14
