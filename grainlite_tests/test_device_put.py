"""``grainlite.device_put`` and ``grain.experimental.device_put`` on 8 virtual CPU devices.

Every test runs in the device lab (``device_lab.py``): one child interpreter started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``, so this module never changes the JAX of
the other test modules (which start it with one device).
"""

from __future__ import annotations

import gc
import json
import os
import threading
from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite_tests.support import contracts
from grainlite_tests.support.device_lab import DEVICE_COUNT, in_lab, lab_session
from grainlite_tests.support.processes import loader_processes
from grainlite_tests.support.waiting import wait_for

pytest.importorskip("jax")

pytestmark = pytest.mark.timeout(120)

DEADLINE_S = 10.0


@pytest.fixture(scope="module", autouse=True)
def lab():
    yield from lab_session()


# Helpers (they run in the lab) -----------------------------------------------------------------


class Pixels(grain.MapTransform):
    """Record ``i`` -> ``{"image": uint8[4, 4, 3] filled with i, "label": i % 10}``."""

    def map(self, i: int) -> dict[str, np.ndarray]:
        return {"image": np.full((4, 4, 3), i % 256, np.uint8), "label": np.int32(i % 10)}


class FailOnFive(grain.MapTransform):
    def map(self, i: int) -> int:
        if int(i) == 5:
            raise KeyError(f"record {int(i)}")
        return i


def make_loader(num_records: int = 40, batch_size: int = 8, workers: int = 0) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, num_records, 1),
        sampler=grain.IndexSampler(
            num_records, grain.NoSharding(), shuffle=True, num_epochs=1, seed=7
        ),
        operations=[Pixels(), grain.Batch(batch_size)],
        worker_count=workers,
    )


def host_values(tree: Any) -> Any:
    import jax

    return jax.tree.map(np.asarray, tree)


def assert_bit_equal(a: Any, b: Any) -> None:
    import jax

    leaves_a, leaves_b = jax.tree.leaves(host_values(a)), jax.tree.leaves(host_values(b))
    assert len(leaves_a) == len(leaves_b), (len(leaves_a), len(leaves_b))
    for x, y in zip(leaves_a, leaves_b):
        assert x.dtype == y.dtype and x.shape == y.shape, (x.dtype, y.dtype, x.shape, y.shape)
        assert x.tobytes() == y.tobytes(), (x, y)


def device_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("grainlite-device-put")]


def random_flip(batch: dict[str, Any], key: Any) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    flip = jax.random.bernoulli(key, 0.5, (batch["image"].shape[0], 1, 1, 1))
    noise = jax.random.uniform(key, batch["image"].shape[:1])
    image = jnp.where(flip, batch["image"][:, :, ::-1], batch["image"])
    return {**batch, "image": image, "noise": noise}


def normalize(batch: dict[str, Any]) -> dict[str, Any]:
    return {**batch, "image": batch["image"].astype("float32") / 255.0}


class HostView:
    """A device iterator whose elements are read back to numpy, for the shared contracts."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> HostView:
        return self

    def __next__(self) -> Any:
        return host_values(next(self.inner))

    def get_state(self) -> Any:
        return self.inner.get_state()

    def set_state(self, state: Any) -> None:
        self.inner.set_state(state)

    def __enter__(self) -> HostView:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.inner.close()


class DeviceLoader:
    """``iter()`` gives ``device_put`` of a fresh loader's iterator, read back as numpy."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def __iter__(self) -> HostView:
        return HostView(grain.device_put(iter(make_loader()), **self.options))


# Placement ---------------------------------------------------------------------------------------


@in_lab
def test_the_lab_has_eight_cpu_devices():
    import jax

    assert jax.device_count() == DEVICE_COUNT
    assert {d.platform for d in jax.devices()} == {"cpu"}


@in_lab
def test_each_batch_lands_on_the_device_asked_for_bit_equal_to_the_host_batch():
    import jax

    target = jax.devices()[5]
    host = list(make_loader())
    with grain.device_put(make_loader(), sharding=target) as batches:
        placed = list(batches)
    assert len(placed) == len(host) == 5
    for on_device, on_host in zip(placed, host):
        for leaf in jax.tree.leaves(on_device):
            assert isinstance(leaf, jax.Array) and leaf.devices() == {target}, leaf.devices()
        assert_bit_equal(on_device, on_host)


@in_lab
def test_no_sharding_means_jaxs_default_device():
    import jax

    with grain.device_put(make_loader(), prefetch=1) as batches:
        batch = next(batches)
    assert batch["image"].devices() == {jax.devices()[0]}


