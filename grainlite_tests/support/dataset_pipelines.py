"""Twin Dataset-API pipelines for the differential tests: one drawn description, built with
``import grain`` and with ``import grainlite as grain`` by the same code, so that elements, lengths
and states can be compared.

A :class:`Pipeline` is a source, a list of ``MapDataset`` steps, optionally ``to_iter_dataset``
and ``IterDataset`` steps, optionally ``mp_prefetch`` with ``workers`` processes and steps after
it. The transforms are module-level functions (importable by Grain's spawned workers and
cloudpicklable for grainlite's) that work on ints, numpy arrays and dicts of them, batched or not.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import strategies as st

Step = tuple[Any, ...]

DTYPES = ("int32", "uint8", "float32", "int64")
WORKER_COUNTS = (1, 2, 3)


# The transforms ---------------------------------------------------------------------------------
def _leaves(fn: Any, x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _leaves(fn, v) for k, v in x.items()}
    return fn(x)


def key(x: Any) -> int:
    """An int that identifies an element (its first number), batched or not."""
    leaf = x["id"] if isinstance(x, dict) else x
    return int(np.asarray(leaf).ravel()[0])


def times_ten_plus_one(x: Any) -> Any:
    """``x * 10 + 1`` on every leaf (numpy dtypes kept)."""
    return _leaves(lambda v: v * 10 + 1, x)


def add_noise(x: Any, rng: np.random.Generator) -> Any:
    """Adds one number drawn from ``rng`` to every leaf: reveals how each library seeds it."""
    noise = int(rng.integers(0, 100))
    return _leaves(lambda v: v + noise, x)


def add_index(index: int, x: Any) -> Any:
    """Adds ``index % 7`` to every leaf (a ``map_with_index`` whose index shows)."""
    return _leaves(lambda v: v + index % 7, x)


def not_multiple_of_three(x: Any) -> bool:
    """Keeps elements whose key is not a multiple of three (a filter that leaves holes)."""
    return key(x) % 3 != 0


def fail_at_five(x: Any) -> Any:
    """Raises ``ValueError("boom at 5")`` for the element with key 5 (an exit path under test)."""
    if key(x) == 5:
        raise ValueError("boom at 5")
    return x


def where_it_runs(x: Any) -> dict[str, Any]:
    """What the process running this transform has loaded and sees (for the worker checks)."""
    import os
    import sys

    absl_flags = sys.modules.get("absl.flags")
    return {
        "element": x,
        "pid": os.getpid(),
        "jax_imported": "jax" in sys.modules,
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS"),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "absl_flags_parsed": None if absl_flags is None else absl_flags.FLAGS.is_parsed(),
    }


def jax_platform(x: Any) -> str:
    """The platform of the first device JAX finds in the process running this transform."""
    import jax

    return str(jax.devices()[0].platform)


def _records(kind: str, start: int, count: int, dtype: str) -> list[Any]:
    if kind == "ints":
        return list(range(start, start + count))
    return [
        {"id": np.int64(i), "x": np.arange(i, i + 3).astype(dtype)}
        for i in range(start, start + count)
    ]


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A drawn pipeline; :meth:`build` makes it with either library's module."""

    kind: str  # "range", "ints" (a list of ints) or "dicts" (of numpy arrays)
    num_records: int
    dtype: str = "int32"
    map_steps: tuple[Step, ...] = ()
    to_iter: bool = True
    read_threads: int = 0
    allow_nones: bool = False
    iter_steps: tuple[Step, ...] = ()
    workers: int = 0  # 0: no mp_prefetch
    post_steps: tuple[Step, ...] = ()

    def source(self, lib: Any, start: int = 0, count: int | None = None) -> Any:
        """The source ``MapDataset`` of ``count`` records from ``start`` (a mix partner too)."""
        count = self.num_records if count is None else count
        if self.kind == "range":
            return lib.MapDataset.range(start, start + count)
        return lib.MapDataset.source(_records(self.kind, start, count, self.dtype))

    def build_map(self, lib: Any) -> Any:
        """The ``MapDataset`` part."""
        ds = self.source(lib)
        for step in self.map_steps:
            ds = _apply(lib, self, ds, step, level="map")
        return ds

    def build(self, lib: Any) -> Any:
        """The whole pipeline (a ``MapDataset`` when ``to_iter`` is false)."""
        ds = self.build_map(lib)
        if not self.to_iter:
            return ds
        options = lib.ReadOptions(num_threads=self.read_threads, prefetch_buffer_size=8)
        ds = ds.to_iter_dataset(options, allow_nones=self.allow_nones)
        for step in self.iter_steps:
            ds = _apply(lib, self, ds, step, level="iter")
        if self.workers:
            ds = ds.mp_prefetch(lib.MultiprocessingOptions(num_workers=self.workers))
            for step in self.post_steps:
                ds = _apply(lib, self, ds, step, level="iter")
        return ds

    @property
    def batches_before_prefetch_dropping_remainders(self) -> bool:
        """Grain's #1129: each of several workers drops its own partial batch."""
        steps = self.map_steps + self.iter_steps
        return self.workers > 1 and any(s[0] == "batch" and s[2] for s in steps)

    @property
    def slices_a_shuffle(self) -> bool:
        """A slice of a shuffle: past its end grainlite wraps within the slice (Grain #1200)."""
        names = [s[0] for s in self.map_steps]
        return any(n == "slice" and "shuffle" in names[:i] for i, n in enumerate(names))

    @property
    def slices_a_shuffle_then_repeats(self) -> bool:
        """Grain's #1200: a reseeded shuffle under a slice leaks other elements into epoch 2+."""
        names = [s[0] for s in self.map_steps]
        for i, step in enumerate(self.map_steps):
            if step[0] == "repeat" and step[2] and "slice" in names[:i]:
                last_slice = i - 1 - names[:i][::-1].index("slice")
                if "shuffle" in names[:last_slice]:
                    return True
        return False


