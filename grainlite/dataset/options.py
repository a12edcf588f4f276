"""Grain's ``DatasetOptions`` and ``WithOptionsIterDataset``: options for a whole pipeline.

``WithOptionsIterDataset(ds, options)`` sets options for every iterator of the pipeline it is
part of, as in Grain: the nodes below it, and also the nodes above it (a filter after a
``prefetch``/``mp_prefetch`` whose input has the options) and the other inputs of a ``mix``.
This module holds the one rule, :func:`pipeline_options`: when an iterator is built outside any
other (the last node's ``iter()``), the options of every ``WithOptionsIterDataset`` reachable
through ``parents`` are merged; where two set the same field, the outer one (closer to the
consumer) wins, and between the inputs of a multi-input node the first input's win; fields none
sets keep their defaults. They stay in force while the whole iterator tree is built, in this
process and in ``mp_prefetch``'s workers (:func:`set_options` hands them over). An interleave,
which opens its inputs while it reads, opens each with :func:`input_iterator`.

The option grainlite acts on is the filter check: a filter (an ``IterDataset.filter``, or a
``MapDataset.filter`` read through ``to_iter_dataset``) counts, over windows of 1000 elements it
reads, how many it drops; at or above ``filter_warn_threshold_ratio`` (default 0.9) it logs a
warning, at or above ``filter_raise_threshold_ratio`` (default off) it raises ``ValueError``; a
ratio of 0 turns its check off, as in Grain.
``execution_tracking_mode`` and ``min_shm_size`` are accepted and kept: grainlite always tracks
what ``stats()`` reports, and sends arrays through shared memory by its own rule.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import logging
import time
from collections.abc import Iterator
from typing import Any

from grainlite.dataset import element_spec
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.errors import GrainliteTypeError, GrainliteValueError, shown

log = logging.getLogger("grainlite")

FILTER_WINDOW = 1000  # elements per filter check
_WARN_EVERY_S = 60.0  # a filter warns at most once a minute


class ExecutionTrackingMode(enum.Enum):
    """How much execution statistics Grain collects (accepted; grainlite's ``stats()`` is on)."""

    DISABLED = 1
    STAGE_TIMING = 2


_DEFAULTS: dict[str, Any] = {
    "filter_warn_threshold_ratio": 0.9,
    "filter_raise_threshold_ratio": None,
    "execution_tracking_mode": ExecutionTrackingMode.DISABLED,
    "min_shm_size": 0,
}


@dataclasses.dataclass(frozen=True, init=False)
class DatasetOptions:
    """Options for the nodes of a pipeline; a field not given keeps its default (see ``merge``).

    Attributes:
      filter_warn_threshold_ratio: log a warning (at most once a minute per filter) when a
        filter drops this share or more of a window of 1000 elements it reads (``None`` or
        ``0``: never, as in Grain).
      filter_raise_threshold_ratio: raise ``ValueError`` when a filter drops this share or more
        of a window (``None`` or ``0``: never); the stream goes on after the error.
      execution_tracking_mode: Grain's statistics switch, accepted and kept.
      min_shm_size: Grain's smallest array sent through shared memory, accepted and kept.
    """

    filter_warn_threshold_ratio: float | None
    filter_raise_threshold_ratio: float | None
    execution_tracking_mode: ExecutionTrackingMode
    min_shm_size: int
    _given: frozenset[str] = dataclasses.field(repr=False, compare=False)

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(_DEFAULTS))
        if unknown:
            raise GrainliteTypeError(
                f"DatasetOptions got unknown options {unknown}; "
                f"the options are {sorted(_DEFAULTS)}."
            )
        for name in ("filter_warn_threshold_ratio", "filter_raise_threshold_ratio"):
            value = options.get(name)
            if value is not None and not 0 <= value <= 1:
                raise GrainliteValueError(
                    f"DatasetOptions({name}=...) must be a ratio between 0 and 1 or None "
                    f"(got {shown(value)})."
                )
        for name, default in _DEFAULTS.items():
            object.__setattr__(self, name, options.get(name, default))
        object.__setattr__(self, "_given", frozenset(options))

    def merge(self, other: DatasetOptions | None) -> DatasetOptions:
        """These options, with the fields this one did not set taken from ``other`` where it did."""
        if other is None:
            return self
        merged = {name: getattr(other, name) for name in other._given}
        merged.update({name: getattr(self, name) for name in self._given})
        return DatasetOptions(**merged)


@dataclasses.dataclass(frozen=True)
class _Scope:
    """The options in force while one iterator tree is built (None: the pipeline sets none)."""

    options: DatasetOptions | None


_CURRENT: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "grainlite_dataset_options", default=None
)


def pipeline_options(dataset: Any) -> DatasetOptions | None:
    """The merged options of every ``WithOptionsIterDataset`` in ``dataset``'s pipeline (a
    node that sets options says so through its ``options_set_here``).

    Nodes are visited from ``dataset`` up through ``parents`` (depth first, each node's inputs
    in order, a node shared by two paths once); an option set by a node visited earlier wins,
    so the outer node wins over the one below it and a first input over a second. The inputs
    of a node that opens them while it reads (``opens_inputs_while_reading``: an interleave)
    are not visited: they get their options from :func:`input_iterator`. None when no node
    sets options.
    """
    merged: DatasetOptions | None = None
    pending, seen = [dataset], set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        own = getattr(node, "options_set_here", None)
        if own is not None:
            merged = merged.merge(own) if merged is not None else own
        if not getattr(node, "opens_inputs_while_reading", False):
            pending.extend(reversed(tuple(getattr(node, "parents", ()))))
    return merged


