"""Tests for grainlite.sampling.index_shuffle: bit-exact with Grain's C++ index_shuffle."""

from __future__ import annotations

import absl.flags
import numpy as np
import pytest
from grain.experimental import index_shuffle as grain_index_shuffle
from hypothesis import given, settings
from hypothesis import strategies as st

from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.index_shuffle import index_shuffle, index_shuffle_array

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed

SEEDS = st.integers(0, 2**32 - 1)
# Grain walks small ranges index by index, ~6000 encryptions for max_index=9; with many rounds a
# single reference call would take ~1 s, so many rounds are drawn only with larger ranges.
FEW_ROUNDS = st.sampled_from([4, 4, 4, 6, 8])
ANY_ROUNDS = st.sampled_from([4, 4, 6, 8, 20, 1024])


@pytest.mark.parametrize(
    ("max_index", "seed", "expected"),
    [
        (9, 0, [0, 4, 6, 7, 8, 3, 1, 9, 5, 2]),
        (9, 1, [5, 7, 6, 0, 4, 8, 9, 2, 1, 3]),
        (9, 32, [6, 9, 7, 0, 1, 3, 8, 5, 2, 4]),
        (4, 32, [2, 4, 3, 0, 1]),
        (4, 33, [0, 2, 4, 1, 3]),
        (99_999, 7, [69573, 40007, 9544, 58333, 3612, 59884, 70665, 54423]),
        (2**20, 5, [405688, 500072, 852776, 819832, 14075]),
    ],
    ids=["ten-seed-0", "ten-seed-1", "ten-seed-32", "five-seed-32", "five-seed-33",
         "hundred-thousand-seed-7", "two-to-the-20-seed-5"],
)  # fmt: skip
def test_reference_vectors_for_scalar_and_array_forms(max_index, seed, expected):
    positions = range(len(expected))
    assert [index_shuffle(i, max_index, seed) for i in positions] == expected
    got = index_shuffle_array(np.arange(len(expected)), max_index, seed)
    assert got.dtype == np.int64 and got.tolist() == expected


@settings(max_examples=80, deadline=None)
@given(
    max_index=st.one_of(
        st.integers(0, 300),
        st.integers(0, 2**40),
        st.integers(8, 40).map(lambda k: 2**k),  # block sizes at their power-of-two edges
        st.integers(8, 40).map(lambda k: 2**k + 1),
    ),
    seed=SEEDS,
    data=st.data(),
)
def test_array_form_equals_grain_for_random_configurations(max_index, seed, data):
    rounds = data.draw(FEW_ROUNDS if max_index < 2**14 else ANY_ROUNDS, label="rounds")
    indices = data.draw(
        st.lists(st.integers(0, max_index), min_size=1, max_size=24), label="indices"
    )
    indices += [0, max_index]
    expected = [grain_index_shuffle(i, max_index, seed, rounds) for i in indices]
    assert index_shuffle_array(np.array(indices), max_index, seed, rounds).tolist() == expected
    assert index_shuffle(indices[0], max_index, seed, rounds) == expected[0]


@settings(max_examples=25, deadline=None)
@given(max_index=st.integers(2**40, 2**63 - 1), seed=SEEDS, data=st.data())
def test_wide_blocks_up_to_int64_equal_grain(max_index, seed, data):
    indices = data.draw(st.lists(st.integers(0, max_index), min_size=1, max_size=8))
    expected = [grain_index_shuffle(i, max_index, seed, 4) for i in indices]
    assert index_shuffle_array(np.array(indices, dtype=np.int64), max_index, seed).tolist() == (
        expected
    )


@pytest.mark.parametrize(
    "max_index",
    [1, 9, 200, 16_384, 65_535, 300_000],
    ids=lambda m: f"max-{m}",
)
def test_every_position_appears_once(max_index):
    shuffled = index_shuffle_array(np.arange(max_index + 1), max_index, seed=1234)
    assert np.array_equal(np.sort(shuffled), np.arange(max_index + 1))
    if max_index >= 9:
        assert not np.array_equal(shuffled, np.arange(max_index + 1)), "it does shuffle"


