"""Seeds of a Dataset pipeline: ``.seed(s)``, the default seed of every node, per-index generators.

Grain's rule, as observed by running it:

* ``ds.seed(s)`` adds a pass-through node that holds ``s``; a later ``.seed(t)`` hides it.
* Every node's *default seed* comes from the seed nodes above it: for each one (in parent order,
  depth first) the pair ``(s, d)``, ``d`` the number of steps from that seed node down to this
  node (0 for the seed node itself), flattened into one entropy list; the default seed is
  ``numpy.random.SeedSequence(entropy).generate_state(1)[0]`` (a uint32), or None without any
  seed node above; ``mp_prefetch`` hides the seed nodes below it. So two random nodes at
  different depths draw different numbers, and a pipeline built the same way draws the same
  numbers anywhere.
* A random node uses its own ``seed=`` or, without one, its default seed; neither is an error
  (``ValueError``) when the node is built.
* ``random_map`` hands the function, for index ``i``, a ``numpy.random.Generator`` over
  ``Philox(key=SeedSequence(seed).generate_state(2, uint64), counter=[0, 0, 0, i])``: it
  depends only on the seed and the index (the index of the element in the dataset, or the count
  of elements seen, for an ``IterDataset``).
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from grainlite.checks import int_option
from grainlite.dataset import element_spec
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.errors import (
    GrainliteValueError,
    NegativeRngIndexError,
    shown,
)


def check_seed(seed: Any, where: str) -> int:
    """``seed`` as a non-negative int, or Grain's error type naming ``where`` it was passed."""
    return int_option(
        seed,
        0,
        wrong_type=f"{where} seed must be an int (got {{value}} of type {{type}}); pass a "
        "non-negative integer, e.g. 42.",
        too_small=f"{where} seed must be a non-negative int (got {{value}}); pass an integer >= 0.",
    )


def _seed_pairs(ds: Any) -> list[tuple[int, int]]:
    """The ``(seed, depth)`` pairs of the seed nodes above ``ds`` (see the module docstring)."""
    own = getattr(ds, "_seed_override", None)
    if own is not None:
        return [(own, 0)]
    if getattr(ds, "hides_upstream_seeds", False):
        return []  # mp_prefetch: what runs in the workers keeps its seeds to itself
    pairs: list[tuple[int, int]] = []
    for parent in getattr(ds, "_parents", ()):
        pairs.extend((seed, depth + 1) for seed, depth in _seed_pairs(parent))
    return pairs


def default_seed(ds: Any) -> int | None:
    """The seed random nodes of ``ds`` use without their own ``seed=``; None if none is set."""
    pairs = _seed_pairs(ds)
    if not pairs:
        return None
    return _seed_from_entropy(tuple(value for pair in pairs for value in pair))


@functools.lru_cache(maxsize=4096)
def _seed_from_entropy(entropy: tuple[int, ...]) -> int:
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


def node_seed(ds: Any, seed: int | None, op: str) -> int:
    """The seed of random node ``op`` over ``ds``: its own, else the default; else ValueError."""
    if seed is not None:
        return check_seed(seed, f"{op}(...)")
    inherited = default_seed(ds)
    if inherited is None:
        raise GrainliteValueError(
            f"`{op}` needs a seed and got none (seed=None, and no ds.seed(...) upstream); set "
            f"one with ds.seed(seed) before the random transformations, or pass it directly: "
            f"ds.{op}(..., seed=seed)."
        )
    return inherited


@functools.lru_cache(maxsize=1024)
def philox_key(seed: int) -> np.ndarray:
    """The Philox key that ``numpy.random.Philox(seed)`` would use (two uint64 words)."""
    key = np.random.SeedSequence(seed).generate_state(2, np.uint64)
    key.setflags(write=False)
    return key


class PhiloxSlot:
    """One reusable ``Generator`` over ``Philox(key)`` that jumps to counter ``[0, 0, op, i]``.

    Resetting the counter of an existing generator costs far less than building one, so the
    per-index generators of :class:`IndexRng` and :class:`RngPool` are slots reset per use.
    """

    __slots__ = ("bit_generator", "counter", "generator", "state")

    def __init__(self, key: np.ndarray) -> None:
        self.bit_generator = np.random.Philox(key=key)
        self.generator = np.random.Generator(self.bit_generator)
        self.counter = np.zeros(4, np.uint64)
        self.state = self.bit_generator.state
        self.state["state"]["counter"] = self.counter

    def reset(self, index: int, op_seed: int = 0) -> np.random.Generator:
        """The generator, set to counter ``[0, 0, op_seed, index]`` with an empty buffer."""
        self.counter[2] = op_seed
        self.counter[3] = index  # the state dict is a fresh one's: its buffer is empty
        self.bit_generator.state = self.state
        return self.generator


