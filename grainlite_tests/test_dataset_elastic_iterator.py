"""ElasticIterator: Grain's batches and {"global_next_index"} state, and a checkpoint restored onto
another shard count and global batch size reading every element once."""

from __future__ import annotations

import grain as real_grain
import numpy as np
import pytest

import grainlite as grain
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, to_plain
from grainlite_tests.support.stream_checks import assert_matches_grain

pytestmark = pytest.mark.timeout(60)


def _elastic(lib, n, global_batch_size, shard, shards, **kwargs):
    ds = lib.MapDataset.range(n).shuffle(seed=3).map(lambda x: {"x": x, "y": np.int32(-x)})
    options = lib.sharding.ShardOptions(shard_index=shard, shard_count=shards)
    return lib.experimental.ElasticIterator(ds, global_batch_size, options, **kwargs)


@pytest.mark.parametrize(
    ("n", "global_batch_size", "shards"),
    [(20, 4, 2), (22, 4, 2), (23, 6, 3), (7, 8, 1)],
    ids=["even", "tail-dropped", "three-shards", "short"],
)
def test_every_shard_matches_grain_and_restores_both_ways(n, global_batch_size, shards):
    for shard in range(shards):
        assert_matches_grain(
            lambda lib, shard=shard: _elastic(lib, n, global_batch_size, shard, shards)
        )


def _xs(batches):
    return [x for batch in batches for x in np.asarray(batch["x"]).tolist()]


@pytest.mark.parametrize("lib", [grain, real_grain], ids=["grainlite", "grain"])
def test_a_checkpoint_of_two_shards_restores_on_four_with_a_larger_batch_every_element_once(lib):
    before = [_elastic(lib, 44, 4, shard, 2) for shard in range(2)]
    seen = [_xs([next(it) for _ in range(3)]) for it in before]
    state = before[0].get_state()
    assert state == before[1].get_state() == {"global_next_index": 12}
    after = []
    for shard in range(4):
        restored = _elastic(lib, 44, 8, shard, 4)
        restored.set_state(state)
        after.append(_xs(list(restored)))
    delivered = sorted(x for part in seen + after for x in part)
    assert delivered == list(range(44))  # 12 before, 32 after: each element exactly once
    assert restored.get_state() == {"global_next_index": 44}


def test_grainlite_and_grain_give_the_same_batches_after_the_reshard():
    def rest(lib, shard):
        restored = _elastic(lib, 30, 6, shard, 3)
        restored.set_state({"global_next_index": 10})
        return [to_plain(batch) for batch in restored]

    for shard in range(3):
        assert rest(grain, shard) == rest(real_grain, shard)


def test_elastic_iterator_resumes_at_every_step():
    assert_dataset_resumes_at_every_step(lambda: _elastic(grain, 26, 4, 1, 2))


def test_worker_processes_give_the_same_batches_and_states():
    options = grain.MultiprocessingOptions(num_workers=2)
    with _elastic(grain, 26, 4, 1, 2) as in_process:
        expected = [(to_plain(b), in_process.get_state()) for b in in_process]
    with _elastic(grain, 26, 4, 1, 2, multiprocessing_options=options) as workers:
        assert [(to_plain(b), workers.get_state()) for b in workers] == expected
    with _elastic(grain, 26, 4, 1, 2, multiprocessing_options=options) as restored:
        restored.set_state({"global_next_index": 8})
        assert [to_plain(b) for b in restored] == [batch for batch, _ in expected[2:]]


def test_a_filter_is_refused_as_in_grain():
    ds = grain.MapDataset.range(10).filter(lambda x: x % 2)
    options = grain.sharding.ShardOptions(shard_index=0, shard_count=1)
    with pytest.raises(ValueError, match="ElasticIterator does not support `filter`"):
        grain.experimental.ElasticIterator(ds, 2, options)


def test_a_global_batch_size_the_shard_count_does_not_divide_is_refused():
    options = grain.sharding.ShardOptions(shard_index=0, shard_count=3)
    with pytest.raises(ValueError, match="Global batch size 4 is not divisible by shard count 3"):
        grain.experimental.ElasticIterator(grain.MapDataset.range(10), 4, options)


def test_a_numpy_integer_global_next_index_restores_as_in_grain():
    def rest(lib, index):
        restored = _elastic(lib, 30, 6, 1, 3)
        restored.set_state({"global_next_index": index})
        return [to_plain(batch) for batch in restored], int(
            restored.get_state()["global_next_index"]
        )

    assert rest(grain, np.int64(12)) == rest(real_grain, np.int64(12)) == rest(grain, 12)
    restored = _elastic(grain, 30, 6, 1, 3)
    restored.set_state({"global_next_index": np.int32(6)})
    assert restored.get_state() == {"global_next_index": 6}
    assert type(restored.get_state()["global_next_index"]) is int


@pytest.mark.parametrize("index", [2.0, "2", None], ids=["float", "str", "none"])
def test_a_global_next_index_that_is_no_integer_is_a_type_error_as_in_grain(index):
    theirs = _elastic(real_grain, 30, 6, 1, 3)
    with pytest.raises(TypeError):  # Grain: at the first next()
        theirs.set_state({"global_next_index": index})
        next(theirs)
    with pytest.raises(
        TypeError, match=r"global_next_index must be an int .*ElasticIterator\.get_state"
    ):
        _elastic(grain, 30, 6, 1, 3).set_state({"global_next_index": index})


def test_a_negative_global_next_index_is_a_value_error_naming_the_fix():
    with pytest.raises(ValueError, match=r"global_next_index must be an int >= 0 \(got -1\)"):
        _elastic(grain, 30, 6, 1, 3).set_state({"global_next_index": -1})
