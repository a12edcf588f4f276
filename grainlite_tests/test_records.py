"""Tests for grainlite.sampling.records: RecordMetadata and Record, compared with Grain's."""

from __future__ import annotations

import dataclasses

import absl.flags
import grain.python as real_grain
import numpy as np
import pytest

from grainlite.sampling.records import Record, RecordMetadata

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed


def _metadata_pair(index, record_key, rng_kind):
    """The same RecordMetadata built by grainlite and by Grain (sharing one generator object)."""
    rng = {
        "none": None,
        "pcg64": np.random.default_rng(0),
        "philox": np.random.Generator(np.random.Philox(key=3)),
    }[rng_kind]
    return RecordMetadata(index, record_key, rng), real_grain.RecordMetadata(index, record_key, rng)


@pytest.mark.parametrize(
    ("index", "record_key", "rng_kind", "expected"),
    [
        (0, 0, "pcg64", "RecordMetadata(index=0, record_key=0, rng=Generator(PCG64))"),
        (3, 3, "philox", "RecordMetadata(index=3, record_key=3, rng=Generator(Philox))"),
        (0, None, "none", "RecordMetadata(index=0, record_key=None, rng=None)"),
        (7, 2, "none", "RecordMetadata(index=7, record_key=2, rng=None)"),
    ],
    ids=["pcg64-generator", "philox-generator", "no-key-no-rng", "key-without-rng"],
)
def test_str_names_the_generator_without_its_address_like_grain(
    index, record_key, rng_kind, expected
):
    ours, grains = _metadata_pair(index, record_key, rng_kind)
    assert str(ours) == expected
    assert str(grains) == expected


def test_repr_is_the_dataclass_repr_like_grain():
    ours, grains = _metadata_pair(5, 3, "philox")
    assert repr(ours) == repr(grains)  # same generator object, so the same address
    assert repr(RecordMetadata(5)) == "RecordMetadata(index=5, record_key=None, rng=None)"


def test_fields_defaults_and_slots_match_grain():
    assert [f.name for f in dataclasses.fields(RecordMetadata)] == ["index", "record_key", "rng"]
    assert RecordMetadata.__slots__ == real_grain.RecordMetadata.__slots__
    assert Record.__slots__ == real_grain.Record.__slots__ == ("metadata", "data")
    metadata = RecordMetadata(4)
    assert metadata.record_key is None and metadata.rng is None
    with pytest.raises(AttributeError):
        metadata.extra = 1  # slotted: no stray attributes


def test_remove_record_key_returns_a_copy_without_the_key_and_keeps_the_rng():
    rng = np.random.default_rng(1)
    metadata = RecordMetadata(index=9, record_key=4, rng=rng)
    stripped = metadata.remove_record_key()
    assert stripped == RecordMetadata(index=9, record_key=None, rng=rng)
    assert stripped.rng is rng
    assert metadata.record_key == 4, "the original is unchanged"
    assert stripped is not metadata


def test_equality_compares_fields():
    assert RecordMetadata(0, 1) == RecordMetadata(0, 1)
    assert RecordMetadata(0, 1) != RecordMetadata(0, 2)


def test_record_is_a_generic_slotted_dataclass_with_grains_repr():
    metadata = RecordMetadata(5, 3)
    record = Record[int](metadata, 7)
    assert record.metadata is metadata and record.data == 7
    expected = "Record(metadata=RecordMetadata(index=5, record_key=3, rng=None), data=7)"
    assert repr(record) == expected
    assert repr(real_grain.Record(real_grain.RecordMetadata(5, 3), 7)) == expected
    record.data = 8  # mutable, as in Grain: transforms replace the data in place
    assert record == Record(RecordMetadata(5, 3), 8)
