"""SharedMemoryArray: shared across real processes, pickled by name, removed by exactly one owner,
and Grain's fields, types and error types."""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import subprocess
import sys

import absl.flags
import grain.multiprocessing as real_multiprocessing
import numpy as np
import pytest

import grainlite as lite
from grainlite import shm
from grainlite.multiprocessing import (
    MultiprocessingOptions,
    SharedMemoryArray,
    SharedMemoryArrayMetadata,
)

absl.flags.FLAGS.mark_as_parsed()
pytestmark = pytest.mark.timeout(120)


def _in_dev_shm(name: str) -> bool:
    return os.path.exists(os.path.join("/dev/shm", name))


def _run_child(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout


def test_another_process_attaches_by_metadata_to_the_same_memory_and_unlink_removes_it():
    array = SharedMemoryArray((2, 3), dtype=np.int32)
    array[:] = np.arange(6, dtype=np.int32).reshape(2, 3)
    metadata = array.metadata
    assert metadata == SharedMemoryArrayMetadata(metadata.name, (2, 3), np.dtype(np.int32))
    assert shm.owner_pid(metadata.name) == os.getpid()  # stale cleanup knows its owner
    code = (
        "import pickle, sys; from grainlite.multiprocessing import SharedMemoryArray; "
        f"a = SharedMemoryArray.from_metadata(pickle.loads({pickle.dumps(metadata)!r})); "
        "sys.stdout.write(repr(a.tolist())); a[1, 2] = 50"
    )
    assert _run_child(code) == "[[0, 1, 2], [3, 4, 5]]"
    assert array[1, 2] == 50
    assert _in_dev_shm(metadata.name)  # the child only attached: the name stays
    metadata.close_and_unlink_shm()
    assert not _in_dev_shm(metadata.name)
    assert array.tolist() == [[0, 1, 2], [3, 4, 50]]  # the mapping outlives the name
    with pytest.raises(FileNotFoundError):
        SharedMemoryArray.from_metadata(metadata)


def test_a_pickled_array_attaches_in_the_receiving_process_which_removes_the_segment():
    array = SharedMemoryArray(4, dtype=np.float32)
    array[:] = [1.5, 2.5, 3.5, 4.5]
    name = array._segment.name
    code = (
        "import pickle, sys; "
        f"a = pickle.loads({pickle.dumps(array)!r}); "
        "sys.stdout.write(type(a).__name__ + repr(a.tolist())); a[0] = -1"
    )
    assert _run_child(code) == "SharedMemoryArray[1.5, 2.5, 3.5, 4.5]"
    assert array[0] == -1  # the same memory, not a copy
    assert not _in_dev_shm(name)  # the receiver owned the removal and exited
    del array
    gc.collect()
    assert not _in_dev_shm(name)


def test_an_array_whose_name_never_left_it_is_removed_when_collected():
    array = SharedMemoryArray((8,))
    name = array._segment.name
    assert _in_dev_shm(name)
    del array
    gc.collect()
    assert not _in_dev_shm(name)


def test_an_array_whose_metadata_was_taken_leaves_removal_to_the_receiver_as_in_grain():
    array = SharedMemoryArray((8,))
    metadata = array.metadata
    del array
    gc.collect()
    assert _in_dev_shm(metadata.name)
    attached = SharedMemoryArray.from_metadata(metadata)
    attached.unlink_on_del()
    del attached
    gc.collect()
    assert not _in_dev_shm(metadata.name)


def test_ufunc_results_are_plain_arrays_while_views_and_in_place_results_stay_shared():
    array = SharedMemoryArray((2, 2), dtype=np.int64)
    array += 3
    assert type(array) is SharedMemoryArray and array.tolist() == [[3, 3], [3, 3]]
    assert type(array + 1) is np.ndarray
    assert type(np.sqrt(array)) is np.ndarray
    assert type(array.sum()) is np.int64 and array.sum() == 12
    view = array[1]
    assert type(view) is SharedMemoryArray
    view[0] = 7
    assert array[1, 0] == 7
    grains = real_multiprocessing.SharedMemoryArray((2,))  # Grain gives the same types
    assert type(grains + 1) is np.ndarray and type(grains[1:]) is type(grains)
    grains.metadata.close_and_unlink_shm()


def test_metadata_has_grains_fields_and_is_frozen_and_slotted():
    grain_fields = [
        f.name for f in dataclasses.fields(real_multiprocessing.SharedMemoryArrayMetadata)
    ]
    assert [f.name for f in dataclasses.fields(SharedMemoryArrayMetadata)] == grain_fields
    metadata = SharedMemoryArrayMetadata("gl_x", (1,), np.dtype(np.uint8))
    assert not hasattr(metadata, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        metadata.name = "other"  # type: ignore[misc]


def test_a_view_into_part_of_a_segment_has_no_metadata_and_pickles_as_its_values():
    array = SharedMemoryArray((4,))
    array[:] = [0, 1, 2, 3]
    view = array[1:]
    with pytest.raises(lite.GrainliteValueError) as caught:
        view.metadata  # noqa: B018
    assert str(caught.value) == (
        f"This SharedMemoryArray of shape (3,) is a view into part of segment "
        f"{array._segment.name!r}, which metadata cannot describe (it names the whole segment "
        f"from its start); take .metadata of the array the segment was created with, or copy "
        f"the view into a new SharedMemoryArray."
    )
    copied = pickle.loads(pickle.dumps(view))
    assert type(copied) is np.ndarray and copied.tolist() == [1.0, 2.0, 3.0]


def test_an_empty_array_is_refused_with_value_error_as_in_grain():
    with pytest.raises(ValueError):
        real_multiprocessing.SharedMemoryArray((0,))
    with pytest.raises(lite.GrainliteValueError) as caught:
        SharedMemoryArray((0, 3))
    assert str(caught.value) == (
        "SharedMemoryArray must hold at least one byte (got shape (0, 3) of float64, 0 bytes); "
        "a shared-memory segment cannot be empty. Use a plain np.empty for empty arrays."
    )


def test_enable_async_del_removes_names_in_a_background_thread():
    assert isinstance(SharedMemoryArray.__dict__["enable_async_del"], classmethod)
    with pytest.raises(lite.GrainliteValueError):
        SharedMemoryArray.enable_async_del(num_threads=0)
    with pytest.raises(lite.GrainliteValueError) as raised:
        SharedMemoryArray.enable_async_del(max_outstanding_requests="x" * 100_000)
    assert str(raised.value).startswith(
        "SharedMemoryArray.enable_async_del max_outstanding_requests must be a positive int"
    )
    assert len(str(raised.value)) < 400
    SharedMemoryArray.enable_async_del(num_threads=2, max_outstanding_requests=3)
    try:
        arrays = [SharedMemoryArray((16,)) for _ in range(10)]
        names = [array._segment.name for array in arrays]
        del arrays
        gc.collect()
    finally:
        SharedMemoryArray._disable_async_del()  # waits for the pending removals
    assert not any(_in_dev_shm(name) for name in names)


class ToSharedMemory(lite.MapTransform):
    def map(self, x):
        array = SharedMemoryArray((3,), dtype=np.int64)
        array[:] = x
        return {"array": array, "x": x}


@pytest.mark.parametrize("worker_count", [0, 2], ids=["in-process", "two-workers"])
def test_a_transform_returning_a_shared_memory_array_arrives_intact_and_leaks_nothing(
    worker_count,
):
    def ours() -> set[str]:
        return {name for name in shm.list_segments() if "_arr_" in name}

    before = ours()
    loader = lite.DataLoader(
        data_source=lite.RangeDataSource(0, 6, 1),
        sampler=lite.IndexSampler(6, lite.NoSharding(), num_epochs=1),
        operations=[ToSharedMemory()],
        worker_count=worker_count,
    )
    with iter(loader) as iterator:
        elements = list(iterator)
    assert [type(e["array"]) for e in elements] == [SharedMemoryArray] * 6
    assert [e["array"].tolist() for e in elements] == [[x] * 3 for x in range(6)]
    assert len(ours() - before) == 6  # measured while the consumer holds them
    del elements
    gc.collect()
    assert ours() - before == set()


def test_grain_multiprocessing_names_are_provided():
    assert sorted(n for n in dir(real_multiprocessing) if not n.startswith("_")) == sorted(
        lite.multiprocessing.__all__
    )
    assert MultiprocessingOptions is lite.MultiprocessingOptions