@in_lab
def test_a_batch_sharding_splits_the_batch_axis_over_the_mesh_devices():
    import jax

    from grainlite.device import batch_sharding

    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    host = list(make_loader())
    with grain.device_put(make_loader(), sharding=batch_sharding(mesh)) as batches:
        placed = list(batches)
    for on_device, on_host in zip(placed, host):
        image = on_device["image"]
        assert image.sharding.spec == jax.sharding.PartitionSpec("data")
        assert len(image.addressable_shards) == DEVICE_COUNT
        for shard in image.addressable_shards:
            rows = shard.index[0]
            assert (rows.stop - rows.start) == 2, rows  # 8 rows over 4 data devices
            assert np.asarray(shard.data).tobytes() == on_host["image"][rows].tobytes()
        assert_bit_equal(on_device, on_host)


# Checkpoint truth --------------------------------------------------------------------------------


@in_lab
def test_the_state_is_after_the_last_batch_received_not_after_the_queued_ones():
    with iter(make_loader()) as reference:
        host_states = [json.loads(reference.get_state())]
        for _ in reference:
            host_states.append(json.loads(reference.get_state()))
    with grain.device_put(make_loader(), prefetch=3) as batches:
        for received in range(3):
            prefetcher = batches._engine.prefetcher
            if prefetcher is not None:  # the thread has read ahead: 3 batches wait
                wait_for(lambda p=prefetcher: p.queued() == 3, "a full queue", DEADLINE_S)
            state = json.loads(batches.get_state())
            assert state == {"host_state": host_states[received], "batches_received": received}
            next(batches)


@in_lab
def test_restoring_the_device_iterator_at_every_step_reproduces_the_stream():
    contracts.assert_resumes_at_every_step(lambda: DeviceLoader(prefetch=2))


@in_lab
def test_restoring_with_device_transforms_at_every_step_reproduces_the_transformed_stream():
    contracts.assert_resumes_at_every_step(
        lambda: DeviceLoader(transforms=[normalize, random_flip]), new_loader_steps=[3]
    )


@in_lab
def test_a_dataset_iterators_device_state_is_a_dict_that_restores():
    dataset = grain.MapDataset.range(12).map(lambda i: np.full((2,), i)).batch(3)
    with grain.device_put(iter(dataset.to_iter_dataset()), prefetch=2) as batches:
        next(batches)
        state = batches.get_state()
        rest = [np.asarray(b).tolist() for b in batches]
        assert state == {"host_state": {"next_index": 1}, "batches_received": 1}, state
        batches.set_state(json.dumps(state).encode())  # as Orbax's handler gives it back
        assert [np.asarray(b).tolist() for b in batches] == rest
    assert rest == [[[i, i] for i in range(j, j + 3)] for j in (3, 6, 9)]


# Device transforms -------------------------------------------------------------------------------


@in_lab
def test_device_transforms_turn_uint8_batches_into_floats_on_the_device():
    import jax

    with grain.device_put(
        make_loader(), sharding=jax.devices()[2], transforms=[normalize]
    ) as batches:
        batch = next(batches)
    host = next(iter(make_loader()))
    assert host["image"].dtype == np.uint8
    assert batch["image"].dtype == np.float32 and batch["image"].devices() == {jax.devices()[2]}
    # XLA may divide as a multiply by 1/255: equal to numpy's division within one float32 step.
    np.testing.assert_allclose(
        np.asarray(batch["image"]), host["image"].astype(np.float32) / 255.0, rtol=1e-6
    )


@in_lab
def test_each_batch_key_is_derived_from_the_loader_seed_and_the_batch_index():
    import jax

    def draw(batch: dict[str, Any], key: Any) -> Any:
        return jax.random.uniform(key, (3,))

    with grain.device_put(make_loader(), transforms=[lambda b: b, draw]) as batches:
        draws = [np.asarray(d) for d in batches]
    for index, drawn in enumerate(draws):
        batch_key = jax.random.fold_in(jax.random.key(7), index)  # the sampler's seed is 7
        expected = jax.random.uniform(jax.random.fold_in(batch_key, 1), (3,))
        assert np.array_equal(drawn, np.asarray(expected)), index
    assert len({d.tobytes() for d in draws}) == len(draws)  # every batch its own key


@in_lab
def test_device_transforms_give_the_same_batches_in_every_run_and_any_prefetch():
    runs = []
    for prefetch in (0, 4):
        with grain.device_put(
            make_loader(), prefetch=prefetch, transforms=[normalize, random_flip], seed=3
        ) as batches:
            runs.append([host_values(b) for b in batches])
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            assert_bit_equal(a, b)
    assert len({b["noise"].tobytes() for b in runs[0]}) == len(runs[0])


