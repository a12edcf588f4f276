"""Differential checks of Grain's experimental stream datasets against the installed ``grain``.

``build(lib)`` makes the same pipeline with ``lib`` being ``grain`` or ``grainlite`` (both have
``lib.experimental``, ``lib.MapDataset``...) and returns a fresh iterator. The check compares the
elements and the state after every step, then restores each library from the other's states.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from typing import Any

import grain as real_grain
from absl import flags

import grainlite as lite
from grainlite_tests.support.contracts import to_plain

flags.FLAGS.mark_as_parsed()  # Grain's mp_prefetch reads absl flags (its bug #1355)

LIBRARIES = {"grain": real_grain, "lite": lite}


def run(iterator: Any, limit: int = 500) -> tuple[list[Any], list[Any]]:
    """Elements (comparable form) and the state before each and after the last, copied at once
    (Grain's interleave state shares lists with the live iterator)."""
    try:
        elements, states = [], [copy.deepcopy(iterator.get_state())]
        for element in iterator:
            elements.append(to_plain(element))
            states.append(copy.deepcopy(iterator.get_state()))
            assert len(elements) < limit, "the stream does not end"
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
    return elements, states


def rest_after(build: Callable[[Any], Any], library: str, state: Any) -> list[Any]:
    """What a fresh ``library`` iterator restored to ``state`` yields."""
    iterator = build(LIBRARIES[library])
    iterator.set_state(copy.deepcopy(state))
    return run(iterator)[0]


def assert_matches_grain(
    build: Callable[[Any], Any],
    *,
    restore_at: Iterable[int] | None = None,
    grain_restores_fresh: bool = True,
    grain_extra: Callable[[Any], bool] | None = None,
) -> tuple[list[Any], list[Any]]:
    """Same elements and states as Grain at every step; each restores from the other's states.

    Args:
      build: ``build(lib)`` returns a fresh iterator of the pipeline built with ``lib``.
      restore_at: the steps to cross-restore (every step when None).
      grain_restores_fresh: False where Grain's own fresh-iterator restore is broken (then only
        grainlite is restored from Grain's states).
      grain_extra: where Grain's restore yields known extra elements (its bugs), the predicate
        that spots them (in comparable form); they are left out of Grain's rest.

    Returns:
      grainlite's elements and states.
    """
    expected, expected_states = run(build(real_grain))
    got, states = run(build(lite))
    assert got == expected
    assert states == expected_states
    for k, state in enumerate(states):
        assert json.loads(json.dumps(state)) == state, f"state {k} is not plain JSON: {state!r}"
    steps = range(len(states)) if restore_at is None else restore_at
    for k in steps:
        assert rest_after(build, "lite", expected_states[k]) == expected[k:], (
            f"grainlite restored from grain's state after {k} elements"
        )
        if grain_restores_fresh:
            rest = rest_after(build, "grain", states[k])
            if grain_extra is not None:
                rest = [element for element in rest if not grain_extra(element)]
            assert rest == expected[k:], f"grain restored from grainlite's state after {k} elements"
    return got, states
