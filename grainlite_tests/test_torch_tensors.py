"""Batches to tensors without a copy, and the pinning thread."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

import grainlite as grain
from grainlite.engine.producer import value_of
from grainlite.torch import TorchDataLoader
from grainlite.torch.tensors import can_pin, start_pinning, to_tensors
from grainlite_tests.support.torch_records import records

pytestmark = pytest.mark.timeout(60)

Pair = collections.namedtuple("Pair", ["a", "b"])


def test_numeric_arrays_become_tensors_that_view_the_same_memory():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = to_tensors({"x": array})["x"]
    assert isinstance(tensor, torch.Tensor)
    assert tensor.data_ptr() == array.ctypes.data  # no copy
    array[0, 0] = 42
    assert tensor[0, 0].item() == 42


@pytest.mark.parametrize(
    "dtype", ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"]
)
def test_every_numeric_dtype_arrives_with_its_values(dtype):
    array = np.arange(4).astype(dtype)
    assert to_tensors(array).tolist() == array.tolist()


def test_strings_bytes_and_object_arrays_stay_as_they_are_and_containers_keep_their_types():
    strings = np.array(["a", "b"])
    objects = np.array([{"k": 1}, None], dtype=object)
    batch = {"z": Pair(np.int32(3), "text"), "s": strings, "o": objects, "b": b"raw"}
    out = to_tensors(batch)
    assert list(out) == ["z", "s", "o", "b"]
    assert type(out["z"]) is Pair and out["z"].b == "text"
    assert isinstance(out["z"].a, torch.Tensor) and out["z"].a.shape == () and out["z"].a == 3
    assert out["s"] is strings and out["o"] is objects and out["b"] == b"raw"


def test_big_endian_and_reversed_arrays_arrive_with_their_values():
    big_endian = np.arange(3, dtype=">i4")
    reversed_view = np.arange(4)[::-1]
    assert to_tensors(big_endian).tolist() == [0, 1, 2]
    assert to_tensors(reversed_view).tolist() == [3, 2, 1, 0]


def test_a_tensor_keeps_its_worker_slab_leased_while_later_batches_arrive():
    with TorchDataLoader(
        data_source=records(64), operations=[grain.Batch(4)], worker_count=1
    ) as loader:
        batches = iter(loader)
        kept = next(batches)["x"]
        before = kept.clone()
        for _ in range(10):
            next(batches)  # the worker writes these into its slabs, never into the kept one
        assert torch.equal(kept, before)


def test_the_pinning_thread_hands_over_batches_then_the_end():
    items = iter([(np.ones(2), "a"), (np.zeros(2), "b")])

    def fetch():
        array, extra = next(items)
        return to_tensors(array), extra

    thread = start_pinning(fetch, pin=can_pin())
    try:
        assert thread.get().state == "a"
        assert thread.get().state == "b"
        for _ in range(2):
            with pytest.raises(StopIteration):
                value_of(thread.get())
    finally:
        thread.stop()


def test_the_pinning_thread_raises_a_fetch_error_in_the_batch_place():
    def fetch():
        raise ValueError("the worker failed")

    thread = start_pinning(fetch, pin=False)
    try:
        with pytest.raises(ValueError, match="the worker failed"):
            value_of(thread.get())
        with pytest.raises(StopIteration):  # raised once: the stream ends after it
            value_of(thread.get())
    finally:
        thread.stop()


@pytest.mark.skipif(not can_pin(), reason="pinning needs an accelerator")
def test_pinned_batches_are_in_page_locked_memory():
    with TorchDataLoader(
        data_source=records(8), operations=[grain.Batch(2)], pin_memory=True
    ) as loader:
        assert next(iter(loader))["x"].is_pinned()
