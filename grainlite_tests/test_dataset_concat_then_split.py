"""``ConcatThenSplitIterDataset`` and ``BOSHandling`` against the installed grain: rows, keys and
states at every step for random streams and options, restores both ways, the invariants
(hypothesis, unequal features too), resume at every step, where grainlite fixes Grain (duplicated
tokens, BOS crashes) and the errors."""

from __future__ import annotations

import json

import grain
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grainlite
from grainlite.dataset.experimental.concat_then_split import (
    BOSHandling,
    ConcatThenSplitIterDataset,
)
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step
from grainlite_tests.support.packing_data import assert_rows_are_consistent, run, stream, tokens_of


def _random_case(seed: int) -> tuple[list[int], int, dict]:
    """A long-tailed stream, a row length and a random mix of options Grain handles correctly.

    BOS replacement only on streams without empty sequences and without meta features: there
    Grain 0.2.18 raises IndexError or writes BOS into padding."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(1.5, 1.0, size=rng.integers(0, 30)), 0, 30).astype(int)
    length = int(rng.integers(1, 12))
    options: dict = {"length_struct": {"inputs": length, "targets": length}}
    meta = bool(rng.integers(0, 2)) and length >= 2
    if meta:
        options["length_struct"]["doc"] = length
        options["meta_features"] = ["doc"]
    if rng.integers(0, 2):
        options["split_full_length_features"] = False
    if rng.integers(0, 2) and not meta and 0 not in lengths:
        options.update(bos_features=["inputs"], bos_token_id=-7, bos_handling="replace")
    return lengths.tolist(), length, options


def _packer(lib, lengths, options):
    options = dict(options)
    if "bos_handling" in options:
        options["bos_handling"] = lib.experimental.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS
    ds = stream(lib, lengths)
    if "doc" in options["length_struct"]:
        ds = ds.map(_with_doc)
    return lib.experimental.ConcatThenSplitIterDataset(ds, **options)


def _with_doc(element):
    return dict(element, doc=element["inputs"][:1] // 1000)


@pytest.mark.parametrize("seed", range(16))
def test_rows_and_every_state_match_grain_for_random_streams_and_options(seed):
    lengths, _, options = _random_case(seed)
    expected = run(iter(_packer(grain, lengths, options)))
    assert run(iter(_packer(grainlite, lengths, options))) == expected


def test_keys_follow_length_struct_with_segment_ids_before_positions_like_grain():
    options = {"length_struct": {"targets": 4, "inputs": 4}}
    ours = next(iter(_packer(grainlite, [3, 2], options)))
    assert list(ours) == list(next(iter(_packer(grain, [3, 2], options))))
    assert list(ours) == [
        "targets",
        "targets_segment_ids",
        "targets_positions",
        "inputs",
        "inputs_segment_ids",
        "inputs_positions",
    ]


@pytest.mark.parametrize("lib", [grainlite, grain], ids=["grainlite", "grain"])
def test_the_state_after_the_end_is_the_state_after_the_last_row(lib):
    iterator = iter(_packer(lib, [3, 4], {"length_struct": {"inputs": 4, "targets": 4}}))
    rows = [next(iterator), next(iterator)]
    last = json.loads(json.dumps(iterator.get_state()))
    with pytest.raises(StopIteration):
        next(iterator)
    assert json.loads(json.dumps(iterator.get_state())) == last
    assert rows[1]["inputs"].tolist() == [1001, 1002, 1003, 0]


def test_a_split_sequence_continues_in_the_next_row_with_positions_from_zero():
    rows = list(_packer(grainlite, [3, 6], {"length_struct": {"inputs": 4, "targets": 4}}))
    assert [row["inputs"].tolist() for row in rows] == [
        [0, 1, 2, 1000],
        [1001, 1002, 1003, 1004],
        [1005, 0, 0, 0],
    ]
    assert [row["inputs_positions"].tolist() for row in rows] == [
        [0, 1, 2, 0],
        [0, 1, 2, 3],
        [0, 0, 0, 0],
    ]


def test_the_state_stores_slices_as_lists_and_grains_tuples_restore_here():
    options = {"length_struct": {"inputs": 4, "targets": 4}}
    theirs = iter(_packer(grain, [3, 9, 2], options))
    next(theirs)
    next(theirs)
    state = theirs.get_state()
    assert state["remainder_slices"] == {"inputs": (1, 9), "targets": (1, 9)}
    expected = [row["inputs"].tolist() for row in theirs]
    ours = iter(_packer(grainlite, [3, 9, 2], options))
    ours.set_state(state)
    assert ours.get_state()["remainder_slices"] == {"inputs": [1, 9], "targets": [1, 9]}
    assert [row["inputs"].tolist() for row in ours] == expected


def _with_tuples(state):
    """A state with Grain's tuple slices: Grain 0.2.18 misreads ``[start, stop]`` lists."""
    slices = {name: tuple(pair) for name, pair in state["remainder_slices"].items()}
    return dict(state, remainder_slices=slices)