def input_iterator(dataset: Any, outer: DatasetOptions | None) -> Any:
    """``iter(dataset)`` for a node that opens its inputs while it reads (an interleave).

    As in Grain, ``outer`` (the options of the reading node's pipeline, taken when its iterator
    was built) win over the input's own options, which fill the fields ``outer`` leaves; the
    input's own options do not reach the nodes after the reading node.
    """
    own = pipeline_options(dataset)
    with in_force(outer.merge(own) if outer is not None else own):
        return dataset.__iter__()


@contextlib.contextmanager
def pipeline_scope(dataset: Any) -> Iterator[None]:
    """Puts the options of ``dataset``'s whole pipeline in force while its iterator is built.

    Every ``IterDataset.__iter__`` runs inside it (``IterDataset`` wraps each subclass's); only
    the outermost call computes the options, the iterators it builds below see the same ones.
    """
    if _CURRENT.get() is not None:
        yield
        return
    token = _CURRENT.set(_Scope(pipeline_options(dataset)))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_options() -> DatasetOptions:
    """The options in force for an iterator being built now (the defaults outside any)."""
    return set_options() or DatasetOptions()


def set_options() -> DatasetOptions | None:
    """The options the pipeline being built sets (None: it sets none, or none is being built).

    ``mp_prefetch`` takes them when its iterator is built and puts them in force again in its
    worker processes, where its pipeline's iterators are built (Grain carries them there too):
    so options set above ``mp_prefetch`` reach its workers, and options set in the workers'
    pipeline reach the nodes after ``mp_prefetch``.
    """
    scope = _CURRENT.get()
    return scope.options if scope is not None else None


@contextlib.contextmanager
def in_force(options: DatasetOptions | None) -> Iterator[None]:
    """Puts ``options`` in force for the iterators built inside the block, in place of what
    :func:`pipeline_scope` would find (an ``mp_prefetch`` worker's pipeline: its consumer's)."""
    token = _CURRENT.set(_Scope(options))
    try:
        yield
    finally:
        _CURRENT.reset(token)


class WithOptionsIterDataset(IterDataset):
    """``parent``, with ``options`` in force for every iterator of the pipeline it is part of
    (see :func:`pipeline_options` for which options win)."""

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: IterDataset, options: DatasetOptions) -> None:
        if not isinstance(options, DatasetOptions):
            raise GrainliteTypeError(
                "WithOptionsIterDataset(parent, options) needs a "
                f"grainlite.experimental.DatasetOptions (got {shown(options)})."
            )
        super().__init__(parent)
        self.options = options

    @property
    def options_set_here(self) -> DatasetOptions:
        """The options this node puts in force (asked by :func:`pipeline_options`)."""
        return self.options

    def __iter__(self) -> DatasetIterator:
        # The pipeline's options, these included, are in force (pipeline_scope).
        return self._parent.__iter__()

    def __str__(self) -> str:
        return f"WithOptionsIterDataset(options={self.options})"


class FilterRatioCheck:
    """Counts a filter's dropped elements per window of 1000 and warns or raises over the limits."""

    def __init__(self, name: str, options: DatasetOptions | None = None) -> None:
        options = options or current_options()
        self.name = name
        # As in Grain, a ratio of 0 turns its check off like None.
        self.warn = options.filter_warn_threshold_ratio or None
        self.raise_ = options.filter_raise_threshold_ratio or None
        self.seen = 0
        self.dropped = 0
        self._last_warning = -_WARN_EVERY_S

    @property
    def active(self) -> bool:
        return self.warn is not None or self.raise_ is not None

    def check(self, kept: bool) -> None:
        """Counts one element read (``kept`` or dropped); checks the window when it is full."""
        self.seen += 1
        if not kept:
            self.dropped += 1
        if self.seen >= FILTER_WINDOW:
            self._end_window()

    def window(self, seen: int, dropped: int) -> None:
        """Checks a window of ``seen`` elements read, ``dropped`` of them skipped, counted by
        the caller (``to_iter_dataset``'s iterator counts the holes it skips)."""
        self.seen, self.dropped = seen, dropped
        self._end_window()

    def _end_window(self) -> None:
        ratio = self.dropped / self.seen
        message = (
            f"Transformation {self.name} skipped {ratio * 100:.2f} % of the last seen "
            f"{self.seen} elements."
        )
        self.seen = self.dropped = 0
        if self.raise_ is not None and ratio >= self.raise_:
            raise GrainliteValueError(
                f"{message} That is at or above filter_raise_threshold_ratio={self.raise_}: check "
                "the filter's condition, or raise the limit with "
                "grainlite.experimental.WithOptionsIterDataset(ds, DatasetOptions(...))."
            )
        now = time.monotonic()
        if (
            self.warn is not None
            and ratio >= self.warn
            and now - self._last_warning >= _WARN_EVERY_S
        ):
            self._last_warning = now
            log.warning(
                "%s Check the filter's condition; DatasetOptions(filter_warn_threshold_ratio=...) "
                "sets this limit.",
                message,
            )
