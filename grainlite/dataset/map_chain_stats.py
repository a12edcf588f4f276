"""The ``MapDataset`` nodes a block read runs through, named and timed for ``stats()``.

A ``to_iter_dataset`` iterator reads its ``MapDataset`` in blocks that run through the whole chain
of map nodes below it in one call. Its ``stats()`` shows that read as one row named after the
nodes that do not time themselves, and one row per transformation that does (its own
``StageCounter``); these helpers walk the chain (first parents, from the source up) to find both.
"""

from __future__ import annotations

from typing import Any

from grainlite.stats.counters import StageCounter


def _chain(dataset: Any) -> list[Any]:
    """The MapDataset nodes a block read runs through, from the source up (first parents)."""
    nodes = []
    node = dataset
    while node is not None:
        nodes.append(node)
        parents: tuple[Any, ...] = tuple(getattr(node, "_parents", ()))
        node = parents[0] if len(parents) == 1 else None
    return nodes[::-1]


def map_chain_name(dataset: Any) -> str:
    """``RangeMapDataset → SliceMapDataset``: the nodes of a block read that are not timed
    transformations (those have their own rows)."""
    names = [type(n).__name__ for n in _chain(dataset) if not hasattr(n, "_stats_stage")]
    return " → ".join(names) or type(dataset).__name__


def timed_map_nodes(dataset: Any) -> list[Any]:
    """The MapDataset transformations below ``dataset`` that time their block reads."""
    return [
        n for n in _chain(dataset) if isinstance(getattr(n, "_stats_stage", None), StageCounter)
    ]


def node_counts(node: Any) -> tuple[int, int, int, int]:
    """A node counter's (ns, calls, elements in, elements out) now."""
    stage = node._stats_stage
    return stage.ns, stage.calls, stage.elements_in, stage.elements_out