def _negative_index(index: int, who: str) -> NegativeRngIndexError:
    return NegativeRngIndexError(
        f"{who} has no generator for negative index {index}: generators are numbered by "
        "non-negative indices; read ds[len(ds) + i] instead of ds[i]."
    )


class IndexRng:
    """Per-index generators of one random node: ``rng(i)`` is reset to counter ``[0, 0, 0, i]``.

    One ``Generator`` per thread is reused and reset before each element (resetting costs far
    less than building one), so a function must not keep its ``rng`` past the call, which is
    Grain's rule too.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._key = philox_key(seed)
        self._local = threading.local()

    def rng(self, index: int) -> np.random.Generator:
        """The generator for element ``index`` (a non-negative int)."""
        if index < 0:
            raise _negative_index(index, "random_map")
        slot = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = PhiloxSlot(self._key)
        return slot.reset(index)

    def __getstate__(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["seed"])  # type: ignore[misc]


class RngPool:
    """Grain's ``RngPool``: per-index generators of one seed, for user code that wants them.

    ``acquire_rng(index, op_seed=k)`` is the generator ``Philox(key=SeedSequence(seed))`` at
    counter ``[0, 0, k, index]`` -- with ``op_seed=0`` exactly the generator ``random_map`` with
    this seed hands its function for ``index`` -- so it depends only on ``(seed, op_seed,
    index)``. ``release_rng`` gives it back for reuse; a generator still held is never handed
    out twice. Thread-safe. ``seed=None`` draws a fresh seed from the OS, as numpy does.
    """

    def __init__(self, seed: int | None) -> None:
        if seed is None:
            seed = int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
        self.seed = check_seed(seed, "RngPool")
        self._key = philox_key(self.seed)
        self._free: list[PhiloxSlot] = []
        self._held: dict[int, PhiloxSlot] = {}
        self._lock = threading.Lock()

    def acquire_rng(self, index: int, *, op_seed: int = 0) -> np.random.Generator:
        """The generator for ``index`` and ``op_seed``, reset; give it back with ``release_rng``.

        A negative index or op_seed raises an OverflowError, as in Grain.
        """
        index = operator.index(index)
        op_seed = operator.index(op_seed)
        if index < 0 or op_seed < 0:
            raise _negative_index(min(index, op_seed), "RngPool.acquire_rng")
        with self._lock:
            slot = self._free.pop() if self._free else PhiloxSlot(self._key)
            self._held[id(slot.generator)] = slot
        return slot.reset(index, op_seed)

    def release_rng(self, rng: np.random.Generator) -> None:
        """Gives back a generator from ``acquire_rng`` so a later call can reuse it."""
        with self._lock:
            slot = self._held.pop(id(rng), None)
            if slot is None or slot.generator is not rng:
                raise GrainliteValueError(
                    f"RngPool.release_rng got {shown(rng)}, which this pool did not hand out "
                    "(or was already released); release only generators from acquire_rng."
                )
            self._free.append(slot)


class WithSeedMapDataset(MapDataset):
    """``ds.seed(s)`` on a ``MapDataset``: the same elements; sets the seed of the nodes below."""

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: MapDataset, seed: int) -> None:
        super().__init__(parent)
        self._seed_override = check_seed(seed, "ds.seed(...)")

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index)
        return self._parent[index]

    def _parent_keys(self, indices: np.ndarray) -> np.ndarray:
        """The parent indices reading ``indices`` reads: the same (:mod:`~grainlite.dataset.
        key_hints`)."""
        return indices

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        parent = self._parent
        getitems = getattr(parent, "_getitems", None)
        if getitems is None:
            return [parent[i] for i in indices]
        return getitems(indices)

    def __str__(self) -> str:
        return f"WithSeedMapDataset(seed={self._seed_override})"


class WithSeedIterDataset(IterDataset):
    """``ds.seed(s)`` on an ``IterDataset``: iterates the parent itself (its state unchanged)."""

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: IterDataset, seed: int) -> None:
        super().__init__(parent)
        self._seed_override = check_seed(seed, "ds.seed(...)")

    def __iter__(self) -> DatasetIterator:
        iterator: DatasetIterator = self._parent.__iter__()
        return iterator

    def __str__(self) -> str:
        return f"WithSeedIterDataset(seed={self._seed_override})"


def with_seed(ds: Any, seed: int) -> Any:
    """``ds.seed(seed)``: a pass-through node whose descendants derive their default seeds."""
    if isinstance(ds, MapDataset):
        return WithSeedMapDataset(ds, seed)
    return WithSeedIterDataset(ds, seed)
