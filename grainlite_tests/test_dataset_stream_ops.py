"""RepeatIterDataset, LimitIterDataset, RebatchIterDataset and batch_and_pad: Grain's elements and
states, restores, and these stream nodes together under mp_prefetch."""

from __future__ import annotations

import grain as real_grain
import numpy as np
import pytest

import grainlite as grain
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, to_plain
from grainlite_tests.support.stream_checks import assert_matches_grain

pytestmark = pytest.mark.timeout(60)


def _stream(lib, n):
    return lib.MapDataset.range(n).to_iter_dataset()


def _is_empty_batch(plain):
    """A batch of zero rows, in comparable form (Grain's rebatch yields one after some restores)."""
    if isinstance(plain, tuple) and plain[0] == "array":
        return plain[2][:1] == (0,)
    if isinstance(plain, dict):
        return all(_is_empty_batch(value) for _, value in plain["dict"])
    if isinstance(plain, tuple) and plain[0] == "tuple":
        return all(_is_empty_batch(value) for value in plain[1])
    return False


@pytest.mark.parametrize(("n", "num_epochs"), [(3, 3), (4, 1), (0, 2)])
def test_repeat_matches_grain_and_restores_both_ways(n, num_epochs):
    def build(lib):
        return iter(lib.experimental.RepeatIterDataset(_stream(lib, n), num_epochs=num_epochs))

    assert_matches_grain(build)


def test_an_endless_repeat_goes_on_and_an_endless_repeat_of_nothing_ends():
    endless = iter(grain.experimental.RepeatIterDataset(_stream(grain, 2)))
    assert [next(endless) for _ in range(5)] == [0, 1, 0, 1, 0]
    assert endless.get_state() == {"parent": {"next_index": 1}, "epoch": 2}
    assert list(grain.experimental.RepeatIterDataset(_stream(grain, 0))) == []


def test_repeat_rejects_zero_epochs():
    with pytest.raises(ValueError, match="num_epochs must be positive, but got 0"):
        grain.experimental.RepeatIterDataset(_stream(grain, 2), num_epochs=0)


@pytest.mark.parametrize(("n", "count"), [(5, 3), (2, 3), (4, 4)])
def test_limit_matches_grain_and_restores_both_ways(n, count):
    def build(lib):
        return iter(lib.experimental.LimitIterDataset(_stream(lib, n), count))

    assert_matches_grain(build)


def test_limit_does_not_read_the_parent_past_the_count():
    reads = []
    ds = _stream(grain, 10).map(lambda x: reads.append(x) or x)
    assert list(grain.experimental.LimitIterDataset(ds, 3)) == [0, 1, 2]
    assert reads == [0, 1, 2]


def test_limit_rejects_a_count_of_zero():
    rule = r"count must be an int >= 1, got 0; pass how many elements to keep \(>= 1\)"
    with pytest.raises(ValueError, match=rule):
        grain.experimental.LimitIterDataset(_stream(grain, 2), 0)


@pytest.mark.parametrize(
    ("n", "parent_batch", "batch_size", "drop_remainder"),
    [(10, 3, 4, False), (10, 3, 4, True), (8, 4, 4, False), (8, 2, 3, False), (7, 5, 2, True)],
)
def test_rebatch_matches_grain_and_restores_both_ways(n, parent_batch, batch_size, drop_remainder):
    def build(lib):
        ds = _stream(lib, n).batch(parent_batch)
        return iter(lib.experimental.RebatchIterDataset(ds, batch_size, drop_remainder))

    # Grain restored at the end of a used-up parent batch yields an empty batch: see below.
    assert_matches_grain(build, grain_extra=_is_empty_batch)


def test_a_restore_past_the_last_row_yields_nothing_where_grain_yields_an_empty_batch():
    def rest(lib):
        ds = lib.experimental.RebatchIterDataset(_stream(lib, 8).batch(4), 4)
        iterator = iter(ds)
        iterator.set_state({"parent": {"next_index": 4}, "batch_idx": 4})
        return [batch.tolist() for batch in iterator]

    assert rest(grain) == []
    assert rest(real_grain) == [[]]  # Grain 0.2.18's extra batch of zero rows


