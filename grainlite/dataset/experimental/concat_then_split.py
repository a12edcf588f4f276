"""Grain's ``ConcatThenSplitIterDataset`` and ``BOSHandling``: sequences end to end, cut in rows.

The parent's sequences (flat dicts of arrays; a scalar counts as one token) are concatenated and
cut every ``length_struct[feature]`` tokens; a cut sequence continues in the next row with its
positions restarting at 0. Each packed feature ``f`` gives ``f``, ``f_segment_ids`` and
``f_positions`` (int32), in ``length_struct`` order; meta features give ``f`` only and are never
cut. The rules of the rows and of the checkpoint are in
:mod:`~grainlite.dataset.experimental.concat_then_split_plan`; the state is Grain's
``{"parent_state", "remainder_slices", "elements_from_buffer_after_checkpoint"}``, with each slice
a ``[start, stop]`` list where Grain writes a tuple (a tuple does not survive JSON); either form
restores in both libraries.

Rows are planned a block at a time (at most :data:`BLOCK_ROWS`) and written with one
``np.concatenate`` per feature for the block; each row keeps the state it would have had, so
reading ahead changes no state. An error from the parent is raised after the rows before it.
"""

from __future__ import annotations

import collections
import copy
import enum
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.experimental.concat_then_split_plan import Config, Planner, state_slices
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.errors import GrainliteValueError
from grainlite.transforms.packing import checks as packing_checks

BLOCK_ROWS = 16  # rows planned and written together


class BOSHandling(enum.Enum):
    """What ConcatThenSplitIterDataset does with BOS tokens (Grain's values)."""

    DO_NOTHING = 1
    REPLACE_FIRST_TOKEN_WITH_BOS = 2


class ConcatThenSplitIterDataset(IterDataset):
    """Concatenates the parent's sequences and splits them into rows of the target lengths.

    Args:
      parent: an ``IterDataset`` of flat dicts of arrays.
      length_struct: ``{feature: target length}`` for every feature of the elements.
      meta_features: features never split (repeated with each piece of a split sequence) and
        given without segment ids and positions.
      split_full_length_features: False sets aside sequences with a feature at its full target
        length and emits them whole after the row being planned.
      bos_handling: ``REPLACE_FIRST_TOKEN_WITH_BOS`` writes ``bos_token_id`` over the first token
        of every piece in ``bos_features``.
      bos_features: the features BOS handling applies to.
      bos_token_id: the BOS token (needed with ``REPLACE_FIRST_TOKEN_WITH_BOS``).
    """

    def __init__(
        self,
        parent: IterDataset,
        *,
        length_struct: Mapping[str, int],
        meta_features: Collection[str] = (),
        split_full_length_features: bool = True,
        bos_handling: BOSHandling = BOSHandling.DO_NOTHING,
        bos_features: Collection[str] = (),
        bos_token_id: int | None = None,
    ) -> None:
        super().__init__(parent)
        owner = "ConcatThenSplitIterDataset"
        spec = packing_checks.make_spec(owner, length_struct, tuple(meta_features), None, None)
        self._config = Config(
            features=spec.features,
            lengths=spec.lengths,
            metas=spec.sequence_metas,
            split_full_length_features=bool(split_full_length_features),
        )
        handling = getattr(bos_handling, "name", bos_handling)
        if handling not in BOSHandling.__members__:
            raise GrainliteValueError(
                f"{owner} bos_handling must be a BOSHandling (got {bos_handling!r}); pass "
                "BOSHandling.DO_NOTHING or BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS."
            )
        self._bos: tuple[tuple[str, ...], int] | None = None
        if handling == BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS.name:
            if bos_token_id is None:
                raise GrainliteValueError(
                    "bos_token_id must be set if bos_handling is "
                    "BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS (got None); pass the BOS token id."
                )
            self._bos = (tuple(bos_features), int(bos_token_id))

    def __iter__(self) -> ConcatThenSplitDatasetIterator:
        return ConcatThenSplitDatasetIterator(iter(self._parent), self._config, self._bos)

    def __str__(self) -> str:
        lengths = dict(zip(self._config.features, self._config.lengths))
        return f"ConcatThenSplitIterDataset(length_struct={lengths})"


