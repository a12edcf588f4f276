"""What the first-fit and best-fit packers do with features that are not flat 1-D token arrays,
against the installed grain: meta features carried as lists, scalars (raw ints, 0-d arrays) packed
as one-token sequences, nested features of ``length_struct``, and the argument errors."""

from __future__ import annotations

import grain
import numpy as np
import pytest

import grainlite
from grainlite_tests.support.packing_data import run, sequence, stream

PACKERS = ["FirstFitPackIterDataset", "BestFitPackIterDataset"]


def _rows(lib, name, items, **options):
    options.setdefault("shuffle_bins", False)
    ds = lib.MapDataset.source(items).to_iter_dataset()
    return run(iter(getattr(lib.experimental, name)(ds, **options)))


@pytest.mark.parametrize("name", PACKERS)
def test_non_sequence_meta_features_names_the_meta_features_a_packer_carries_as_lists(name):
    length_struct = {"inputs": 8, "mask": 8}
    meta_features = ["doc", "mask", "source"]
    carried = grainlite.experimental.non_sequence_meta_features(length_struct, meta_features)
    assert carried == ["doc", "source"]

    items = [
        dict(sequence(i, n), mask=np.ones(n, np.int32), doc=f"doc{i}", source=i)
        for i, n in enumerate([3, 4, 2])
    ]
    ds = grainlite.MapDataset.source(items).to_iter_dataset()
    packer = getattr(grainlite.experimental, name)(
        ds, length_struct=length_struct, num_packing_bins=2, meta_features=meta_features
    )
    row = next(iter(packer))
    assert [key for key in meta_features if isinstance(row[key], list)] == carried


@pytest.mark.parametrize("name", PACKERS)
@pytest.mark.parametrize("limit", [0, -1, np.int64(0), -0.5])
def test_a_max_sequences_per_bin_below_one_is_a_value_error_in_grains_words_with_the_fix(
    name, limit
):
    packer = getattr(grainlite.experimental, name)
    with pytest.raises(ValueError) as error:
        packer(
            stream(grainlite, [1]),
            length_struct={"inputs": 6},
            num_packing_bins=2,
            max_sequences_per_bin=limit,
        )
    assert str(error.value) == (
        f"{name}: If specified, `max_sequences_per_bin` must be a positive integer, but got "
        f"{limit!r}. Pass an int >= 1, or None for no limit on the sequences of a row."
    )
    assert isinstance(error.value, grainlite.errors.GrainliteError)


SCALARS = {
    "raw-ints": [1, 2, 3, 4],
    "python-floats": [3.5, 7.5, 5.5, 1.25],
    "0-d-int32-arrays": [np.asarray(v, np.int32) for v in (3, 7, 5, 9)],
    "numpy-scalars": [np.float32(v) for v in (0.5, 1.5, 2.5, 3.5)],
    "an-int-then-floats": [3, 7.5, 5.5, 1.25],  # the first value sets the dtype: int64
}


@pytest.mark.parametrize("name", PACKERS)
@pytest.mark.parametrize("meta", [True, False], ids=["meta", "packed"])
@pytest.mark.parametrize("values", SCALARS.values(), ids=SCALARS.keys())
def test_a_scalar_feature_of_length_struct_is_packed_as_one_token_like_grain(name, meta, values):
    items = [dict(sequence(i, n), epoch=v) for i, (n, v) in enumerate(zip([3, 2, 1, 4], values))]
    options = {"length_struct": {"inputs": 4, "epoch": 3}, "num_packing_bins": 3}
    if meta:
        options["meta_features"] = ["epoch"]
    ours = _rows(grainlite, name, items, **options)
    assert ours == _rows(grain, name, items, **options)
    epochs = [dict(row["dict"])["epoch"] for row in ours[0]]
    assert all(epoch[0] == "array" and epoch[2] == (3,) for epoch in epochs)


def _nested_items() -> list[dict]:
    return [
        {
            "row": np.arange(n) + 100 * i,
            "extra": {"z": np.arange(m) + 10 * i, "a": {"q": i, "b": np.arange(1.0, 1.0 + k)}},
            "doc": i,
        }
        for i, (n, m, k) in enumerate([(3, 2, 2), (2, 3, 2), (4, 1, 3), (1, 4, 1), (5, 2, 4)])
    ]


NESTED_LENGTHS = {"row": 6, "extra": {"z": 7, "a": {"q": 3, "b": 5}}}


