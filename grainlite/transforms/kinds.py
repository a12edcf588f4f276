"""The one table of transform kinds: which method each kind of transform object is called by.

Grain (and grainlite) recognise a transform by its base class first, then by the one transform
method it defines; the classes are in :data:`grainlite.transforms.base.CLASS_KINDS`, the methods
here. The DataLoader (:func:`~grainlite.transforms.base.classify`), ``ds.apply``
(:mod:`grainlite.dataset.apply`) and the Dataset API's nodes (:mod:`grainlite.dataset.map`)
all read these two tables, so a kind cannot be spelled differently in one of them.
"""

from __future__ import annotations

METHODS: tuple[tuple[str, str], ...] = (
    ("map_with_index", "map_with_index"),
    ("map", "map"),
    ("random_map", "random_map"),
    ("np_random_map", "random_map"),  # Grain's TfRandomMap: run as a RandomMap, as Grain does
    ("filter", "filter"),
    ("flat_map", "flat_map"),
)
"""``(method name, kind)``, in the order objects are probed; the DataLoader has no
``map_with_index`` (Grain's DataLoader refuses it) and skips that row."""


def methods_of(kind: str) -> tuple[str, ...]:
    """The method names that make an object of ``kind``, in :data:`METHODS` order."""
    return tuple(name for name, of in METHODS if of == kind)
