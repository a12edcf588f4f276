"""``DatasetOptions`` act on the whole pipeline, as in Grain: options set below a prefetch or
``mp_prefetch`` (real worker processes) reach a filter after it, the outer node wins a field two
nodes set, one ``mix`` input's options reach the other's filter, an interleave's inputs get the
options set after it (theirs fill the rest and stay with them), and the filter check fires at or
above its ratio (0 turns it off)."""

from __future__ import annotations

import logging

import pytest

import grainlite as grain
from grainlite import experimental as gx

pytestmark = pytest.mark.timeout(120)

_RAISE_AT_10 = gx.DatasetOptions(filter_raise_threshold_ratio=0.1)
_RAISE_AT_90 = gx.DatasetOptions(filter_raise_threshold_ratio=0.9)


def _above_two(x: int) -> bool:
    return x > 2


def _even(x: int) -> bool:
    return x % 2 == 0


def _ones_twos_threes() -> grain.IterDataset:
    """3000 elements; a filter keeping those above 2 drops two thirds of every window."""
    return grain.MapDataset.source([1, 2, 3]).repeat(1000).to_iter_dataset()


def _workers(n: int) -> grain.MultiprocessingOptions:
    return grain.MultiprocessingOptions(num_workers=n)


def _raises_at_the_filter(ds: grain.IterDataset) -> None:
    with iter(ds) as iterator, pytest.raises(ValueError, match=r"skipped 66\.\d\d %"):
        list(iterator)


def test_options_set_below_a_thread_prefetch_reach_a_filter_after_it():
    ds = gx.WithOptionsIterDataset(_ones_twos_threes(), _RAISE_AT_10)
    ds = gx.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=2).filter(_above_two)
    _raises_at_the_filter(ds)


@pytest.mark.parametrize("threads", [1, 2])
def test_options_set_below_multithread_prefetch_reach_a_filter_after_it(threads):
    ds = gx.WithOptionsIterDataset(_ones_twos_threes(), _RAISE_AT_10)
    ds = gx.multithread_prefetch(ds, num_threads=threads, buffer_size=1).filter(_above_two)
    _raises_at_the_filter(ds)


def test_options_set_below_an_iter_dataset_map_reach_a_filter_after_it():
    ds = gx.WithOptionsIterDataset(_ones_twos_threes(), _RAISE_AT_10)
    _raises_at_the_filter(ds.map(lambda x: x).filter(_above_two))


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_options_set_in_the_pipeline_of_mp_prefetch_workers_reach_a_filter_after_it(workers):
    ds = gx.WithOptionsIterDataset(_ones_twos_threes(), _RAISE_AT_10)
    _raises_at_the_filter(ds.mp_prefetch(_workers(workers)).filter(_above_two))


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_a_map_dataset_filter_read_in_mp_prefetch_workers_checks_the_options_set_after_it(
    workers,
):
    ds = grain.MapDataset.source([1, 2, 3]).repeat(1000).filter(_above_two).to_iter_dataset()
    ds = gx.WithOptionsIterDataset(ds.mp_prefetch(_workers(workers)), _RAISE_AT_10)
    with iter(ds) as iterator, pytest.raises(ValueError, match=r"PrefetchDatasetIterator"):
        list(iterator)


def test_options_set_after_mp_prefetch_win_over_those_set_in_its_workers_pipeline():
    inner_low = gx.WithOptionsIterDataset(_ones_twos_threes().filter(_above_two), _RAISE_AT_10)
    allowed = gx.WithOptionsIterDataset(inner_low.mp_prefetch(_workers(2)), _RAISE_AT_90)
    with iter(allowed) as iterator:
        assert list(iterator) == [3] * 1000

    inner_high = gx.WithOptionsIterDataset(_ones_twos_threes().filter(_above_two), _RAISE_AT_90)
    refused = gx.WithOptionsIterDataset(inner_high.mp_prefetch(_workers(2)), _RAISE_AT_10)
    _raises_at_the_filter(refused)


def test_an_outer_node_that_sets_only_the_warning_keeps_the_inner_raise_ratio():
    ds = gx.WithOptionsIterDataset(_ones_twos_threes().filter(_above_two), _RAISE_AT_10)
    ds = gx.WithOptionsIterDataset(ds, gx.DatasetOptions(filter_warn_threshold_ratio=None))
    _raises_at_the_filter(ds)