def test_rebatch_of_nested_batches_matches_grain():
    def element(x):
        return {"b": np.array([x, -x], np.int16), "a": (x, "t")}

    def build(lib):
        ds = _stream(lib, 10).map(element).batch(3)
        return iter(lib.experimental.RebatchIterDataset(ds, 2))

    assert_matches_grain(build, grain_extra=_is_empty_batch)


def test_rebatch_of_elements_without_a_batch_dimension_is_a_type_error():
    with pytest.raises(TypeError, match="RebatchIterDataset needs batches"):
        list(grain.experimental.RebatchIterDataset(_stream(grain, 3), 2))


BATCH_AND_PAD_CASES = {
    "arrays": ([np.array([1, 2]), np.array([3, 4])], {"batch_size": 4}),
    "dict": ([{"b": 1, "a": np.ones(2)}], {"batch_size": 2, "pad_value": -1}),
    "ints": ([1, 2], {"batch_size": 3}),
    "floats": ([1.5], {"batch_size": 2}),
    "int8": ([np.array([1, 2], dtype=np.int8)], {"batch_size": 2, "pad_value": 7}),
    "full": ([1, 2], {"batch_size": 2}),
}


@pytest.mark.parametrize(
    ("values", "kwargs"), BATCH_AND_PAD_CASES.values(), ids=BATCH_AND_PAD_CASES
)
def test_batch_and_pad_matches_grain(values, kwargs):
    expected = real_grain.experimental.batch_and_pad(values, **kwargs)
    assert to_plain(grain.experimental.batch_and_pad(values, **kwargs)) == to_plain(expected)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1, 2, 3], r"Cannot batch 3 values to 2. batch_and_pad pads up to batch_size"),
        ([], r"Cannot batch 0 values. batch_and_pad needs at least one element"),
    ],
)
def test_batch_and_pad_rejects_too_many_or_no_values(values, message):
    with pytest.raises(ValueError, match=message):
        grain.experimental.batch_and_pad(values, batch_size=2)


def test_batch_and_pad_as_batch_fn_keeps_the_last_batch_full_size():
    def pad(values):
        return grain.experimental.batch_and_pad(values, batch_size=3)

    batches = list(_stream(grain, 7).batch(3, batch_fn=pad))
    assert [b.tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 0, 0]]


def _stream_ops_pipeline():
    ds = grain.MapDataset.range(40).to_iter_dataset()
    ds = grain.experimental.WindowShuffleIterDataset(ds, window_size=4, seed=5)
    ds = grain.experimental.ZipIterDataset([ds, grain.MapDataset.range(100, 140).to_iter_dataset()])
    ds = grain.experimental.ThreadPrefetchIterDataset(ds.batch(3), prefetch_buffer_size=2)
    ds = grain.experimental.RebatchIterDataset(ds, 4)
    ds = grain.experimental.RepeatIterDataset(ds, num_epochs=2)
    return grain.experimental.LimitIterDataset(ds, 13)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_stream_nodes_together_resume_in_process_and_under_mp_prefetch(workers):
    def make():
        if workers == 0:
            return iter(_stream_ops_pipeline())
        return iter(_stream_ops_pipeline().mp_prefetch(grain.MultiprocessingOptions(workers)))

    # Under mp_prefetch every restore starts worker processes: one step there.
    assert_dataset_resumes_at_every_step(make, steps=None if workers == 0 else [6])


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_the_element_spec_of_a_rebatch_has_its_batch_size_as_first_axis_like_grains(
    drop_remainder,
):
    def spec(lib):
        ds = lib.MapDataset.range(10).batch(3, drop_remainder=True).to_iter_dataset()
        rebatched = lib.experimental.RebatchIterDataset(ds, 4, drop_remainder=drop_remainder)
        found = lib.experimental.get_element_spec(rebatched)
        return tuple(found.shape), np.dtype(found.dtype)

    assert spec(grain) == spec(real_grain) == ((4,), np.dtype(np.int64))


@pytest.mark.parametrize("first_rows", [0, 4])
def test_a_parent_batch_of_no_rows_is_a_value_error_naming_grains_text_and_the_fix(first_rows):
    batches = [np.full((first_rows, 3), 1), np.full((0, 3), 1), np.full((4, 3), 1)]
    ds = grain.MapDataset.source(batches).to_iter_dataset()
    with pytest.raises(ValueError, match="starting batch size of 0 is not supported") as raised:
        list(grain.experimental.RebatchIterDataset(ds, 3))
    assert "leave empty batches out" in str(raised.value)