# Resources and errors ----------------------------------------------------------------------------


def resources() -> tuple[int, int, int]:
    """(device threads, child processes, grainlite segments of this process) now: the child
    processes are the loader's workers and their fork server (``loader_processes``)."""
    from leak_check import live_children

    from grainlite import shm

    segments = [n for n in shm.list_segments() if shm.owner_pid(n) == os.getpid()]
    return len(device_threads()), len(live_children()), len(segments)


@in_lab
def test_close_ends_the_thread_the_workers_and_their_shared_memory():
    batches = grain.device_put(make_loader(workers=1), prefetch=2)
    next(batches)
    threads, children, _ = resources()
    assert (threads, children) == (1, loader_processes(1))  # measured while held
    batches.close()
    assert resources() == (0, 0, 0)
    batches.close()  # idempotent
    with pytest.raises(grain.LoaderClosedError) as caught:
        next(batches)
    assert str(caught.value) == (
        "This device iterator was closed; call grainlite.device_put(loader) for a new one, or "
        "set_state(state) to reopen this one at a saved position."
    )


@in_lab
def test_close_returns_only_after_the_thread_has_ended():
    batches = grain.device_put(make_loader(), prefetch=2)
    next(batches)
    prefetcher = batches._engine.prefetcher
    wait_for(lambda: prefetcher.queued() == 2, "the thread blocked on a full queue", DEADLINE_S)
    batches.close()
    assert not prefetcher.thread.is_alive()


@in_lab
def test_garbage_collection_ends_an_abandoned_device_iterator():
    batches = grain.device_put(make_loader(workers=1), prefetch=2)
    next(batches)
    assert resources()[:2] == (1, loader_processes(1))
    del batches
    gc.collect()
    wait_for(lambda: resources() == (0, 0, 0), "no thread, process or segment left", DEADLINE_S)


@in_lab
def test_an_exception_inside_the_with_block_releases_everything():
    with pytest.raises(ZeroDivisionError), grain.device_put(make_loader()) as batches:
        next(batches)
        1 / 0  # noqa: B018
    assert resources() == (0, 0, 0)


@in_lab
def test_a_transform_error_is_raised_at_its_batch_and_the_stream_goes_on_like_the_host():
    def loader() -> grain.DataLoader:
        return grain.DataLoader(
            data_source=grain.RangeDataSource(0, 8, 1),
            sampler=grain.IndexSampler(8, grain.NoSharding(), num_epochs=1),
            operations=[FailOnFive()],
            worker_count=0,
        )

    def read(iterator: Any) -> list[Any]:
        seen: list[Any] = []
        while True:
            try:
                seen.append(int(np.asarray(next(iterator))))
            except StopIteration:
                return seen
            except KeyError as error:
                seen.append(str(error))

    with iter(loader()) as host:
        expected = read(host)
    with grain.device_put(loader(), prefetch=2) as batches:
        assert read(batches) == expected == [0, 1, 2, 3, 4, "'record 5'", 6, 7]
        assert device_threads() == []


@in_lab
def test_prefetch_zero_reads_in_the_callers_thread():
    with grain.device_put(make_loader(), prefetch=0) as batches:
        placed = [next(batches)]
        assert device_threads() == []  # mid-stream: a thread would be reading ahead now
        placed.extend(batches)
    for on_device, on_host in zip(placed, make_loader()):
        assert_bit_equal(on_device, on_host)


@in_lab
def test_wrong_arguments_are_refused_with_the_rule_and_the_fix():
    cases = {
        "prefetch=-1": (
            dict(prefetch=-1),
            grain.GrainliteValueError,
            "prefetch must be >= 0 (got -1); pass 0 to copy each batch when it is asked for, "
            "or N >= 1 to keep N batches ready.",
        ),
        "sharding='gpu'": (
            dict(sharding="gpu"),
            grain.GrainliteTypeError,
            "device_put(sharding=...) must be None, a jax.Device or a jax.sharding.Sharding, "
            "got str 'gpu'; pass e.g. jax.devices()[0], or grainlite.device.batch_sharding(mesh) "
            "to split the batch axis over a mesh.",
        ),
        "transforms=normalize": (
            dict(transforms=normalize),
            grain.GrainliteTypeError,
            "device_put(transforms=...) must be a list of functions, got function; pass e.g. "
            "transforms=[normalize, random_flip].",
        ),
    }
    for name, (options, error_type, message) in cases.items():
        with pytest.raises(error_type) as caught:
            grain.device_put(make_loader(), **options)
        assert str(caught.value) == message, name
    assert isinstance(caught.value, TypeError)