def test_an_outer_node_that_sets_the_raise_ratio_to_none_turns_the_inner_one_off():
    ds = gx.WithOptionsIterDataset(_ones_twos_threes().filter(_above_two), _RAISE_AT_10)
    ds = gx.WithOptionsIterDataset(ds, gx.DatasetOptions(filter_raise_threshold_ratio=None))
    assert list(ds) == [3] * 1000


def test_the_options_of_one_mix_input_reach_a_filter_in_the_other():
    with_options = gx.WithOptionsIterDataset(_ones_twos_threes(), _RAISE_AT_10)
    filtered = _ones_twos_threes().filter(_above_two)
    _raises_at_the_filter(grain.IterDataset.mix([with_options, filtered], [0.5, 0.5]))


def test_options_of_one_pipeline_do_not_reach_another_pipeline_over_the_same_source():
    source = _ones_twos_threes()
    with_options = gx.WithOptionsIterDataset(source, _RAISE_AT_10)
    with iter(with_options) as first:
        assert next(first) == 1
        # Built while the first pipeline's iterator is alive, from the same source node.
        assert list(source.filter(_above_two)) == [3] * 1000


def test_a_filter_dropping_exactly_the_raise_ratio_raises():
    ds = grain.MapDataset.range(2000).to_iter_dataset().filter(_even)
    ds = gx.WithOptionsIterDataset(ds, gx.DatasetOptions(filter_raise_threshold_ratio=0.5))
    with pytest.raises(ValueError, match=r"skipped 50\.00 %"):
        list(ds)


def test_a_map_dataset_filter_dropping_exactly_the_raise_ratio_raises():
    ds = grain.MapDataset.range(2000).filter(_even).to_iter_dataset()
    ds = gx.WithOptionsIterDataset(ds, gx.DatasetOptions(filter_raise_threshold_ratio=0.5))
    with pytest.raises(ValueError, match=r"skipped 50\.00 %"):
        list(ds)


def test_ratios_of_zero_turn_the_filter_checks_off(caplog):
    off = gx.DatasetOptions(filter_raise_threshold_ratio=0.0, filter_warn_threshold_ratio=0.0)
    iter_filter = grain.MapDataset.range(2000).to_iter_dataset().filter(lambda x: False)
    map_filter = grain.MapDataset.range(2000).filter(lambda x: False).to_iter_dataset()
    with caplog.at_level(logging.WARNING):
        assert list(gx.WithOptionsIterDataset(iter_filter, off)) == []
        assert list(gx.WithOptionsIterDataset(map_filter, off)) == []
    assert "skipped" not in caplog.text


def test_options_set_after_an_interleave_reach_the_inputs_it_opens_while_reading():
    first = grain.MapDataset.range(3).to_iter_dataset()
    later = _ones_twos_threes().filter(_above_two)  # opened when `first` ends
    ds = gx.InterleaveIterDataset([first, later], cycle_length=1)
    _raises_at_the_filter(gx.WithOptionsIterDataset(ds, _RAISE_AT_10))


def test_options_set_in_an_interleave_input_stay_with_that_input():
    with_options = gx.WithOptionsIterDataset(_ones_twos_threes(), _RAISE_AT_10)
    after = gx.InterleaveIterDataset([with_options, _ones_twos_threes()], cycle_length=2)
    assert list(after.filter(_above_two)) == [3] * 2000

    filtered_inside = gx.WithOptionsIterDataset(
        _ones_twos_threes().filter(_above_two), _RAISE_AT_10
    )
    _raises_at_the_filter(gx.InterleaveIterDataset([filtered_inside], cycle_length=1))


def test_options_set_after_an_interleave_win_over_those_of_its_inputs():
    inner = gx.WithOptionsIterDataset(_ones_twos_threes().filter(_above_two), _RAISE_AT_10)
    ds = gx.InterleaveIterDataset([inner], cycle_length=1)
    assert list(gx.WithOptionsIterDataset(ds, _RAISE_AT_90)) == [3] * 1000
