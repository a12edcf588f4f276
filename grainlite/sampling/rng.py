"""The per-record random generator of the DataLoader API: one rule, one place.

Grain gives the record at global index ``i`` of a sampler seeded with ``seed`` the generator
``numpy.random.Generator(numpy.random.Philox(key=seed + i))``, and a RandomMapTransform receives
it. The samplers (:mod:`grainlite.sampling.samplers`), the pipeline's stages (which carry the key
as an int until a RandomMap needs the generator) and ``grainlite.torch``'s epochs all make it here,
so the rule cannot drift between them. (The Dataset API seeds differently, as Grain's does: see
:mod:`grainlite.dataset.seed`.)
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from numpy.random.bit_generator import ISeedSequence

_KEY_LIMIT = 1 << 128  # Philox's key is two 64-bit words
_WORD = (1 << 64) - 1


class _PhiloxKey(ISeedSequence):
    """Gives ``Philox`` the two words of ``key`` as the state it asks its seed sequence for.

    ``Philox(key=k)`` first builds a ``SeedSequence`` from the operating system's entropy and
    then ignores it: about 8 of the 13 to 18 µs that building a generator costs, once per record
    of every RandomMap. ``Philox(_PhiloxKey(k))`` takes the same key and counter 0, so it is the
    same generator (stream, ``state``, pickle), made in about 7 µs. The one difference:
    its ``bit_generator.seed_seq`` is this object, where ``Philox(key=k)``'s is None.
    """

    __slots__ = ("_words",)

    def __init__(self, key: int) -> None:
        self._words = np.array([key & _WORD, key >> 64], np.uint64)

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> np.ndarray:
        if n_words != 2 or dtype is not np.uint64:  # Philox asks for exactly this
            raise ValueError("this seed sequence holds only a Philox key (2 uint64 words)")
        return self._words.copy()


def record_rng(key: Any) -> np.random.Generator:
    """The generator of a record: ``key`` is the sampler's seed plus the record's global index."""
    words = key
    if words.__class__ is not int:
        try:
            words = operator.index(key)  # a numpy integer
        except TypeError:
            words = -1
    if 0 <= words < _KEY_LIMIT:
        # numpy takes any ISeedSequence (its documented interface); its stubs name SeedSequence
        return np.random.Generator(np.random.Philox(_PhiloxKey(words)))  # type: ignore[arg-type]
    return np.random.Generator(np.random.Philox(key=key))  # numpy's own error for a bad key
