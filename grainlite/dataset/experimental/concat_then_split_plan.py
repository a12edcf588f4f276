"""Concat-then-split's row planner: which piece of which sequence goes into each row.

The planner reads the parent and decides rows; it copies no token (a row's plan is a list of
pieces, each a sequence's arrays sliced to the part that goes into the row), so
:mod:`~grainlite.dataset.experimental.concat_then_split` can write many rows with one
``np.concatenate`` per feature. The rules, learned by running Grain 0.2.18:

* A row takes sequences in order while each fits whole (every feature within the room left); the
  first that does not fit is split: each feature gives the row what fits, the rest (the
  *remainder*) starts the next row, unless the row has no room left for any of it (then the
  whole sequence starts the next row). A sequence with no tokens always fits.
* A meta feature is never split: a sequence whose meta feature does not fit ends the row whole
  (it starts the next one), and a remainder carries the whole meta feature again.
* With ``split_full_length_features=False``, a sequence pulled while planning a row that has a
  feature at its full target length is set aside and emitted whole after that row.
* Positions restart at 0 in a remainder; segment ids number the pieces of a row from 1.

The checkpoint is Grain's: when a row starts with nothing set aside and at most one sequence
buffered, the checkpoint becomes the parent's state before that sequence and the slices of it
left (``(-1, -1)`` for a whole one); the state is the checkpoint plus the rows made since.

Where Grain 0.2.18 splits features of unequal lengths it can duplicate tokens (a feature whose
remainder is empty comes back whole in the next row); grainlite gives each token once.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from grainlite.errors import GrainliteValueError, clipped
from grainlite.tree import describe


@dataclasses.dataclass(slots=True)
class Piece:
    """A sequence, or the remainder of one: per feature, its tokens from ``starts`` to ``stops``.

    ``arrays`` are those tokens (views of the sequence's arrays) and ``sizes`` their lengths; a
    meta feature is always whole.
    """

    state: Any  # the parent's state before the sequence was pulled
    starts: list[int]  # per feature, in the original sequence
    stops: list[int]
    arrays: list[np.ndarray]
    sizes: list[int]
    split: bool = False

    def cut(self, starts: list[int]) -> None:
        """Keeps the tokens from ``starts`` (per feature) on."""
        self.starts = starts
        self.arrays = [
            array if start == 0 else array[start - old :]
            for array, start, old in zip(self.arrays, starts, self._old_starts())
        ]
        self.sizes = [stop - start for start, stop in zip(starts, self.stops)]
        self.split = True

    def _old_starts(self) -> list[int]:
        return [stop - size for stop, size in zip(self.stops, self.sizes)]


@dataclasses.dataclass(frozen=True)
class Config:
    """The planner's settings (ConcatThenSplitIterDataset's arguments, checked)."""

    features: tuple[str, ...]
    lengths: tuple[int, ...]
    metas: frozenset[str]
    split_full_length_features: bool
    names: frozenset[str] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(self.features))


def as_sequences(config: Config, element: Any) -> list[np.ndarray]:
    """``element``'s features, in ``length_struct`` order, as arrays with a sequence axis (a
    scalar is one token)."""
    if not (type(element) is dict or isinstance(element, Mapping)) or (
        element.keys() != config.names
    ):
        structure = sorted(element) if isinstance(element, Mapping) else type(element).__name__
        targets = dict(zip(config.features, config.lengths, strict=True))
        raise GrainliteValueError(
            f"Parent element has structure {clipped(describe(element))} but target sequence length "
            f"is {clipped(repr(targets))}. There must be a sequence length for each feature: "
            f"ConcatThenSplitIterDataset got an element with features {clipped(repr(structure))} "
            f"where length_struct has {clipped(repr(list(config.features)))}; add the missing ones "
            "to length_struct or drop them with a map first."
        )
    arrays = [element[name] for name in config.features]
    for f, value in enumerate(arrays):
        if type(value) is not np.ndarray or not value.ndim:
            value = np.asarray(value)
            arrays[f] = value.reshape(1) if value.ndim == 0 else value
    return arrays


class Planner:
    """Plans rows from a parent iterator; holds the buffer, set-aside rows and the checkpoint."""

    def __init__(self, parent: Any, config: Config) -> None:
        self.parent = parent
        self.config = config
        self.buffer: collections.deque[Piece] = collections.deque()
        self.held: collections.deque[Piece] = collections.deque()
        self.checkpoint: tuple[Any, dict[str, tuple[int, int]] | None] = (
            parent.get_state(),
            None,
        )
        self.rows_since_checkpoint = 0
        self.ended = False

    def restore(self, parent_state: Any, slices: dict[str, tuple[int, int]] | None) -> None:
        """Moves to a checkpoint: the parent at ``parent_state``, the remainder ``slices``."""
        self.parent.set_state(parent_state)
        self.buffer.clear()
        self.held.clear()
        self.ended = False
        self.checkpoint = (parent_state, slices)
        self.rows_since_checkpoint = 0
        if slices is not None:
            piece = self._pull()
            if piece is None:
                raise GrainliteValueError(
                    f"ConcatThenSplitIterDataset state has remainder slices {slices} but the "
                    f"parent has no element at {parent_state!r}; restore a state of the same "
                    "pipeline over the same data."
                )
            starts = list(piece.starts)
            for f, name in enumerate(self.config.features):
                if name in slices:
                    starts[f], stop = slices[name]
                    if stop != piece.stops[f]:  # a checkpoint's remainder ends with its sequence
                        piece.arrays[f] = piece.arrays[f][:stop]
                        piece.stops[f] = stop
                        piece.sizes[f] = stop
            piece.cut(starts)
            self.buffer.append(piece)

    def _pull(self) -> Piece | None:
        if self.ended:
            return None
        state = self.parent.get_state()
        try:
            element = next(self.parent)
        except StopIteration:
            self.ended = True
            return None
        values = as_sequences(self.config, element)
        sizes = [len(value) for value in values]
        return Piece(state, [0] * len(sizes), list(sizes), values, sizes)

    def _take_checkpoint(self) -> None:
        if self.held or len(self.buffer) > 1:
            return
        if not self.buffer:
            self.checkpoint = (self.parent.get_state(), None)
        else:
            piece = self.buffer[0]
            slices = None
            if piece.split:
                slices = {
                    name: (piece.starts[f], piece.stops[f])
                    for f, name in enumerate(self.config.features)
                    if name not in self.config.metas
                }
            self.checkpoint = (piece.state, slices)
        self.rows_since_checkpoint = 0

    def next_row(self) -> list[tuple[int, list[np.ndarray]]] | None:
        """The next row's pieces ``(segment id, one array per feature)``; None at the end."""
        before = (self.checkpoint, self.rows_since_checkpoint)
        self._take_checkpoint()
        if self.held:
            piece = self.held.popleft()
            row = [(1, piece.arrays)]
        else:
            row = self._plan()
            if not row:
                self.checkpoint, self.rows_since_checkpoint = before  # the state stays
                return None
        self.rows_since_checkpoint += 1
        return row

    def _plan(self) -> list[tuple[int, list[np.ndarray]]]:
        config = self.config
        metas = [name in config.metas for name in config.features]
        rooms = list(config.lengths)
        row: list[tuple[int, list[np.ndarray]]] = []
        while True:
            if self.buffer:
                piece = self.buffer[0]
            else:
                pulled = self._pull()
                if pulled is None:
                    return row
                piece = pulled
                if not config.split_full_length_features and _full_length(config, piece.sizes):
                    self.held.append(pulled)
                    continue
                self.buffer.append(piece)
            sizes = piece.sizes
            if all(map(int.__le__, sizes, rooms)):  # the whole piece fits
                row.append((len(row) + 1, piece.arrays))
                rooms = list(map(int.__sub__, rooms, sizes))
                self.buffer.popleft()
                continue
            takes = []
            for f, is_meta in enumerate(metas):
                if not is_meta:
                    takes.append(min(sizes[f], rooms[f]))
                elif sizes[f] <= rooms[f]:
                    takes.append(sizes[f])
                elif row:
                    return row  # the sequence starts the next row, whole
                else:
                    raise GrainliteValueError(
                        f"ConcatThenSplitIterDataset meta feature {config.features[f]!r} has "
                        f"{sizes[f]} tokens, more than its target length {rooms[f]}; meta "
                        "features are never split: raise its length_struct entry."
                    )
            if not any(take for take, is_meta in zip(takes, metas) if not is_meta):
                return row  # a full row: the sequence starts the next one
            arrays = [
                array if is_meta else array[:take]
                for array, take, is_meta in zip(piece.arrays, takes, metas)
            ]
            row.append((len(row) + 1, arrays))
            piece.cut(
                [
                    start if is_meta else start + take
                    for start, take, is_meta in zip(piece.starts, takes, metas)
                ]
            )
            return row


def _full_length(config: Config, sizes: list[int]) -> bool:
    """A sequence with a feature at its full target length and none longer (emitted whole)."""
    lengths = config.lengths
    return any(map(int.__eq__, sizes, lengths)) and all(map(int.__le__, sizes, lengths))


def state_slices(config: Config, state: Mapping[str, Any]) -> dict[str, tuple[int, int]] | None:
    """A state's ``remainder_slices`` as ``{feature: (start, stop)}``; None for no remainder."""
    slices = {
        name: (int(state[name][0]), int(state[name][1]))
        for name in config.features
        if name not in config.metas
    }
    if all(pair == (-1, -1) for pair in slices.values()):
        return None
    return slices
