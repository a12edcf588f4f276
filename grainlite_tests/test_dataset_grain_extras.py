"""Grain's Dataset helpers in grainlite.experimental: options, cache, element specs, next index,
start_prefetch, set_slice, multithread_prefetch and the checkpoint check."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite import experimental as gx


def _stream(n: int) -> grain.IterDataset:
    return grain.MapDataset.range(n).to_iter_dataset()


class _DropAll(grain.FilterTransform):
    def filter(self, element: Any) -> bool:
        return False


def test_a_filter_that_drops_every_element_logs_grains_warning(caplog):
    ds = _stream(1000).filter(_DropAll())
    with caplog.at_level(logging.WARNING):
        assert list(ds) == []
    assert "skipped 100.00 % of the last seen 1000 elements" in caplog.text


def test_a_filter_over_the_raise_threshold_raises_a_value_error():
    ds = gx.WithOptionsIterDataset(
        _stream(1000).filter(_DropAll()), gx.DatasetOptions(filter_raise_threshold_ratio=0.5)
    )
    with pytest.raises(ValueError, match=r"skipped 100\.00 %"):
        list(ds)


def test_options_of_the_outer_node_win_and_the_inner_fill_the_rest():
    inner = gx.DatasetOptions(filter_warn_threshold_ratio=0.1, filter_raise_threshold_ratio=0.2)
    outer = gx.DatasetOptions(filter_raise_threshold_ratio=0.4)
    merged = outer.merge(inner)
    assert merged == gx.DatasetOptions(
        filter_warn_threshold_ratio=0.1, filter_raise_threshold_ratio=0.4
    )


def test_a_cache_reads_its_parent_once_across_epochs_and_resumes_from_a_state():
    calls = []

    def count(x: int) -> int:
        calls.append(x)
        return x

    ds = gx.CacheIterDataset(_stream(5).map(count))
    assert list(ds) == list(ds) == [0, 1, 2, 3, 4]
    assert calls == [0, 1, 2, 3, 4]
    it = iter(ds)
    next(it), next(it)
    state = it.get_state()
    assert state["cache_filled"] is True
    fresh = gx.CacheIterDataset(_stream(5))  # a new process: no cache yet
    resumed = iter(fresh)
    resumed.set_state(state)
    assert list(resumed) == [2, 3, 4]
    gx.assert_equal_output_after_checkpoint(gx.CacheIterDataset(_stream(6)))


def test_a_cache_under_repeat_reads_its_parent_once_in_all_epochs():
    calls = []

    def count(x: int) -> int:
        calls.append(x)
        return x

    ds = grain.experimental.LimitIterDataset(_stream(20).map(count), 6)
    ds = grain.experimental.RepeatIterDataset(gx.CacheIterDataset(ds), num_epochs=3)
    assert list(ds) == list(range(6)) * 3
    assert calls == list(range(6))


def test_a_state_taken_while_the_cache_filled_restores_from_the_cache_once_it_is_full():
    calls = []

    def count(x: int) -> int:
        calls.append(x)
        return x

    it = iter(gx.CacheIterDataset(_stream(6).map(count)))
    next(it), next(it), next(it)
    middle = it.get_state()
    assert middle["cache_filled"] is False
    assert list(it) == [3, 4, 5]
    assert it.get_state()["cache_filled"] is True
    it.set_state(middle)
    assert list(it) == [3, 4, 5]
    assert calls == list(range(6))


def test_the_element_spec_of_a_batch_follows_the_map_output_spec():
    class Parse(grain.MapTransform):
        def map(self, x: int) -> dict[str, Any]:
            return {"image": np.zeros((2, 2), np.float32)}

        def output_spec(self, input_spec: Any) -> Any:
            assert input_spec == gx.ShapeDtypeStruct((), np.int64)
            return {"image": gx.ShapeDtypeStruct((2, 2), np.float32)}

    spec = gx.get_element_spec(_stream(10).map(Parse()).batch(3, drop_remainder=True))
    assert spec == {"image": gx.ShapeDtypeStruct((3, 2, 2), np.float32)}
    assert gx.get_element_spec(grain.MapDataset.range(4).batch(3)).shape == (None,)
    with pytest.raises(ValueError, match="does not implement `output_spec`"):
        gx.get_element_spec(_stream(3).map(lambda x: x))
    with pytest.raises(NotImplementedError):
        gx.get_element_spec(grain.MapDataset.source([1, 2]))


def test_the_next_index_moves_a_stream_without_reading_and_a_filter_has_none():
    it = iter(_stream(10).map(lambda x: x * 2))
    assert gx.get_next_index(it) == 0
    gx.set_next_index(it, 7)
    assert next(it) == 14
    assert gx.get_next_index(it) == 8
    with pytest.raises(NotImplementedError):
        gx.get_next_index(iter(_stream(10).filter(lambda x: x % 2)))


def test_start_prefetch_reads_ahead_before_the_first_next():
    started = threading.Event()

    def mark(x: int) -> int:
        started.set()
        return x

    ds = gx.ThreadPrefetchIterDataset(_stream(5).map(mark), prefetch_buffer_size=2)
    with iter(ds) as it:
        it.start_prefetch()
        assert started.wait(10)
        assert list(it) == [0, 1, 2, 3, 4]


def _touch(directory: str, worker_index: int, worker_count: int) -> None:
    Path(directory, f"worker{worker_index}").write_text(str(os.getpid()))


def test_start_prefetch_starts_the_worker_processes(tmp_path):
    import functools

    ds = _stream(6).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2),
        worker_init_fn=functools.partial(_touch, str(tmp_path)),
    )
    with iter(ds) as it:
        it.start_prefetch()
        for _ in range(400):
            if len(list(tmp_path.iterdir())) == 2:
                break
            threading.Event().wait(0.05)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["worker0", "worker1"]
        assert sorted(it) == list(range(6))


def test_set_slice_keeps_one_workers_contiguous_block_of_a_source():
    ds = grain.MapDataset.range(21)
    ds.set_slice(slice(2, None, 3), sequential_slice=True)
    assert list(ds) == [14, 15, 16, 17, 18, 19, 20]
    source = grain.MapDataset.source(list(range(10)))
    source.set_slice(slice(0, None, 3), sequential_slice=True)
    assert list(source) == [0, 1, 2, 3]
    with pytest.raises(AssertionError):
        grain.MapDataset.range(5).set_slice(slice(0, 1), sequential_slice=False)


def test_multithread_prefetch_keeps_the_order_and_zero_threads_is_the_dataset_itself():
    ds = _stream(20)
    assert gx.multithread_prefetch(ds, num_threads=0, buffer_size=4) is ds
    assert list(gx.multithread_prefetch(ds, num_threads=3, buffer_size=2)) == list(range(20))


def test_the_checkpoint_check_catches_an_iterator_that_ignores_its_state():
    class Forgetful(grain.DatasetIterator):
        def __init__(self) -> None:
            super().__init__()
            self.i = 0

        def __next__(self) -> int:
            if self.i >= 4:
                raise StopIteration
            self.i += 1
            return self.i

        def get_state(self) -> dict[str, Any]:
            return {"i": self.i}

        def set_state(self, state: dict[str, Any]) -> None:
            pass  # the bug: the position is not restored

    class Source(grain.IterDataset):
        def __iter__(self) -> Forgetful:
            return Forgetful()

    with pytest.raises(AssertionError, match="step 1"):
        gx.assert_equal_output_after_checkpoint(Source())
