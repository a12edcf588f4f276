"""Grain's ``get_next_index`` / ``set_next_index``: an iterator's position as one element index.

The index is that of the element the iterator gives next. An iterator may define Grain's hooks
``_get_next_index()`` / ``_set_next_index(index)``; otherwise an iterator whose state is
``{"next_index": n}`` (``to_iter_dataset`` and the nodes that pass its state on: ``map``,
``ThreadPrefetch``) answers from its state. Other iterators (a filter, packing, a mix) cannot
name their position as one index and raise ``NotImplementedError``.
"""

from __future__ import annotations

import operator
from typing import Any

from grainlite.errors import GrainliteTypeError, NoNextIndexError


def _index_state(iterator: Any) -> dict[str, Any] | None:
    state = iterator.get_state()
    if isinstance(state, dict) and set(state) == {"next_index"}:
        return state
    return None


def _no_index(iterator: Any) -> NoNextIndexError:
    return NoNextIndexError(
        f"{type(iterator).__name__} has no next index: its position is not one element index "
        "(get_next_index works on iterators whose state is {'next_index': n}, such as "
        "to_iter_dataset, map and ThreadPrefetch); use get_state() / set_state() instead."
    )


def get_next_index(ds_iter: Any) -> int:
    """The index of the element ``ds_iter`` gives next."""
    hook = getattr(ds_iter, "_get_next_index", None)
    if hook is not None:
        return int(hook())
    state = _index_state(ds_iter)
    if state is None:
        raise _no_index(ds_iter)
    return int(state["next_index"])


def set_next_index(ds_iter: Any, index: int) -> None:
    """Moves ``ds_iter`` so that it gives the element at ``index`` next (reads no data)."""
    try:
        index = operator.index(index)
    except TypeError:
        raise GrainliteTypeError(
            f"set_next_index needs an int index (got {type(index).__name__})."
        ) from None
    hook = getattr(ds_iter, "_set_next_index", None)
    if hook is not None:
        hook(index)
        return
    if _index_state(ds_iter) is None:
        raise _no_index(ds_iter)
    ds_iter.set_state({"next_index": index})
