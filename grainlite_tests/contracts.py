"""Behaviour contracts written once and checked by every test file that builds a pipeline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np


def to_plain(tree: Any) -> Any:
    """A comparable form of an element: arrays become (dtype, shape, values) triples."""
    if isinstance(tree, np.ndarray | np.generic):
        array = np.asarray(tree)
        return ("array", array.dtype.str, array.shape, array.tolist())
    if isinstance(tree, dict):
        return {"dict": [(k, to_plain(v)) for k, v in tree.items()]}
    if isinstance(tree, list | tuple):
        return (type(tree).__name__, [to_plain(v) for v in tree])
    return tree


def assert_same_elements(actual: Iterable[Any], expected: Iterable[Any]) -> None:
    """Equal values, dtypes, shapes and container structure, in the same order."""
    actual_plain = [to_plain(e) for e in actual]
    expected_plain = [to_plain(e) for e in expected]
    assert len(actual_plain) == len(expected_plain), (len(actual_plain), len(expected_plain))
    for position, (a, e) in enumerate(zip(actual_plain, expected_plain)):
        assert a == e, f"element {position} differs:\n{a}\n!=\n{e}"


def run_with_states(iterator: Any, limit: int | None = None) -> tuple[list[Any], list[bytes]]:
    """Iterates to the end (or ``limit`` elements), recording the state before each element and
    after the last: ``states[k]`` is the position after ``k`` elements."""
    elements, states = [], [iterator.get_state()]
    for element in iterator:
        elements.append(to_plain(element))
        states.append(iterator.get_state())
        if limit is not None and len(elements) >= limit:
            break
    return elements, states


def assert_resumes_at_every_step(
    make_loader: Callable[[], Any], new_loader_steps: Iterable[int] | None = None
) -> None:
    """Checkpoint before every element, restore at each: the rest equals the uninterrupted run.

    Restores go into the *same* iterator at every step (no drift from repeated get/set either)
    and into a *new* loader at ``new_loader_steps`` (every step when None).
    """
    with iter(make_loader()) as reference:
        elements, states = run_with_states(reference)
    steps = range(len(states)) if new_loader_steps is None else new_loader_steps
    for k in steps:
        with iter(make_loader()) as restored:
            restored.set_state(states[k])
            assert restored.get_state() == states[k]
            rest = [to_plain(e) for e in restored]
        assert rest == elements[k:], f"a new loader restored after {k} elements differs"
    with iter(make_loader()) as same:
        for k in range(len(states)):
            same.set_state(states[k])
            same.set_state(same.get_state())  # repeated get/set must not drift
            assert same.get_state() == states[k]
            if k < len(elements):
                assert to_plain(next(same)) == elements[k], f"same iterator differs at {k}"
                assert same.get_state() == states[k + 1]
        same.set_state(states[-1])
        assert list(same) == []