def test_grain_misreads_its_own_state_after_json_and_grainlite_does_not():
    options = {"length_struct": {"inputs": 4, "targets": 4}}
    for lib in (grain, grainlite):
        first = iter(_packer(lib, [3, 9, 2], options))
        next(first)
        checkpoint = json.loads(json.dumps(first.get_state()))
        expected = [row["inputs"].tolist() for row in first]
        restored = iter(_packer(lib, [3, 9, 2], options))
        restored.set_state(checkpoint)
        rest = [row["inputs"].tolist() for row in restored]
        assert (rest == expected) == (lib is grainlite)


@pytest.mark.parametrize("step", [0, 1, 3, 6])
def test_a_state_saved_by_grain_restores_here_and_ours_restores_in_grain(step):
    lengths, _, options = _random_case(4)
    expected, states = run(iter(_packer(grain, lengths, options)))
    step = min(step, len(expected))
    ours = iter(_packer(grainlite, lengths, options))
    ours.set_state(states[step])
    assert run(ours)[0] == expected[step:]
    mine = iter(_packer(grainlite, lengths, options))
    for _ in range(step):
        next(mine)
    theirs = iter(_packer(grain, lengths, options))
    theirs.set_state(_with_tuples(mine.get_state()))
    assert run(theirs)[0] == expected[step:]


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_resumes_at_every_step_in_process(seed):
    lengths, _, options = _random_case(seed)
    assert_dataset_resumes_at_every_step(lambda: iter(_packer(grainlite, lengths, options)))


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=20),
    inputs_length=st.integers(1, 8),
    targets_length=st.integers(1, 8),
)
def test_every_token_of_unequal_features_is_packed_once_in_consistent_rows(
    shapes, inputs_length, targets_length
):
    items = [
        {
            "inputs": np.arange(a, dtype=np.int64) + 1000 * i,
            "targets": np.arange(b, dtype=np.int64) + 1000 * i,
        }
        for i, (a, b) in enumerate(shapes)
    ]
    ds = grainlite.MapDataset.source(items).to_iter_dataset()
    rows = list(
        ConcatThenSplitIterDataset(
            ds, length_struct={"inputs": inputs_length, "targets": targets_length}
        )
    )
    for feature, length, column in (("inputs", inputs_length, 0), ("targets", targets_length, 1)):
        expected = [1000 * i + p for i, shape in enumerate(shapes) for p in range(shape[column])]
        assert tokens_of(rows, feature) == {token: 1 for token in expected}
        assert_rows_are_consistent(rows, feature, length)
        # tokens come out in stream order: concatenated, then split
        ids = [np.asarray(row[f"{feature}_segment_ids"]) for row in rows]
        flat = [t for row, i in zip(rows, ids) for t in row[feature][i > 0].tolist()]
        assert flat == expected


def test_unequal_features_give_each_token_once_where_grain_repeats_some():
    # The fifth sequence's `inputs` is split over two rows while its `targets` fit in the first;
    # Grain 0.2.18 gives those `targets` tokens again in the next row.
    shapes = [(3, 1), (5, 2), (2, 7), (1, 1), (4, 0), (6, 3), (2, 2), (3, 9)]
    items = [
        {"inputs": np.arange(a) + 1000 * i, "targets": np.arange(b) + 1000 * i}
        for i, (a, b) in enumerate(shapes)
    ]
    options = {"length_struct": {"inputs": 4, "targets": 6}}

    def targets(lib):
        ds = lib.MapDataset.source(items).to_iter_dataset()
        return tokens_of(
            list(lib.experimental.ConcatThenSplitIterDataset(ds, **options)), "targets"
        )

    expected = {1000 * i + p: 1 for i, (_, b) in enumerate(shapes) for p in range(b)}
    assert targets(grainlite) == expected
    assert {t: n for t, n in targets(grain).items() if n > 1} == {5000: 2, 5001: 2, 5002: 2}