@pytest.mark.parametrize("name", PACKERS)
def test_a_nested_meta_feature_of_length_struct_is_packed_leaf_by_leaf_like_grain(name):
    options = {
        "length_struct": NESTED_LENGTHS,
        "num_packing_bins": 2,
        "meta_features": ["extra", "doc"],
        "seed": 3,
        "shuffle_bins": True,
        "padding_struct": {"row": -1, "extra": {"z": -2, "a": {"b": -3, "q": -4}}},
        "pack_alignment_struct": {"row": 1, "extra": {"z": 2, "a": {"q": 1, "b": 1}}},
    }
    ours = _rows(grainlite, name, _nested_items(), **options)
    assert ours == _rows(grain, name, _nested_items(), **options)
    row = dict(ours[0][0]["dict"])
    assert list(row) == ["doc", "extra", "row", "row_positions", "row_segment_ids"]
    assert [key for key, _ in row["extra"]["dict"]] == ["a", "z"]


@pytest.mark.parametrize("name", PACKERS)
def test_a_nested_feature_that_is_not_meta_is_a_value_error_in_grains_words_at_the_first_next(
    name,
):
    ds = grainlite.MapDataset.source(_nested_items()).to_iter_dataset()
    packer = getattr(grainlite.experimental, name)(
        ds, length_struct=NESTED_LENGTHS, num_packing_bins=2
    )
    iterator = iter(packer)
    with pytest.raises(ValueError) as error:
        next(iterator)
    assert str(error.value) == (
        "Failed to extract segment ids for 'extra', which has type <class 'dict'> rather than "
        "np.ndarray. Perhaps it should be marked as a meta feature? A nested feature of "
        "length_struct is packed without segment ids and positions: add 'extra' to "
        "meta_features, or make each of its arrays a top-level feature."
    )
    assert iterator.get_state()["parent"] == {"next_index": 0}  # no element was taken


BUFFER_CASES = {
    "two-features": (
        [dict(sequence(i, n, np.int32)) for i, n in enumerate([3, 5, 2])],
        {"length_struct": {"inputs": 8, "targets": 6}},
    ),
    "2-d-float16-and-a-meta-feature": (
        [
            {"tokens": np.zeros((n, 3), np.float16), "mask": np.ones(n, np.uint8), "doc": "d"}
            for n in [2, 4, 1]
        ],
        {"length_struct": {"tokens": 5, "mask": 5}, "meta_features": ["mask", "doc"]},
    ),
    "a-raw-int": (
        [dict(sequence(i, n), epoch=i) for i, n in enumerate([3, 2])],
        {"length_struct": {"inputs": 4, "epoch": 2}, "meta_features": ["epoch"]},
    ),
    "nested": (_nested_items(), {"length_struct": NESTED_LENGTHS, "meta_features": ["extra"]}),
}


@pytest.mark.parametrize("name", PACKERS)
@pytest.mark.parametrize("case", BUFFER_CASES.values(), ids=BUFFER_CASES.keys())
def test_get_packed_batch_size_bytes_reports_grains_round_buffers_once_a_round_is_packed(
    name, case
):
    items, options = case
    sizes = []
    for lib in (grainlite, grain):
        ds = lib.MapDataset.source(items).to_iter_dataset()
        iterator = iter(getattr(lib.experimental, name)(ds, num_packing_bins=3, **options))
        with pytest.raises(
            ValueError,
            match="get_packed_batch_size_bytes: no round has been"
            if lib is grainlite
            else "No current batch",
        ):
            iterator.get_packed_batch_size_bytes()
        next(iterator)
        sizes.append(iterator.get_packed_batch_size_bytes())
    assert sizes[0] == sizes[1] > 0


COUNTS = {
    "num_packing_bins": lambda v: {"length_struct": {"inputs": 6}, "num_packing_bins": v},
    "length_struct": lambda v: {"length_struct": {"inputs": v}, "num_packing_bins": 2},
}


