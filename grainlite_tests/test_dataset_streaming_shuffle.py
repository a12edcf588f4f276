"""StreamingShuffleMapDataset: the streaming order as a Dataset node, the sampler's order exactly.

Every epoch of an endless view reads every record once; windows bound the shards in use; host
slices read their own partition; iterators resume at every step, with and without worker
processes; ElasticIterator resumes on another shard count with every element once.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grainlite as grain
from grainlite.experimental import StreamingSampler, StreamingShuffleMapDataset
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, to_plain

pytestmark = pytest.mark.timeout(120)

SIZES = [10, 30, 5, 20, 35, 7, 1, 12]
N = sum(SIZES)


def _streaming(ds=None, **kwargs):
    args = {"shard_sizes": SIZES, "window_shards": 3, "seed": 5} | kwargs
    return StreamingShuffleMapDataset(grain.MapDataset.range(N) if ds is None else ds, **args)


def _open_shards_at_most(shards: np.ndarray) -> int:
    first = {int(s): int(np.argmax(shards == s)) for s in np.unique(shards)}
    last = {s: len(shards) - 1 - int(np.argmax(shards[::-1] == s)) for s in first}
    return max(sum(first[s] <= t <= last[s] for s in first) for t in range(len(shards)))


def test_the_node_reads_the_order_of_the_sampler_built_with_the_same_arguments():
    ds = _streaming(partitions=2)
    sampler = StreamingSampler(
        N, shard_sizes=SIZES, window_shards=3, seed=5, num_epochs=1, partitions=2
    )
    assert list(ds) == sampler.record_keys(np.arange(N)).tolist()
    assert [ds[i] for i in range(N)] == list(ds)


def test_an_endless_view_reorders_every_epoch_and_reads_each_record_once_per_epoch():
    ds = _streaming().repeat()
    epochs = [[ds[e * N + i] for i in range(N)] for e in range(3)]
    assert all(sorted(epoch) == list(range(N)) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 3
    assert _streaming(seed=5).repeat()[2 * N + 4] == epochs[2][4]  # deterministic


def test_the_epoch_reaches_the_nodes_below_as_a_shuffle_passes_it():
    below = grain.MapDataset.range(N).random_map(
        lambda x, rng: (x, int(rng.integers(10**6))), seed=1
    )
    ds = _streaming(below).repeat()
    first, second = [ds[i] for i in range(N)], [ds[N + i] for i in range(N)]
    assert sorted(x for x, _ in first) == sorted(x for x, _ in second) == list(range(N))
    assert {draw for _, draw in first} != {draw for _, draw in second}


@pytest.mark.parametrize("workers", [0, 2])
def test_every_record_once_per_epoch_through_an_iterator(workers):
    ds = _streaming(window_shards=2).repeat(2).to_iter_dataset()
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    with iter(ds) as iterator:
        delivered = list(iterator)
    assert sorted(delivered[:N]) == sorted(delivered[N:]) == list(range(N))
    if not workers:  # workers interleave their slices: the order differs, the set does not
        assert delivered == [_streaming(window_shards=2).repeat()[i] for i in range(2 * N)]


@pytest.mark.parametrize("window", [1, 2, 4])
def test_a_window_of_k_shards_bounds_the_shards_in_use_at_once(window):
    ds = _streaming(window_shards=window)
    keys = np.array(list(ds))
    shards = ds.order.shard_of(keys)
    assert _open_shards_at_most(shards) <= window
    for start, stop in ds.order.windows(0, 0):
        assert len(set(shards[start:stop].tolist())) <= window


def test_host_slices_read_their_own_partition_and_together_every_record_once():
    hosts = 3
    ds = _streaming(partitions=hosts)
    slices = [list(ds[host::hosts]) for host in range(hosts)]
    for host, got in enumerate(slices):
        assert set(got) == set(range(40 * host, 40 * (host + 1)))
        assert _open_shards_at_most(ds.order.shard_of(np.array(got))) <= 3
    assert sorted(x for got in slices for x in got) == list(range(N))


def test_drop_remainder_leaves_out_the_last_records_of_each_block():
    ds = _streaming(partitions=7, drop_remainder=True)
    assert len(ds) == 7 * (N // 7)
    assert sorted(ds) == [k for s in range(7) for k in range(s * (N // 7), (s + 1) * (N // 7))]


def test_a_dataset_iterator_resumes_at_every_step():
    assert_dataset_resumes_at_every_step(
        lambda: iter(_streaming(window_shards=2).batch(7).to_iter_dataset())
    )


def test_a_worker_pipeline_resumes_at_some_steps():
    options = grain.MultiprocessingOptions(num_workers=2)
    assert_dataset_resumes_at_every_step(
        lambda: iter(_streaming(window_shards=2).to_iter_dataset().mp_prefetch(options)),
        steps=[0, 1, 7, 60, 119],
    )


def _elastic(shard, shards, batch, partitions):
    ds = _streaming(window_shards=2, partitions=partitions)
    options = grain.sharding.ShardOptions(shard_index=shard, shard_count=shards)
    return grain.experimental.ElasticIterator(ds, batch, options)


@settings(max_examples=20, deadline=None)
@given(
    partitions=st.integers(1, 4),
    layout=st.sampled_from([(1, 2), (2, 1), (2, 4), (4, 2), (3, 1), (1, 3), (2, 2)]),
    batch_per_shard=st.integers(1, 3),
    steps=st.integers(0, 12),
)
def test_elastic_iterator_resumes_on_another_shard_count_with_every_element_once(
    partitions, layout, batch_per_shard, steps
):
    shards, new_shards = layout
    batch = batch_per_shard * shards * new_shards
    before = [_elastic(s, shards, batch, partitions) for s in range(shards)]
    seen = []
    for iterator in before:
        for _ in range(steps):
            try:
                seen += np.asarray(next(iterator)).tolist()
            except StopIteration:
                break
    state = before[0].get_state()
    assert all(it.get_state() == state for it in before)
    after = []
    for shard in range(new_shards):
        restored = _elastic(shard, new_shards, batch, partitions)
        restored.set_state(state)
        after += [x for b in restored for x in np.asarray(b).tolist()]
    ds = _streaming(window_shards=2, partitions=partitions)
    full = len(ds) // batch * batch  # ElasticIterator leaves out the tail short of a batch
    assert sorted(seen + after) == sorted(to_plain(ds[i]) for i in range(full))