def test_bos_replaces_the_first_token_of_every_piece_and_survives_empty_sequences():
    options = {
        "length_struct": {"inputs": 4, "targets": 4},
        "bos_handling": BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
        "bos_features": ["inputs"],
        "bos_token_id": -1,
    }
    rows = list(ConcatThenSplitIterDataset(stream(grainlite, [2, 0, 7]), **options))
    assert [row["inputs"].tolist() for row in rows] == [
        [-1, 1, -1, 2001],
        [-1, 2003, 2004, 2005],
        [-1, 0, 0, 0],  # the padding stays
    ]
    assert rows[0]["targets"].tolist() == [1, 2, 2001, 2002]  # not a BOS feature
    ours = ConcatThenSplitIterDataset(stream(grainlite, [1, 3, 0]), **options)
    assert [row["inputs"].tolist() for row in ours] == [[-1, -1, 1001, 1002]]
    grains = grain.experimental.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS
    theirs = grain.experimental.ConcatThenSplitIterDataset(
        stream(grain, [1, 3, 0]), **{**options, "bos_handling": grains}
    )
    with pytest.raises(IndexError):  # Grain 0.2.18 fails on the empty sequence at a row's end
        list(theirs)


def test_bos_handling_values_and_the_missing_token_error_match_grain():
    assert [(m.name, m.value) for m in BOSHandling] == [
        (m.name, m.value) for m in grain.experimental.BOSHandling
    ]
    with pytest.raises(ValueError, match="bos_token_id must be set if bos_handling is"):
        ConcatThenSplitIterDataset(
            stream(grainlite, [1]),
            length_struct={"inputs": 4, "targets": 4},
            bos_handling=BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
        )


def test_a_feature_missing_from_length_struct_is_a_value_error_naming_both():
    packer = ConcatThenSplitIterDataset(stream(grainlite, [2]), length_struct={"inputs": 4})
    with pytest.raises(ValueError) as error:
        list(packer)
    assert str(error.value) == (
        "Parent element has structure {'inputs': int64[2], 'targets': int64[2]} but target "
        "sequence length is {'inputs': 4}. There must be a sequence length for each feature: "
        "ConcatThenSplitIterDataset got an element with features ['inputs', 'targets'] where "
        "length_struct has ['inputs']; add the missing ones to length_struct or drop them with a "
        "map first."
    )


def test_a_feature_mismatch_quotes_a_huge_element_within_bounds():
    items = [{f"feature_{k}": np.arange(2) for k in range(300)}]
    packer = ConcatThenSplitIterDataset(
        grainlite.MapDataset.source(items).to_iter_dataset(), length_struct={"inputs": 4}
    )
    with pytest.raises(ValueError, match=r"^Parent element has structure ") as error:
        list(packer)
    assert len(str(error.value)) < 1000


def test_a_meta_feature_longer_than_its_target_is_a_value_error():
    items = [{"inputs": np.arange(2), "doc": np.arange(5)}]
    ds = grainlite.MapDataset.source(items).to_iter_dataset()
    packer = ConcatThenSplitIterDataset(
        ds, length_struct={"inputs": 4, "doc": 4}, meta_features=["doc"]
    )
    with pytest.raises(ValueError, match="meta feature 'doc' has 5 tokens, more than its target"):
        list(packer)


def _fail_at_three(element):
    if int(element["inputs"][0]) == 3000:
        raise KeyError("record 3 is missing")
    return element


@pytest.mark.parametrize("lib", [grainlite, grain], ids=["grainlite", "grain"])
def test_an_error_from_the_parent_comes_after_the_rows_finished_before_it(lib):
    # planning reads one sequence ahead (does the next one fit?), so the row holding the
    # sequence before the failing one is lost with the error, in Grain too
    ds = stream(lib, [4, 4, 4, 4]).map(_fail_at_three)
    packer = lib.experimental.ConcatThenSplitIterDataset(
        ds, length_struct={"inputs": 4, "targets": 4}
    )
    iterator = iter(packer)
    assert [int(next(iterator)["inputs"][0]) for _ in range(2)] == [0, 1000]
    with pytest.raises(KeyError, match="record 3 is missing"):
        next(iterator)
