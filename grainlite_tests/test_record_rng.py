"""The DataLoader's per-record generator (grainlite.sampling.rng.record_rng): Grain's
``Generator(Philox(key=seed + index))``, made without drawing entropy it would throw away."""

from __future__ import annotations

import copy
import pickle

import grain.python as real_grain
import numpy as np
import pytest

import grainlite as grain
from grainlite.sampling.rng import record_rng

KEYS = [0, 1, 12_345, 2**63 + 5, 2**64 - 1, 2**64 + 7, 2**100 + 3, 2**128 - 1]


def grains_rule(key):
    return np.random.Generator(np.random.Philox(key=key))


@pytest.mark.parametrize("key", [*KEYS, np.int64(77), np.uint64(2**63 + 1)], ids=repr)
def test_the_record_generator_is_grains_generator_for_the_same_key(key):
    ours, theirs = record_rng(key), grains_rule(key)
    assert str(ours.bit_generator.state) == str(theirs.bit_generator.state)
    assert ours.integers(0, 2**62, 64).tolist() == theirs.integers(0, 2**62, 64).tolist()
    assert ours.normal() == theirs.normal()
    assert pickle.loads(pickle.dumps(ours)).random() == pickle.loads(pickle.dumps(theirs)).random()
    assert copy.deepcopy(ours).random() == copy.deepcopy(theirs).random()
    assert ours.bit_generator.jumped(2).random_raw() == theirs.bit_generator.jumped(2).random_raw()
    with pytest.raises(TypeError, match="does not implement spawning"):
        ours.spawn(1)


@pytest.mark.parametrize("key", [-1, 2**128, "x"], ids=repr)
def test_a_key_philox_refuses_gives_numpys_own_error(key):
    with pytest.raises(ValueError) as theirs:
        grains_rule(key)
    with pytest.raises(ValueError) as ours:
        record_rng(key)
    assert str(ours.value) == str(theirs.value)


def test_a_samplers_records_carry_the_generators_of_grains_sampler():
    ours = grain.IndexSampler(50, grain.NoSharding(), shuffle=True, seed=2**31 + 9, num_epochs=2)
    theirs = real_grain.IndexSampler(
        50, real_grain.NoSharding(), shuffle=True, seed=2**31 + 9, num_epochs=2
    )
    for index in (0, 1, 49, 50, 99):
        a, b = ours[index], theirs[index]
        assert a.record_key == b.record_key
        assert str(a.rng.bit_generator.state) == str(b.rng.bit_generator.state)
        assert a.rng.random() == b.rng.random()