def test_a_power_of_two_max_index_maps_itself_like_zero_as_grain_does():
    # Grain sizes the block from log2(max_index), so 2**16 does not fit the 16-bit block and wraps
    # to 0: the map is not a permutation there. Reproduced on purpose, for identical orders.
    for max_index in (2**16, 2**18):
        ours = index_shuffle(max_index, max_index, 3)
        assert ours == index_shuffle(0, max_index, 3)
        assert ours == grain_index_shuffle(max_index, max_index, 3, 4)


def test_the_array_form_keeps_the_shape_and_returns_int64():
    indices = np.arange(12, dtype=np.uint32).reshape(3, 4)
    got = index_shuffle_array(indices, 99, seed=5)
    assert got.shape == (3, 4) and got.dtype == np.int64
    assert got.ravel().tolist() == [index_shuffle(i, 99, 5) for i in range(12)]
    empty = index_shuffle_array(np.array([], dtype=np.int64), 10, seed=5)
    assert empty.shape == (0,) and empty.dtype == np.int64


def test_a_single_position_maps_to_zero():
    assert index_shuffle(0, 0, 17) == 0
    assert index_shuffle_array(np.zeros(3, dtype=np.int64), 0, 17).tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("index", "max_index", "rounds", "message"),
    [
        (0, 9, 3, "rounds must be an even integer between 4 and 1024, but got rounds = 3"),
        (0, 9, 2, "rounds must be an even integer between 4 and 1024, but got rounds = 2"),
        (0, 9, 1026, "rounds must be an even integer between 4 and 1024, but got rounds = 1026"),
        (10, 9, 3, "rounds must be an even integer between 4 and 1024, but got rounds = 3"),
        (10, 9, 4, "index must be in [0, max_index], but got index = 10 and max_index = 9"),
        (-1, 9, 4, "index must be in [0, max_index], but got index = -1 and max_index = 9"),
        (0, -1, 4, "index must be in [0, max_index], but got index = 0 and max_index = -1"),
    ],
    ids=["odd-rounds", "too-few-rounds", "too-many-rounds", "rounds-checked-first",
         "index-past-max", "negative-index", "negative-max-index"],
)  # fmt: skip
def test_bad_values_raise_grains_value_errors(index, max_index, rounds, message):
    with pytest.raises(ValueError) as grains:
        grain_index_shuffle(index, max_index, 0, rounds)
    assert str(grains.value) == message
    for call in (
        lambda: index_shuffle(index, max_index, 0, rounds),
        lambda: index_shuffle_array(np.array([index]), max_index, 0, rounds),
    ):
        with pytest.raises(GrainliteValueError) as ours:
            call()
        assert str(ours.value) == message


def test_the_array_form_reports_the_first_out_of_range_bound():
    with pytest.raises(GrainliteValueError) as caught:
        index_shuffle_array(np.array([3, 12, -2]), 9, seed=0)
    assert str(caught.value) == (
        "index must be in [0, max_index], but got index = -2 and max_index = 9"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (0, 9, 2**32),
            "index_shuffle(): seed must be an unsigned 32-bit int in [0, 2**32 - 1], got "
            "4294967296; reduce it with seed % 2**32.",
        ),
        (
            (0, 9, -1),
            "index_shuffle(): seed must be an unsigned 32-bit int in [0, 2**32 - 1], got -1; "
            "reduce it with seed % 2**32.",
        ),
        (
            (0, 2**63, 0),
            "index_shuffle(): max_index must fit a signed 64-bit int, got 9223372036854775808.",
        ),
        ((1.0, 9, 0), "index_shuffle(): index must be an int, got float 1.0."),
        ((0, 9.0, 0), "index_shuffle(): max_index must be an int, got float 9.0."),
    ],
    ids=["seed-too-large", "negative-seed", "max-index-past-int64", "float-index",
         "float-max-index"],
)  # fmt: skip
def test_arguments_grains_binding_cannot_convert_raise_type_error(args, message):
    with pytest.raises(TypeError, match="incompatible function arguments"):
        grain_index_shuffle(*args, 4)
    with pytest.raises(GrainliteTypeError) as caught:
        index_shuffle(*args)
    assert str(caught.value) == message


def test_a_non_integer_array_raises_type_error():
    with pytest.raises(GrainliteTypeError) as caught:
        index_shuffle_array(np.array([0.5]), 9, 0)
    assert str(caught.value) == (
        "index_shuffle_array(): indices must be an integer array, got dtype float64."
    )
