"""Differential tests of the Dataset API: hypothesis-drawn pipelines built by the same code with
the installed ``grain`` 0.2.18 and with grainlite give the same elements (numpy values and dtypes
exactly), the same ``len`` and random access, the same ``get_state()`` after every step, and each
library resumes from the other's state.

Two differences are wanted and so never compared here (each has its own test in
``test_dataset_grain_bugs.py``): Grain's several workers each dropping a partial batch (#1129), and
Grain's reseeded shuffle leaking elements through a slice into later epochs (#1200). A difference
found and not yet fixed is pinned by a test of its own and left out of the search, so that the
search goes on finding others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import grain as real_grain
import pytest
from absl import flags
from hypothesis import HealthCheck, Phase, assume, example, find, given, settings
from hypothesis import strategies as st

import grainlite as lite
from grainlite_tests.support.contracts import to_plain
from grainlite_tests.support.dataset_pipelines import (
    WORKER_COUNTS,
    Pipeline,
    add_noise,
    builtin_type,
    pipelines,
)

flags.FLAGS.mark_as_parsed()  # Grain's mp_prefetch reads absl flags (its bug #1355)

LIBRARIES = {"grain": real_grain, "lite": lite}
LIMIT = 200  # no drawn pipeline is longer; a safety net against an endless one
# Each mp_prefetch example starts Grain's and grainlite's workers four times (a run and a restore
# each): a few examples keep the file near a minute and a half on two cores. A failing example is
# reported as drawn (shrinking would start hundreds of workers).
WORKER_EXAMPLES = 5


@dataclass
class Outcome:
    """What one library did with a pipeline: elements and states, or the error it raised."""

    length: int | None = None
    access: list[Any] = field(default_factory=list)
    elements: list[Any] = field(default_factory=list)
    states: list[Any] = field(default_factory=list)
    error: type | None = None
    message: str = ""


def _observe(pipeline: Pipeline, library: str, random_access: bool = True) -> Outcome:
    lib, outcome = LIBRARIES[library], Outcome()
    try:
        map_ds = pipeline.build_map(lib)
        outcome.length = len(map_ds)
        if random_access:
            outcome.access = [to_plain(map_ds[i]) for i in range(outcome.length)]
        iterator = iter(pipeline.build(lib))
        try:
            outcome.states.append(iterator.get_state())
            for element in iterator:
                outcome.elements.append(to_plain(element))
                outcome.states.append(iterator.get_state())
                assert len(outcome.elements) <= LIMIT, f"{library} never ends"
        finally:
            iterator.close()
    except AssertionError:
        raise
    except Exception as error:  # compared with the other library's below
        outcome.error, outcome.message = builtin_type(error), f"{type(error).__name__}: {error}"
    return outcome


def _resume(pipeline: Pipeline, library: str, state: Any) -> list[Any]:
    """The rest of a new ``library`` iterator restored to ``state``."""
    iterator = iter(pipeline.build(LIBRARIES[library]))
    try:
        iterator.set_state(state)
        return [to_plain(e) for e, _ in zip(iterator, range(LIMIT))]
    finally:
        iterator.close()


def _compare(pipeline: Pipeline, restore_at: list[int], random_access: bool = True) -> None:
    expected = _observe(pipeline, "grain", random_access)
    got = _observe(pipeline, "lite", random_access)
    if expected.error is not None:
        # Users' handlers catch the same builtin type; what was delivered before it agrees.
        assert got.error is not None and issubclass(got.error, expected.error), (
            f"grain raised {expected.message}; grainlite gave {got.message or 'no error'}"
        )
        assert got.elements == expected.elements[: len(got.elements)]
        return
    assert got.error is None, f"grainlite raised {got.message}; grain did not"
    assert got.length == expected.length, "len of the MapDataset part"
    assert got.access == expected.access, "random access to the MapDataset part"
    assert got.elements == expected.elements
    assert got.states == expected.states
    for state in got.states:
        assert json.loads(json.dumps(state)) == state, f"not plain JSON: {state!r}"
    n = len(expected.elements)
    for k in sorted({min(k, n) for k in restore_at}):
        assert _resume(pipeline, "lite", expected.states[k]) == expected.elements[k:], (
            f"grainlite restored from grain's state after {k} elements"
        )
        assert _resume(pipeline, "grain", got.states[k]) == expected.elements[k:], (
            f"grain restored from grainlite's state after {k} elements"
        )


def _comparable(pipeline: Pipeline) -> bool:
    return not (
        pipeline.batches_before_prefetch_dropping_remainders
        or pipeline.slices_a_shuffle_then_repeats
    )


@pytest.mark.timeout(300)  # for the whole search, not one example
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines(workers=(0,)), st.lists(st.integers(0, 60), min_size=1, max_size=3))
@example(
    Pipeline("dicts", 9, "uint8", (("shuffle", 3), ("map",), ("batch", 2, False))),
    [0, 2, 99],
)
@example(
    Pipeline("range", 12, map_steps=(("seed", 7), ("shuffle", None), ("random_map", None))),
    [5],
)
@example(
    Pipeline(
        "ints",
        10,
        map_steps=(("filter",),),
        iter_steps=(("batch", 3, True), ("mix", 4, (1, 2))),
        read_threads=2,
    ),
    [0, 3],
)
@example(Pipeline("range", 6, map_steps=(("repeat", 2, True), ("slice", 1, None, 2))), [1])
def test_in_process_pipelines_match_grain_elements_states_and_restores(pipeline, restore_at):
    assume(_comparable(pipeline))
    _compare(pipeline, restore_at)


def _past_the_end(pipeline: Pipeline, library: str) -> list[Any]:
    """``ds[i]`` of the MapDataset part for ``len(ds) <= i < 3 * len(ds)`` (or the error type)."""
    try:
        ds = pipeline.build_map(LIBRARIES[library])
        return [to_plain(ds[i]) for i in range(len(ds), 3 * len(ds))]
    except Exception as error:
        return [builtin_type(error)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines(workers=(0,)))
@example(Pipeline("range", 1, map_steps=(("random_map", 0), ("batch", 1, False))))
@example(Pipeline("range", 2, map_steps=(("random_map", 0), ("concatenate", 1))))
def test_random_access_past_the_end_matches_grain(pipeline):
    # Past the end, Grain reads the next epochs of an endless view (a shuffle reshuffles, a
    # random_map draws new numbers), except where grainlite wraps within a slice of a shuffle
    # on purpose (Grain's #1200).
    assume(not pipeline.slices_a_shuffle)
    assert _past_the_end(pipeline, "lite") == _past_the_end(pipeline, "grain")


@pytest.mark.timeout(600)  # for the whole search: Grain's workers take seconds to start
@settings(
    max_examples=WORKER_EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@given(pipelines(workers=WORKER_COUNTS, max_steps=3), st.integers(0, 30))
@example(
    # Grain gives an IterDataset.random_map in a worker the numbers element k has in one
    # process, while each worker's state counts its own elements ("index_for_rng").
    Pipeline(
        "dicts",
        11,
        "float32",
        map_steps=(("shuffle", 5), ("map",)),
        iter_steps=(("random_map", 4), ("filter",)),
        workers=3,
        post_steps=(("batch", 2, False),),
    ),
    3,
)
def test_mp_prefetch_pipelines_match_grain_elements_states_and_restores(pipeline, restore_at):
    assume(_comparable(pipeline))
    _compare(pipeline, [restore_at], random_access=False)  # the in-process test checks it


def test_a_random_map_after_mp_prefetch_needs_its_own_seed_as_in_grain():
    # Grain: a seed set with .seed() before mp_prefetch does not reach the random nodes after it.
    for lib in LIBRARIES.values():
        ds = lib.MapDataset.range(4).seed(1).to_iter_dataset()
        ds = ds.mp_prefetch(lib.MultiprocessingOptions(num_workers=1))
        with pytest.raises(ValueError, match="seed"):
            ds.random_map(add_noise)


@pytest.mark.parametrize("worker_count", (0, *WORKER_COUNTS))
def test_the_pipelines_drawn_include_every_worker_count(worker_count):
    drawn = find(pipelines(workers=(0, *WORKER_COUNTS)), lambda p: p.workers == worker_count)
    assert drawn.workers == worker_count


STEP_NAMES = ("map", "random_map", "map_with_index", "filter", "batch", "seed", "shuffle")
STEP_NAMES += ("slice", "repeat", "concatenate", "mix")


@pytest.mark.parametrize("name", STEP_NAMES)
def test_the_pipelines_drawn_include_every_map_dataset_step(name):
    drawn = find(pipelines(), lambda p: name in {s[0] for s in p.map_steps})
    assert name in {s[0] for s in drawn.map_steps}


@pytest.mark.parametrize("name", ("map", "random_map", "map_with_index", "filter", "batch", "mix"))
def test_the_pipelines_drawn_include_every_iter_dataset_step(name):
    drawn = find(pipelines(), lambda p: name in {s[0] for s in p.iter_steps})
    assert name in {s[0] for s in drawn.iter_steps}


@pytest.mark.parametrize("kind", ("range", "ints", "dicts"))
def test_the_pipelines_drawn_include_every_source_kind(kind):
    assert find(pipelines(), lambda p: p.kind == kind and not p.to_iter).kind == kind


DIMENSIONS = {
    "batch-dropping-remainder": lambda p: any(s[:1] == ("batch",) and s[2] for s in p.map_steps),
    "batch-keeping-remainder": lambda p: any(s[:1] == ("batch",) and not s[2] for s in p.map_steps),
    "shuffle-with-seed": lambda p: any(
        s[:1] == ("shuffle",) and s[1] is not None for s in p.map_steps
    ),
    "shuffle-seeded-by-.seed()": lambda p: (
        p.map_steps[:1] != () and p.map_steps[0][0] == "seed" and ("shuffle", None) in p.map_steps
    ),
    "reader-threads": lambda p: p.to_iter and p.read_threads > 0,
    "filter-holes-kept-by-allow_nones": lambda p: p.allow_nones and ("filter",) in p.map_steps,
    "a-MapDataset-iterated-directly": lambda p: not p.to_iter,
    "steps-after-mp_prefetch": lambda p: bool(p.post_steps),
}


@pytest.mark.parametrize("name", sorted(DIMENSIONS))
def test_the_pipelines_drawn_include_every_dimension(name):
    drawn = find(pipelines(workers=(0, *WORKER_COUNTS)), DIMENSIONS[name])
    assert DIMENSIONS[name](drawn)
