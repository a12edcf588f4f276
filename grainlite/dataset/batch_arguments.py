"""``batch``'s arguments, shared by both dataset kinds: the checks, and the default ``batch_fn``.

Batches are made by ``batch_fn(list_of_elements)``, by default :func:`stack`, which is
:func:`grainlite.transforms.batch.make_batch`, the function the ``DataLoader``'s ``Batch`` uses
(its arrays equal Grain's for dicts, tuples, namedtuples, scalars, strings and ``None`` leaves),
with a hint when ``None`` holes broke it. The rule, learned by running Grain 0.2.18:
``batch_size`` must be a positive int (ValueError "batch_size must be positive." for 0 or less,
TypeError for a non-integer); a ``batch_fn`` that is not callable is a TypeError.

Both :mod:`~grainlite.dataset.map_batch` and :mod:`~grainlite.dataset.iter_batch` check their
arguments here, so the two kinds accept and refuse the same ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.transforms.batch import make_batch, validate_batch_size


def stack(values: list[Any]) -> Any:
    """The default ``batch_fn``: :func:`make_batch`, with a hint when ``None`` holes broke it."""
    try:
        return make_batch(values)
    except GrainliteValueError as error:
        holes = [position for position, value in enumerate(values) if value is None]
        if not holes:
            raise
        raise GrainliteValueError(
            f"{error} The batch has None at positions {holes}: None marks an element a sparse "
            "transformation (such as filter) removed. Batch after to_iter_dataset(), which "
            "skips them: ds.to_iter_dataset().batch(...)."
        ) from error


def check_batch_arguments(batch_size: Any, batch_fn: Any) -> tuple[int, Callable[[list[Any]], Any]]:
    """``batch_size`` checked, and ``batch_fn`` checked (``None`` gives :func:`stack`)."""
    size = validate_batch_size(batch_size)
    if batch_fn is None:
        return size, stack
    if not callable(batch_fn):
        raise GrainliteTypeError(
            f"batch_fn must be callable or None (got {batch_fn!r} of type "
            f"{type(batch_fn).__name__}); pass a function from the list of elements to the "
            "batch, or None to stack them."
        )
    return size, batch_fn
