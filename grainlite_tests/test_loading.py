"""``grain.load``: Grain's signature, defaults and result, element for element, state for state."""

from __future__ import annotations

import inspect
import json

import pytest

import grainlite as lite
from grainlite_tests.support import grain_peer
from grainlite_tests.support.contracts import run_with_states

real_grain = grain_peer.real_grain

pytestmark = pytest.mark.timeout(180)


def test_load_has_grains_signature_and_defaults():
    theirs = inspect.signature(real_grain.load).parameters
    ours = inspect.signature(lite.load).parameters
    assert list(ours) == list(theirs)
    for name, parameter in theirs.items():
        assert ours[name].kind == parameter.kind, name
        assert repr(ours[name].default) == repr(parameter.default), name
    assert isinstance(ours["shard_options"].default, lite.NoSharding)


def _run(library, options, ops, limit=None):
    g = lite if library == "lite" else real_grain
    transformations = [grain_peer.TRANSFORMS[op][library]() for op in ops]
    if "shard_options" in options:
        options = {**options, "shard_options": g.ShardOptions(*options["shard_options"])}
    loader = g.load(g.RangeDataSource(0, 24, 1), transformations=transformations, **options)
    iterator = iter(loader)
    try:
        return run_with_states(iterator, limit)
    finally:
        getattr(iterator, "close", lambda: None)()


CASES = {
    "defaults": ({"num_epochs": 1}, ()),
    "shuffle-batch": ({"num_epochs": 2, "shuffle": True, "seed": 7, "batch_size": 5}, ("map",)),
    "drop-remainder": ({"num_epochs": 1, "batch_size": 5, "drop_remainder": True}, ("filter",)),
    "random-map-seeded": ({"num_epochs": 1, "seed": 3}, ("random_map",)),
    "second-shard": ({"num_epochs": 1, "shard_options": (1, 2), "shuffle": True, "seed": 1}, ()),
    "two-workers": ({"num_epochs": 1, "worker_count": 2, "batch_size": 4}, ("map", "filter")),
    "endless": ({"shuffle": True, "seed": 5}, ("map",)),
}


@pytest.mark.parametrize(("options", "ops"), list(CASES.values()), ids=list(CASES))
def test_load_gives_grains_elements_and_states(options, ops):
    limit = 30 if "num_epochs" not in options else None
    elements, states = _run("lite", options, ops, limit)
    expected_elements, expected_states = _run("grain", options, ops, limit)
    assert elements == expected_elements
    assert [json.loads(s) for s in states] == [json.loads(s) for s in expected_states]


def test_a_state_saved_by_grains_load_restores_in_grainlites():
    options = {"num_epochs": 1, "shuffle": True, "seed": 11, "batch_size": 3}
    theirs = iter(real_grain.load(real_grain.RangeDataSource(0, 24, 1), **options))
    for _ in range(3):
        next(theirs)
    ours = iter(lite.load(lite.RangeDataSource(0, 24, 1), **options))
    ours.set_state(theirs.get_state())
    assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]


@pytest.mark.parametrize(
    "options",
    [{"shuffle": True}, {"batch_size": 0}, {"num_epochs": 0}, {"worker_count": -1}],
    ids=["shuffle-without-seed", "batch-size-zero", "zero-epochs", "negative-workers"],
)
def test_a_bad_argument_raises_grains_error_type(options):
    def error_of(g):
        try:
            list(g.load(g.RangeDataSource(0, 4, 1), **options))
        except Exception as error:
            return error
        raise AssertionError(f"no error for {options}")

    expected = type(error_of(real_grain))
    assert isinstance(error_of(lite), expected), expected