@in_lab
def test_values_no_device_holds_stay_on_the_host_as_they_are():
    import jax

    class Named(grain.MapTransform):
        def map(self, i: int) -> dict[str, Any]:
            return {"name": f"file-{i}.jpg", "n": np.int32(i)}

    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 4, 1),
        sampler=grain.IndexSampler(4, grain.NoSharding(), num_epochs=1),
        operations=[Named(), grain.Batch(2)],
    )
    with grain.device_put(loader, sharding=jax.devices()[1]) as batches:
        batch = next(batches)
    assert isinstance(batch["n"], jax.Array) and batch["n"].devices() == {jax.devices()[1]}
    assert isinstance(batch["name"], np.ndarray)
    assert batch["name"].tolist() == ["file-0.jpg", "file-1.jpg"]
    # Device transforms see the device entries; the host entries are put back beside them.
    double = [lambda b: {**b, "n": b["n"] * 2}]
    with grain.device_put(loader, transforms=double) as batches:
        batch = next(batches)
    assert batch["n"].tolist() == [0, 2] and batch["name"].tolist() == ["file-0.jpg", "file-1.jpg"]


@in_lab
def test_a_plain_iterator_without_state_is_refused():
    with pytest.raises(grain.GrainliteTypeError) as caught:
        grain.device_put(iter([np.zeros(2)]))
    assert str(caught.value) == (
        "device_put needs an iterator with get_state() and set_state() (a DataLoader or Dataset "
        "iterator), got list_iterator, which has no get_state(); pass iter(loader) or the "
        "loader itself."
    )


# Grain's spelling for the Dataset API ------------------------------------------------------------


@in_lab
def test_grains_spelling_gives_grains_elements_and_states_at_every_step():
    import grain as real_grain
    import jax

    def pipeline(module: Any) -> Any:
        return module.MapDataset.range(10).map(lambda i: {"x": np.full((2,), i)}).batch(3)

    device = jax.devices()[4]
    theirs = iter(real_grain.experimental.device_put(pipeline(real_grain), device))
    ours_dataset = grain.experimental.device_put(pipeline(grain), device, device_buffer_size=2)
    assert isinstance(ours_dataset, grain.IterDataset)
    with iter(ours_dataset) as ours:
        assert ours.get_state() == theirs.get_state()
        for a, b in zip(ours, theirs, strict=True):
            assert a["x"].devices() == b["x"].devices() == {device}
            assert_bit_equal(a, b)
            assert ours.get_state() == theirs.get_state()
        ours.set_state({"next_index": 2})
        assert np.asarray(next(ours)["x"])[0].tolist() == [6, 6]
    theirs.close()
    assert device_threads() == []


@in_lab
def test_grains_spelling_refuses_negative_buffer_sizes_with_a_value_error():
    import grain as real_grain

    dataset = grain.MapDataset.range(3).to_iter_dataset()
    with pytest.raises(ValueError):
        real_grain.experimental.device_put(
            real_grain.MapDataset.range(3).to_iter_dataset(), None, cpu_buffer_size=-1
        )
    for name in ("cpu_buffer_size", "device_buffer_size"):
        with pytest.raises(grain.GrainliteValueError) as caught:
            grain.experimental.device_put(dataset, None, **{name: -1})
        assert str(caught.value) == (
            f"{name} must be >= 0 (got -1); pass 0 to copy each batch when it is asked for, or "
            f"N >= 1 to keep N batches ready."
        )
        assert isinstance(caught.value, ValueError)


def test_device_put_is_a_top_level_name_that_imports_no_jax():
    import subprocess
    import sys

    code = (
        "import sys, grainlite; f = grainlite.device_put; print(f.__module__, 'jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["grainlite.device.iterator", "False"]


@in_lab
def test_a_host_iterators_bare_state_is_refused_with_the_fix():
    with iter(make_loader()) as host:
        bare = host.get_state()
    with grain.device_put(make_loader()) as batches, pytest.raises(ValueError) as caught:
        batches.set_state(bare)
    assert str(caught.value).startswith(f"Invalid device iterator state {str(bare)[:80]!r}: ")
    assert str(caught.value).endswith(
        "expected a dict with the keys 'host_state' and 'batches_received', as get_state() of a "
        "device iterator returns. To start from a host iterator's state, call "
        "host.set_state(state) before device_put(host)."
    )


@in_lab
def test_a_closed_device_iterator_reopens_when_a_state_is_restored():
    batches = grain.device_put(make_loader())
    start = batches.get_state()
    first = host_values(next(batches))
    batches.close()
    assert resources() == (0, 0, 0)
    batches.set_state(start)
    assert_bit_equal(next(batches), first)
    batches.close()
    assert resources() == (0, 0, 0)