class ConcatThenSplitDatasetIterator(DatasetIterator):
    """Emits planned rows one by one, with the state each row has in Grain."""

    def __init__(
        self,
        parent: DatasetIterator,
        config: Config,
        bos: tuple[tuple[str, ...], int] | None,
    ) -> None:
        super().__init__(parent)
        self._config = config
        self._bos = bos
        self._packed = [name for name in config.features if name not in config.metas]
        self._planner = Planner(parent, config)
        self._ready: collections.deque[tuple[dict[str, Any], dict[str, Any]]] = collections.deque()
        self._state = self._planner_state()
        self._error: BaseException | None = None

    def _planner_state(self) -> dict[str, Any]:
        # The parent's state is kept as the parent returned it (get_state copies it out).
        state, slices = self._planner.checkpoint
        return {
            "parent_state": state,
            "remainder_slices": {
                name: [-1, -1] if slices is None else list(slices[name]) for name in self._packed
            },
            "elements_from_buffer_after_checkpoint": self._planner.rows_since_checkpoint,
        }

    def __next__(self) -> dict[str, Any]:
        if not self._ready:
            self._plan_block()
        if not self._ready:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            raise StopIteration
        row, self._state = self._ready.popleft()
        return row

    def _plan_block(self) -> None:
        plans, states = [], []
        for _ in range(BLOCK_ROWS):
            try:
                plan = self._planner.next_row()
            except Exception as error:  # emitted after the rows planned before it
                self._error = error
                break
            if plan is None:
                break
            plans.append(plan)
            states.append(self._planner_state())
        if plans:
            self._ready.extend(zip(write_rows(self._config, plans, self._bos), states))

    def get_state(self) -> dict[str, Any]:
        """Grain's state: the checkpoint, the remainder slices there, the rows made since."""
        return copy.deepcopy(self._state)

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Moves to ``state``: back to its checkpoint, then past the rows made since."""
        keys = ("parent_state", "remainder_slices", "elements_from_buffer_after_checkpoint")
        packing_checks.check_state("ConcatThenSplitIterDataset", state, keys)
        slices = state_slices(self._config, state["remainder_slices"])
        self._planner.restore(copy.deepcopy(state["parent_state"]), slices)
        self._ready.clear()
        self._error = None
        for _ in range(int(state["elements_from_buffer_after_checkpoint"])):
            if self._planner.next_row() is None:
                break
        self._state = self._planner_state()


def write_rows(
    config: Config,
    plans: list[list[tuple[int, list[np.ndarray]]]],
    bos: tuple[tuple[str, ...], int] | None,
) -> list[dict[str, Any]]:
    """The rows of ``plans`` (each a list of ``(segment id, arrays)``), written per feature.

    Per feature the rows laid end to end are the pieces with padding after each row's last one,
    so one ``np.concatenate`` writes them; features with the same piece sizes (``inputs`` and
    ``targets``) share the work for their segment ids and positions (as copies).
    """
    num_rows = len(plans)
    columns: dict[str, Any] = {}
    layouts: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
    for f, name in enumerate(config.features):
        length = config.lengths[f]
        first = plans[0][0][1][f]
        pad = np.zeros((length, *first.shape[1:]), dtype=first.dtype)
        values, sizes, ids = [], [], []
        for plan in plans:
            used = 0
            for segment, arrays in plan:
                size = len(arrays[f])
                values.append(arrays[f])
                sizes.append(size)
                ids.append(segment)
                used += size
            if used < length:
                values.append(pad[: length - used])
                sizes.append(length - used)
                ids.append(0)
        flat = np.concatenate(values, dtype=first.dtype, casting="unsafe")
        columns[name] = flat.reshape(num_rows, length, *first.shape[1:])
        if name in config.metas:
            continue
        key = (length, *sizes)
        if key in layouts:
            segments, positions = (array.copy() for array in layouts[key])
        else:
            ramp = np.arange(length, dtype=np.int32)
            zeros = ramp * 0
            positions = np.concatenate(
                [ramp[:size] if segment else zeros[:size] for segment, size in zip(ids, sizes)]
            )
            segments = np.repeat(np.asarray(ids, dtype=np.int32), sizes)
            layouts[key] = segments, positions
        if bos is not None and name in bos[0]:
            flat[(positions == 0) & (segments > 0)] = bos[1]
        columns[f"{name}_segment_ids"] = segments.reshape(num_rows, length)
        columns[f"{name}_positions"] = positions.reshape(num_rows, length)
    keys = []
    for name in config.features:
        keys.append(name)
        if name not in config.metas:
            keys.extend((f"{name}_segment_ids", f"{name}_positions"))
    return [{key: columns[key][r] for key in keys} for r in range(num_rows)]
