"""What the Dataset API's base classes share: a node's parents, and who declared a node class.

``MapDataset`` and ``IterDataset`` both derive from :class:`_Dataset` (``parents``, the default
seed, ``pipe``); ``DatasetIterator`` takes its parents through the same :func:`_as_parents`. The
class hooks of both dataset kinds (``leaves_holes``, ``one_to_one``) treat a class grainlite
declares differently from a user's: :func:`_declared_by_grainlite` is that rule. Kept apart from
the three classes so that each of them, in its own module, imports this one and not the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

S = TypeVar("S")


def _declared_by_grainlite(cls: type) -> bool:
    return cls.__module__ == "grainlite" or cls.__module__.startswith("grainlite.")


def _as_parents(parents: Any) -> tuple[Any, ...]:
    """The parents given to a constructor, as a tuple (one dataset or a sequence of them)."""
    if isinstance(
        parents,
        map_dataset.MapDataset | iter_dataset.IterDataset | dataset_iterator.DatasetIterator,
    ):
        return (parents,)
    return tuple(parents)


class _Dataset:
    """What both dataset kinds share: parents, the default seed and ``pipe``."""

    def __init__(self, parents: Any = ()) -> None:
        self._parents = _as_parents(parents)
        self._seed_override: int | None = None

    @property
    def parents(self) -> Sequence[Any]:
        """The datasets this one reads from (empty for a source)."""
        return getattr(self, "_parents", ())

    @property
    def _parent(self) -> Any:
        """The single parent of a one-input node."""
        parents = self.parents
        if len(parents) != 1:
            raise ValueError(
                f"{type(self).__name__} has {len(parents)} parents; `_parent` is defined for "
                "nodes with exactly one."
            )
        return parents[0]

    @property
    def _default_seed(self) -> int | None:
        """The seed that random nodes without their own ``seed=`` use (from ``.seed(...)``)."""
        from grainlite.dataset.seed import default_seed

        return default_seed(self)

    def pipe(self, func: Callable[..., S], /, *args: Any, **kwargs: Any) -> S:
        """Returns ``func(self, *args, **kwargs)``: chains a user's function like a method."""
        return func(self, *args, **kwargs)


# Imported last, and as modules: each of them imports this one (for _Dataset or _as_parents) while
# it loads, and _as_parents reads their classes only when it is called.
from grainlite.dataset import dataset_iterator, iter_dataset, map_dataset  # noqa: E402