@pytest.mark.parametrize("name", PACKERS)
@pytest.mark.parametrize("argument", COUNTS)
@pytest.mark.parametrize("value", [2.0, True, 2.5, "2"], ids=["float", "bool", "fraction", "str"])
def test_a_count_that_is_no_integer_is_a_type_error_as_in_grain(name, argument, value):
    options = COUNTS[argument](value)
    with pytest.raises(TypeError):  # Grain: at the first next()
        list(getattr(grain.experimental, name)(stream(grain, [1, 2]), **options))
    with pytest.raises(TypeError) as error:  # grainlite: at construction, naming the fix
        getattr(grainlite.experimental, name)(stream(grainlite, [1, 2]), **options)
    assert f"{argument}" in str(error.value) and "pass an int >= 1" in str(error.value)
    assert isinstance(error.value, grainlite.errors.GrainliteError)


@pytest.mark.parametrize("name", PACKERS)
@pytest.mark.parametrize("argument", COUNTS)
@pytest.mark.parametrize("value", [0, -1, np.int64(0)], ids=["zero", "negative", "numpy-zero"])
def test_a_count_below_one_is_a_value_error_as_in_grain(name, argument, value):
    options = COUNTS[argument](value)
    with pytest.raises(ValueError):
        list(getattr(grain.experimental, name)(stream(grain, [1, 2]), **options))
    with pytest.raises(ValueError, match=f"{argument}.* must be a positive int \\(got "):
        getattr(grainlite.experimental, name)(stream(grainlite, [1, 2]), **options)


@pytest.mark.parametrize("value", [2.0, True])
def test_concat_then_split_and_pack_and_batch_refuse_a_count_that_is_no_integer_with_a_type_error(
    value,
):
    with pytest.raises(TypeError):  # Grain: at the first next()
        list(
            grain.experimental.ConcatThenSplitIterDataset(
                stream(grain, [1]), length_struct={"inputs": value, "targets": 4}
            )
        )
    with pytest.raises(TypeError, match=r"length_struct\['inputs'\] must be an int"):
        grainlite.experimental.ConcatThenSplitIterDataset(
            stream(grainlite, [1]), length_struct={"inputs": value, "targets": 4}
        )
    with pytest.raises(TypeError, match="batch_size must be an int"):
        grainlite.experimental.PackAndBatchOperation(length_struct={"inputs": 4}, batch_size=value)


@pytest.mark.parametrize("name", PACKERS)
@pytest.mark.parametrize("limit", [True, 2.0, 1.5, 2.5, np.int32(2)])
def test_a_max_sequences_per_bin_grain_accepts_gives_grains_rows(name, limit):
    items = [sequence(i, n) for i, n in enumerate([1, 2, 3, 1, 1, 1, 2, 1])]
    options = {"length_struct": {"inputs": 8, "targets": 8}, "num_packing_bins": 2}
    ours = _rows(grainlite, name, items, max_sequences_per_bin=limit, **options)
    assert ours == _rows(grain, name, items, max_sequences_per_bin=limit, **options)


@pytest.mark.parametrize("name", PACKERS)
def test_a_max_sequences_per_bin_that_is_no_number_is_a_type_error_as_in_grain(name):
    options = {"length_struct": {"inputs": 6}, "num_packing_bins": 2, "max_sequences_per_bin": "2"}
    with pytest.raises(TypeError):
        getattr(grain.experimental, name)(stream(grain, [1]), **options)
    with pytest.raises(
        TypeError, match=r"`max_sequences_per_bin` must be a number \(got str '2'\)"
    ):
        getattr(grainlite.experimental, name)(stream(grainlite, [1]), **options)


@pytest.mark.parametrize("name", PACKERS)
@pytest.mark.parametrize("alignment", [True, 2.0, np.float32(3.0)])
def test_an_alignment_grain_accepts_as_a_whole_number_gives_grains_rows(name, alignment):
    items = [sequence(i, n) for i, n in enumerate([1, 2, 3, 1, 1, 1, 2, 1])]
    options = {
        "length_struct": {"inputs": 8, "targets": 8},
        "num_packing_bins": 2,
        "pack_alignment_struct": {"inputs": alignment, "targets": 1},
    }
    assert _rows(grainlite, name, items, **options) == _rows(grain, name, items, **options)


@pytest.mark.parametrize("name", PACKERS)
def test_a_fractional_alignment_is_a_value_error_naming_the_fix(name):
    with pytest.raises(
        ValueError, match=r"pack_alignment_struct\['inputs'\] must be a whole number"
    ):
        getattr(grainlite.experimental, name)(
            stream(grainlite, [1]),
            length_struct={"inputs": 8, "targets": 8},
            num_packing_bins=2,
            pack_alignment_struct={"inputs": 2.5},
        )
