"""The per-record random generator of the DataLoader API: one rule, one place.

Grain gives the record at global index ``i`` of a sampler seeded with ``seed`` the generator
``numpy.random.Generator(numpy.random.Philox(key=seed + i))``, and a RandomMapTransform receives
it. The samplers (:mod:`grainlite.sampling.samplers`), the pipeline's stages (which carry the key
as an int until a RandomMap needs the generator) and ``grainlite.torch``'s epochs all make it here,
so the rule cannot drift between them. (The Dataset API seeds differently, as Grain's does: see
:mod:`grainlite.dataset.seed`.)
"""

from __future__ import annotations

import numpy as np


def record_rng(key: int) -> np.random.Generator:
    """The generator of a record: ``key`` is the sampler's seed plus the record's global index."""
    return np.random.Generator(np.random.Philox(key=key))