def _apply(lib: Any, pipeline: Pipeline, ds: Any, step: Step, level: str) -> Any:
    name, *args = step
    if name == "map":
        return ds.map(times_ten_plus_one)
    if name == "random_map":
        return ds.random_map(add_noise, seed=args[0])
    if name == "map_with_index":
        return ds.map_with_index(add_index)
    if name == "filter":
        return ds.filter(not_multiple_of_three)
    if name == "batch":
        return ds.batch(args[0], drop_remainder=args[1])
    if name == "seed":
        return ds.seed(args[0])
    if name == "shuffle":
        return ds.shuffle(seed=args[0])
    if name == "slice":
        return ds[slice(*args)]
    if name == "repeat":
        return ds.repeat(args[0], reseed_each_epoch=args[1])
    partner = pipeline.source(lib, start=1000, count=args[0])
    if name == "concatenate":
        return lib.MapDataset.concatenate([ds, partner])
    assert name == "mix", step
    if level == "iter":
        return lib.IterDataset.mix([ds, partner.to_iter_dataset()], list(args[1]))
    return lib.MapDataset.mix([ds, partner], list(args[1]))


# The strategies ---------------------------------------------------------------------------------
_maybe_seed = st.one_of(st.none(), st.integers(0, 2**32 - 1))
_weights = st.tuples(st.integers(1, 3), st.integers(1, 3))
_batch = st.tuples(st.just("batch"), st.integers(1, 4), st.booleans())
_elementwise = st.one_of(
    st.just(("map",)),
    st.tuples(st.just("random_map"), _maybe_seed),
    st.just(("map_with_index",)),
    st.just(("filter",)),
)
_map_step = st.one_of(
    _elementwise,
    _batch,
    st.tuples(st.just("seed"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("shuffle"), _maybe_seed),
    st.tuples(
        st.just("slice"),
        st.one_of(st.none(), st.integers(-5, 8)),
        st.one_of(st.none(), st.integers(-5, 20)),
        st.sampled_from([None, 1, 2, 3, -1, -2]),
    ),
    st.tuples(st.just("repeat"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("concatenate"), st.integers(0, 5)),
    st.tuples(st.just("mix"), st.integers(1, 5), _weights),
)
_iter_step = st.one_of(_elementwise, _batch, st.tuples(st.just("mix"), st.integers(1, 5), _weights))


@st.composite
def pipelines(draw: Any, workers: tuple[int, ...] = (0,), max_steps: int = 4) -> Pipeline:
    """Valid-looking pipelines (Grain's own refusals are compared too, not avoided).

    ``workers`` lists the ``mp_prefetch`` worker counts to draw from (0: none).
    """
    kind = draw(st.sampled_from(["range", "ints", "dicts"]))
    map_steps: list[Step] = []
    if draw(st.booleans()):
        map_steps.append(("seed", draw(st.integers(0, 2**32 - 1))))
    map_steps += draw(st.lists(_map_step, max_size=max_steps))
    worker_count = draw(st.sampled_from(workers))
    to_iter = worker_count > 0 or draw(st.integers(0, 3)) > 0
    iter_steps = tuple(draw(st.lists(_iter_step, max_size=3))) if to_iter else ()
    post_steps = tuple(draw(st.lists(_iter_step, max_size=2))) if worker_count else ()
    return Pipeline(
        kind=kind,
        num_records=draw(st.integers(0, 20)),
        dtype=draw(st.sampled_from(DTYPES)),
        map_steps=tuple(map_steps),
        to_iter=to_iter,
        read_threads=draw(st.sampled_from([0, 2])),
        allow_nones=draw(st.integers(0, 4)) == 0,
        iter_steps=iter_steps,
        workers=worker_count,
        post_steps=post_steps,
    )


def builtin_type(error: BaseException) -> type:
    """The builtin exception class a user would catch for ``error`` (ValueError, ...)."""
    return next(t for t in type(error).__mro__ if t.__module__ == "builtins")
