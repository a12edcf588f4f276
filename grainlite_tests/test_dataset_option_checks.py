"""The Dataset API's count options all follow :func:`grainlite.checks.int_option`'s rule.

A Python or numpy integer is accepted (a bool is not), a wrong type is a TypeError, a value
below the minimum a ValueError (the types Grain 0.2.18 raises), and a message quotes at most
~200 characters of the value.
"""

from __future__ import annotations

import absl.flags
import grain.python as real_grain
import numpy as np
import pytest

import grainlite as grain

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed

LONG = "x" * 10_000  # a bad value far longer than a message may quote


def _stream():
    return grain.MapDataset.range(6).to_iter_dataset()


def test_grains_own_options_with_numpy_counts_run_mp_prefetch_with_plain_int_counts():
    options = real_grain.MultiprocessingOptions(
        num_workers=np.int64(0), per_worker_buffer_size=np.int64(2)
    )
    ds = _stream().mp_prefetch(options)
    assert list(ds) == list(range(6))
    assert type(ds.multiprocessing_options.num_workers) is int
    assert type(ds.multiprocessing_options.per_worker_buffer_size) is int


@pytest.mark.parametrize("name", ["num_workers", "per_worker_buffer_size"])
def test_a_negative_count_in_grains_own_options_is_a_value_error_naming_the_count(name):
    options = real_grain.MultiprocessingOptions(**{name: -1})
    with pytest.raises(ValueError, match=f"mp_prefetch options {name} .* got -1;"):
        _stream().mp_prefetch(options)


def test_a_huge_bad_count_in_mp_prefetch_options_is_quoted_short():
    options = real_grain.MultiprocessingOptions(num_workers=LONG)
    with pytest.raises(TypeError) as caught:
        _stream().mp_prefetch(options)
    assert "num_workers" in str(caught.value)
    assert len(str(caught.value)) < 500


def test_a_negative_thread_prefetch_buffer_size_carries_grains_whole_message():
    with pytest.raises(ValueError) as grains:
        real_grain.experimental.ThreadPrefetchIterDataset(
            real_grain.MapDataset.range(6).to_iter_dataset(), prefetch_buffer_size=-1
        )
    with pytest.raises(ValueError) as ours:
        grain.experimental.ThreadPrefetchIterDataset(_stream(), prefetch_buffer_size=-1)
    assert str(grains.value).rstrip(".") in str(ours.value)


@pytest.mark.parametrize(
    "make",
    [
        lambda v: grain.experimental.ThreadPrefetchIterDataset(_stream(), prefetch_buffer_size=v),
        lambda v: grain.experimental.multithread_prefetch(_stream(), num_threads=v, buffer_size=2),
        lambda v: grain.experimental.multithread_prefetch(_stream(), num_threads=1, buffer_size=v),
    ],
    ids=[
        "ThreadPrefetchIterDataset",
        "multithread_prefetch-threads",
        "multithread_prefetch-buffer",
    ],
)
def test_thread_prefetch_counts_take_numpy_ints_and_refuse_bools(make):
    assert list(make(np.int64(2))) == list(range(6))
    with pytest.raises(TypeError, match="must be an int, got bool True;"):
        make(True)


def test_a_wrong_thread_count_is_a_grainlite_type_error_quoted_short():
    with pytest.raises(grain.errors.GrainliteError) as caught:
        grain.experimental.multithread_prefetch(_stream(), num_threads=LONG, buffer_size=2)
    assert isinstance(caught.value, TypeError)
    assert "multithread_prefetch num_threads must be an int, got str 'xxx" in str(caught.value)
    assert len(str(caught.value)) < 500


@pytest.mark.parametrize(
    "make, two",
    [
        (
            lambda v: grain.experimental.RepeatIterDataset(_stream(), num_epochs=v),
            list(range(6)) * 2,
        ),
        (lambda v: grain.experimental.LimitIterDataset(_stream(), count=v), [0, 1]),
    ],
    ids=["RepeatIterDataset", "LimitIterDataset"],
)
def test_repeat_and_limit_of_a_stream_take_numpy_ints_and_refuse_bools(make, two):
    assert list(make(np.int64(2))) == two
    with pytest.raises(TypeError, match="must be an int, got bool True;"):
        make(True)


