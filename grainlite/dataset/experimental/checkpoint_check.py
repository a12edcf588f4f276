"""``assert_equal_output_after_checkpoint``: a test helper that every saved state resumes exactly.

Grain ships it as ``grain.experimental.assert_equal_output_after_checkpoint``: users call it in
their own tests on a small dataset to check that a custom node's ``get_state`` / ``set_state``
resume where they left off.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np


def _structure(state: Any) -> Any:
    """The shape of a state: its containers and keys, with each leaf replaced by its type."""
    if isinstance(state, dict):
        return {key: _structure(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(_structure(value) for value in state)
    return type(state).__name__


def assert_equal_output_after_checkpoint(ds: Any) -> None:
    """Checks that restoring any state ``ds``'s iterator gives resumes the same output.

    Reads one pass of ``ds`` (keep it small, e.g. with ``LimitIterDataset``), taking the state
    before each element and after the last; every state must have the structure of the first.
    Then, for each state, a fresh iterator restored to it must give exactly the elements that
    followed it. Raises ``AssertionError`` naming the step that differs.
    """
    iterator = iter(ds)
    states: list[Any] = []
    elements: list[Any] = []
    first_structure = None
    try:
        while True:
            state = copy.deepcopy(iterator.get_state())
            structure = _structure(state)
            if first_structure is None:
                first_structure = structure
            elif structure != first_structure:
                raise AssertionError(
                    f"the state at step {len(states)} has structure {structure}, but the first "
                    f"state had {first_structure}: a state must keep its structure"
                )
            states.append(state)
            try:
                elements.append(next(iterator))
            except StopIteration:
                break
    finally:
        _close(iterator)
    for step, state in enumerate(states):
        restored = iter(ds)
        try:
            restored.set_state(copy.deepcopy(state))
            resumed = list(restored)
        finally:
            _close(restored)
        expected = elements[step:]
        try:
            np.testing.assert_equal(resumed, expected)
        except AssertionError as e:
            raise AssertionError(
                f"after restoring the state taken at step {step} the output differs: {e}"
            ) from None


def _close(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
