"""Pipelines and helpers shared by the Ray worker tests (module-level, so actors import them).

The same pipeline runs on local worker processes and on Ray actors; :func:`run_with_states`
records each element with the state taken right after it, so the two runs can be compared
element by element and state by state.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from stand_in_data import decode_example

import grainlite as grain


class Spread(grain.FlatMapTransform):
    """Each element becomes 0, 1 or 2 copies with a sub-index (a flat map)."""

    max_fan_out = 2

    def flat_map(self, element: Any) -> list[Any]:
        count = int(element["id"]) % 3
        return [{**element, "sub": np.int64(k)} for k in range(count)]


def with_image(x: int) -> dict[str, Any]:
    """An element with a small image-like array, an id and a string."""
    return {"id": np.int64(x), "image": np.full((4, 5), x, np.uint8), "name": f"n{x}"}


def not_every_fourth(element: dict[str, Any]) -> bool:
    return int(element["id"]) % 4 != 1


def dataset(count: int = 60) -> Any:
    """A Dataset API pipeline: shuffle, map, filter, flat map, batch (before mp_prefetch)."""
    ds = grain.MapDataset.range(count).shuffle(seed=7).map(with_image).filter(not_every_fourth)
    ds = grain.experimental.FlatMapIterDataset(ds.to_iter_dataset(), Spread())
    return ds.batch(3)


class Decode(grain.MapTransform):
    def map(self, record: bytes) -> dict[str, Any]:
        return decode_example(record)


class Noise(grain.RandomMapTransform):
    """Adds a draw of the record's rng to its features (shows the per-record seeding)."""

    def random_map(self, element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        return {**element, "features": element["features"] + rng.standard_normal(1, np.float32)}


class NotClassZero(grain.FilterTransform):
    def filter(self, element: dict[str, Any]) -> bool:
        return int(element["label"]) != 0


class ByLabel(grain.FlatMapTransform):
    """``label`` copies of each element (1 to 3), numbered."""

    max_fan_out = 3

    def flat_map(self, element: dict[str, Any]) -> Any:
        for k in range(int(element["label"])):
            yield {**element, "copy": np.int64(k)}


def loader(
    path: str,
    worker_count: int = 0,
    backend: Any = None,
    seed: int = 5,
    num_epochs: int | None = 2,
) -> Any:
    """A DataLoader over the ArrayRecord file ``path``: decode, random map, filter, flat map,
    batch, ``num_epochs`` shuffled epochs (None: without end)."""
    source = grain.ArrayRecordDataSource(path)
    sampler = grain.IndexSampler(
        len(source), grain.NoSharding(), shuffle=True, num_epochs=num_epochs, seed=seed
    )
    return grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[Decode(), Noise(), NotClassZero(), ByLabel(), grain.Batch(4)],
        worker_count=worker_count,
        worker_buffer_size=2,
        backend=backend,
    )


def where_it_runs(element: Any) -> dict[str, Any]:
    """What the process making the element sees: its pid and the accelerator variables."""
    return {
        "element": element,
        "pid": np.int64(os.getpid()),
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", ""),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


def run_with_states(iterator: Any, limit: int | None = None) -> list[tuple[Any, Any]]:
    """(element, get_state() right after it) for each element, ``limit`` at most."""
    out = []
    for element in iterator:
        out.append((element, iterator.get_state()))
        if limit is not None and len(out) == limit:
            break
    return out


def same(a: Any, b: Any) -> bool:
    """Equal elements: same container types and keys, equal arrays of the same dtype and shape."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return bool(a == b)


def node_of(element: Any) -> dict[str, Any]:
    """The element and the Ray node id of the process that made it (run in a Ray actor)."""
    import ray

    return {"element": element, "node": ray.get_runtime_context().get_node_id()}


class Logged(grain.MapTransform):
    """Appends each element it makes to a file (a line per element), to count what was made."""

    def __init__(self, path: str) -> None:
        self.path = path

    def map(self, element: Any) -> Any:
        with open(self.path, "a") as log:
            log.write(f"{int(element)}\n")
        return element


def large_array(x: int) -> np.ndarray:
    """A 1 MiB float32 array of ``x``: above Ray's inline size, so it goes to the object store."""
    return np.full((256, 1024), x, np.float32)


def assert_same_run(ours: list[tuple[Any, Any]], theirs: list[tuple[Any, Any]]) -> None:
    """Two runs of ``run_with_states`` gave the same elements and the same states."""
    assert len(ours) == len(theirs)
    for (a, state_a), (b, state_b) in zip(ours, theirs):
        assert same(a, b)
        assert state_a == state_b


class NotFifth(grain.FilterTransform):
    """Drops every record that is a multiple of 5."""

    def filter(self, element: Any) -> bool:
        return int(element) % 5 != 0


def numbers_loader(count: int, worker_count: int = 0, backend: Any = None) -> Any:
    """A DataLoader over the records 0..count-1 (one shuffled epoch): a filter, batches of 4."""
    sampler = grain.IndexSampler(count, grain.NoSharding(), shuffle=True, num_epochs=1, seed=3)
    return grain.DataLoader(
        data_source=list(range(count)),
        sampler=sampler,
        operations=[NotFifth(), grain.Batch(4)],
        worker_count=worker_count,
        worker_buffer_size=2,
        backend=backend,
    )


def take_changing_workers(iterator: Any, steps: list[tuple[int, int]]) -> list[Any]:
    """Batches from ``iterator``: for each (count, n), ``set_num_workers(count)`` then ``n``
    batches (n < 0: to the end); with the state after each batch, as run_with_states."""
    out = []
    for count, n in steps:
        iterator.set_num_workers(count)
        out.extend(run_with_states(iterator, None if n < 0 else n))
    return out


def fails_on_five(x: int) -> int:
    """``x``, except that 5 raises (a user error in a transform, not a lost worker)."""
    if x == 5:
        raise ValueError("five is refused")
    return x


class NodeOf(grain.MapTransform):
    """:func:`node_of` as a DataLoader operation."""

    def map(self, element: Any) -> dict[str, Any]:
        return node_of(element)