@pytest.mark.parametrize("count", [0, -1])
def test_a_limit_below_one_states_its_rule_without_grains_sentence_that_contradicts_it(count):
    # Grain refuses 0 too, while its sentence says a non-negative count is accepted.
    with pytest.raises(ValueError) as grains:
        real_grain.experimental.LimitIterDataset(
            real_grain.MapDataset.range(6).to_iter_dataset(), count=count
        )
    assert str(grains.value) == f"Count must be a non-negative integer. Got {count}"
    with pytest.raises(ValueError) as ours:
        grain.experimental.LimitIterDataset(_stream(), count=count)
    assert str(ours.value) == (
        f"LimitIterDataset count must be an int >= 1, got {count}; pass how many elements to "
        "keep (>= 1)."
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda v: grain.MapDataset.range(6).repeat(num_epochs=v),
        lambda v: grain.experimental.RepeatIterDataset(_stream(), num_epochs=v),
        lambda v: grain.experimental.LimitIterDataset(_stream(), count=v),
    ],
    ids=["MapDataset.repeat", "RepeatIterDataset", "LimitIterDataset"],
)
def test_a_huge_bad_repeat_or_limit_count_is_quoted_short(make):
    with pytest.raises(TypeError) as caught:
        make(LONG)
    assert "got str 'xxx" in str(caught.value)
    assert len(str(caught.value)) < 500


WINDOW_AND_CYCLE = [
    lambda v: grain.experimental.WindowShuffleMapDataset(
        grain.MapDataset.range(6), window_size=v, seed=1
    ),
    lambda v: grain.experimental.WindowShuffleIterDataset(_stream(), window_size=v, seed=1),
    lambda v: grain.experimental.InterleaveIterDataset([_stream(), _stream()], cycle_length=v),
]
WINDOW_AND_CYCLE_IDS = ["WindowShuffleMapDataset", "WindowShuffleIterDataset", "Interleave"]


@pytest.mark.parametrize("make", WINDOW_AND_CYCLE, ids=WINDOW_AND_CYCLE_IDS)
def test_window_sizes_and_cycle_lengths_take_numpy_ints_and_refuse_bools(make):
    assert list(make(np.int64(2))) == list(make(2))
    with pytest.raises(TypeError, match="must be an int, got bool True;"):
        make(True)


@pytest.mark.parametrize("make", WINDOW_AND_CYCLE, ids=WINDOW_AND_CYCLE_IDS)
def test_a_huge_bad_window_size_or_cycle_length_is_quoted_short(make):
    with pytest.raises(TypeError) as caught:
        make(LONG)
    assert "got str 'xxx" in str(caught.value)
    assert len(str(caught.value)) < 500


def test_a_cycle_length_below_one_is_still_grains_index_error():
    with pytest.raises(IndexError, match=r"cycle_length >= 1 \(got 2 datasets, cycle_length=0\)"):
        grain.experimental.InterleaveIterDataset([_stream(), _stream()], cycle_length=0)


def _fan_out_transform(fan_out):
    class Split(grain.experimental.FlatMapTransform):
        max_fan_out = fan_out

        def flat_map(self, element):
            return [element]

    return Split()


def test_a_max_fan_out_of_the_wrong_type_is_a_type_error_quoted_short():
    with pytest.raises(TypeError) as caught:
        grain.experimental.FlatMapMapDataset(grain.MapDataset.range(4), _fan_out_transform(LONG))
    assert "max_fan_out must be a positive int (got 'xxx" in str(caught.value)
    assert len(str(caught.value)) < 500


def test_a_max_fan_out_below_one_is_still_a_value_error():
    with pytest.raises(ValueError, match=r"max_fan_out must be a positive int \(got 0 on Split\)"):
        grain.experimental.FlatMapMapDataset(grain.MapDataset.range(4), _fan_out_transform(0))


def test_a_huge_bad_batch_size_is_quoted_short():
    with pytest.raises(TypeError) as caught:
        grain.MapDataset.range(4).batch(LONG)
    assert "batch_size must be an int, got 'xxx" in str(caught.value)
    assert len(str(caught.value)) < 500
