"""Tests for grainlite.sampling.sharding: shard options, their validation and even_split."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import sys
import types

import absl.flags
import grain.python as real_grain
import pytest
from grain._src.core import sharding as real_sharding
from hypothesis import given, settings
from hypothesis import strategies as st

from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.sharding import NoSharding, ShardByJaxProcess, ShardOptions, even_split

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed


def _error_of(build):
    """The exception ``build()`` raises (fails the test if it raises none)."""
    try:
        build()
    except Exception as error:
        return error
    pytest.fail("expected an exception")


@pytest.mark.parametrize(
    ("args", "grain_text", "hint"),
    [
        (
            (0, 0),
            "Number of shards must be a positive integer but got 0.",
            " Pass shard_count >= 1 (the number of hosts reading the data).",
        ),
        (
            (0, -1),
            "Number of shards must be a positive integer but got -1.",
            " Pass shard_count >= 1 (the number of hosts reading the data).",
        ),
        (
            (2, 2),
            "Shard shard_index must be in [0, shard_count - 1], shard_count was 2 and "
            "shard_index was 2.",
            " Pass a shard_index from 0 to 1: shard indices count from 0, as jax.process_index() "
            "does.",
        ),
        (
            (-1, 2),
            "Shard shard_index must be in [0, shard_count - 1], shard_count was 2 and "
            "shard_index was -1.",
            " Pass a shard_index from 0 to 1: shard indices count from 0, as jax.process_index() "
            "does.",
        ),
        (
            (5, 3),
            "Shard shard_index must be in [0, shard_count - 1], shard_count was 3 and "
            "shard_index was 5.",
            " Pass a shard_index from 0 to 2: shard indices count from 0, as jax.process_index() "
            "does.",
        ),
    ],
    ids=["zero-shards", "negative-shards", "index-past-the-end", "negative-index", "three-shards"],
)
def test_bad_shard_options_raise_grains_value_error_text_plus_a_hint(args, grain_text, hint):
    ours = _error_of(lambda: ShardOptions(*args))
    grains = _error_of(lambda: real_grain.ShardOptions(*args))
    assert type(grains) is ValueError and str(grains) == grain_text
    assert isinstance(ours, GrainliteValueError)
    assert str(ours) == grain_text + hint


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("a", 2),
            "ShardOptions.shard_index must be an int, got str 'a'; pass shard_index=int(...).",
        ),
        (
            (0, 2.5),
            "ShardOptions.shard_count must be an int, got float 2.5; pass shard_count=int(...).",
        ),
    ],
    ids=["string-index", "float-count"],
)
def test_non_integer_shard_options_raise_type_error(args, message):
    with pytest.raises(GrainliteTypeError) as caught:
        ShardOptions(*args)
    assert str(caught.value) == message
    assert isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    ("ours", "grains", "expected"),
    [
        (
            lambda: ShardOptions(0, 2),
            lambda: real_grain.ShardOptions(0, 2),
            "ShardOptions(shard_index=0, shard_count=2, drop_remainder=False)",
        ),
        (
            lambda: ShardOptions(1, 3, True),
            lambda: real_grain.ShardOptions(1, 3, True),
            "ShardOptions(shard_index=1, shard_count=3, drop_remainder=True)",
        ),
        (
            NoSharding,
            real_grain.NoSharding,
            "NoSharding(shard_index=0, shard_count=1, drop_remainder=False)",
        ),
        (
            lambda: ShardByJaxProcess(drop_remainder=True),
            lambda: real_grain.ShardByJaxProcess(drop_remainder=True),
            "ShardByJaxProcess(shard_index=0, shard_count=1, drop_remainder=True)",
        ),
    ],
    ids=["plain", "drop-remainder", "no-sharding", "by-jax-process"],
)
def test_repr_is_grains_because_checkpoints_embed_it(ours, grains, expected):
    assert repr(ours()) == expected
    assert repr(grains()) == expected


def test_shard_options_are_frozen_hashable_and_compare_by_class_and_fields():
    options = ShardOptions(1, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.shard_index = 2
    assert options == ShardOptions(1, 4) and hash(options) == hash(ShardOptions(1, 4))
    assert NoSharding() == NoSharding()
    assert NoSharding() != ShardOptions(0, 1), "the class is part of the identity, as in Grain"
    assert isinstance(NoSharding(), ShardOptions)


def test_shard_by_jax_process_uses_the_jax_process_index_and_count(monkeypatch):
    fake_jax = types.SimpleNamespace(process_index=lambda: 2, process_count=lambda: 4)
    monkeypatch.setitem(sys.modules, "jax", fake_jax)
    options = ShardByJaxProcess()
    assert (options.shard_index, options.shard_count, options.drop_remainder) == (2, 4, False)


def test_shard_by_jax_process_without_jax_is_a_single_shard(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # makes `import jax` raise ImportError
    assert ShardByJaxProcess(True) == ShardByJaxProcess(drop_remainder=True)
    assert repr(ShardByJaxProcess()) == (
        "ShardByJaxProcess(shard_index=0, shard_count=1, drop_remainder=False)"
    )


@pytest.mark.parametrize(
    ("num_examples", "shard_count", "drop_remainder", "blocks"),
    [
        (9, 2, False, [(0, 5), (5, 9)]),
        (8, 3, False, [(0, 3), (3, 6), (6, 8)]),
        (9, 2, True, [(0, 4), (4, 8)]),
        (10, 1, False, [(0, 10)]),
        (2, 3, False, [(0, 1), (1, 2), (2, 2)]),
    ],
    ids=["9-by-2", "8-by-3", "9-by-2-drop", "one-shard", "fewer-examples-than-shards"],
)
def test_even_split_matches_the_reference_vectors(
    num_examples, shard_count, drop_remainder, blocks
):
    got = [
        even_split(num_examples, ShardOptions(index, shard_count, drop_remainder))
        for index in range(shard_count)
    ]
    assert got == blocks


def test_even_split_with_drop_remainder_logs_how_many_examples_are_dropped(caplog):
    with caplog.at_level(logging.WARNING, logger="grainlite.sampling.sharding"):
        assert even_split(8, ShardOptions(2, 3, drop_remainder=True)) == (4, 6)
    assert [record.getMessage() for record in caplog.records] == [
        "Dropping 2 of 8 examples so that each of the 3 shards reads 2 (drop_remainder=True); "
        "pass drop_remainder=False to read them all."
    ]


def test_even_split_without_a_remainder_logs_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger="grainlite.sampling.sharding"):
        even_split(9, ShardOptions(0, 3, drop_remainder=True))
    assert caplog.records == []


@settings(max_examples=150, deadline=None)
@given(
    num_examples=st.integers(0, 10_000),
    shard_count=st.integers(1, 16),
    data=st.data(),
    drop_remainder=st.booleans(),
)
def test_even_split_equals_grains_and_tiles_the_examples(
    num_examples, shard_count, data, drop_remainder
):
    shard_index = data.draw(st.integers(0, shard_count - 1), label="shard_index")
    ours = even_split(num_examples, ShardOptions(shard_index, shard_count, drop_remainder))
    grains = real_sharding.even_split(
        num_examples, real_grain.ShardOptions(shard_index, shard_count, drop_remainder)
    )
    assert ours == grains
    blocks = [
        even_split(num_examples, ShardOptions(i, shard_count, drop_remainder))
        for i in range(shard_count)
    ]
    assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(blocks)), "contiguous"
    sizes = {end - start for start, end in blocks}
    assert max(sizes) - min(sizes) <= (0 if drop_remainder else 1)
    assert blocks[0][0] == 0
    assert blocks[-1][1] == (
        num_examples // shard_count * shard_count if drop_remainder else num_examples
    )
