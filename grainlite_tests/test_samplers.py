"""Tests for the built-in samplers: keys, lengths, generators, reprs and errors as Grain's."""

from __future__ import annotations

import sys

import absl.flags
import grain.python as real_grain
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.index_sampler import IndexSampler
from grainlite.sampling.index_shuffle import index_shuffle
from grainlite.sampling.records import RecordMetadata
from grainlite.sampling.samplers import Sampler
from grainlite.sampling.sequential_sampler import SequentialSampler
from grainlite.sampling.sharding import NoSharding, ShardOptions, even_split

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed


def host_keys(sampler, shard_index: int, shard_count: int) -> list[int]:
    """The record keys host ``shard_index`` reads: indices ``s, s + S, ...`` below ``len``."""
    return [sampler[i].record_key for i in range(shard_index, len(sampler), shard_count)]


@pytest.mark.parametrize(
    ("num_records", "shard", "num_epochs", "seed", "expected"),
    [
        (5, None, 2, 32, [[2, 4, 3, 0, 1, 0, 2, 4, 1, 3]]),
        (6, (3, True), 1, 32, [[0, 1], [2, 3], [4, 5]]),
        (8, (3, False), 1, 32, [[2, 1, 0], [5, 4, 3], [6, 7]]),
        (8, (3, False), 2, 32, [[2, 1, 0, 0, 2, 1], [5, 4, 3, 3, 5], [6, 7, 6, 7, 6]]),
        (10, None, 2, 42, [[8, 6, 7, 9, 0, 5, 1, 2, 4, 3, 2, 0, 9, 1, 5, 7, 6, 8, 4, 3]]),
        (7, (2, False), 3, 1, [[1, 2, 3, 0, 0, 3, 1, 2, 2, 3, 0], [5, 6, 4, 4, 6, 5, 6, 5, 4, 5]]),
    ],
    ids=["five-two-epochs", "six-by-three-drop", "eight-by-three", "eight-by-three-two-epochs",
         "ten-seed-42", "seven-by-two-three-epochs"],
)  # fmt: skip
def test_shuffled_keys_per_host_match_the_reference_vectors(
    num_records, shard, num_epochs, seed, expected
):
    shard_count, drop = shard or (1, False)
    for shard_index, keys in enumerate(expected):
        options = ShardOptions(shard_index, shard_count, drop) if shard else NoSharding()
        sampler = IndexSampler(num_records, options, True, num_epochs, seed)
        assert host_keys(sampler, shard_index, shard_count) == keys
        indices = np.arange(shard_index, len(sampler), shard_count)
        assert sampler.record_keys(indices).tolist() == keys


def test_shuffle_reshuffles_every_epoch_with_seed_plus_epoch():
    sampler = IndexSampler(50, shuffle=True, num_epochs=4, seed=2**32 - 2)
    for epoch in range(4):
        epoch_seed = (2**32 - 2 + epoch) % 2**32  # wraps to 0 in the third epoch
        keys = [sampler[epoch * 50 + j].record_key for j in range(50)]
        assert keys == [index_shuffle(j, 49, epoch_seed) for j in range(50)]


def test_unshuffled_keys_wrap_inside_the_hosts_block():
    sampler = IndexSampler(8, ShardOptions(2, 3), num_epochs=2)
    assert host_keys(sampler, 2, 3) == [6, 7, 6, 7, 6]
    assert len(sampler) == 16


@pytest.mark.parametrize(
    ("seed", "index", "expected"),
    [(3, 4, 0.8720734548204873), (3, 0, 0.9342820204007575), (0, 0, 0.011546754286331562)],
    ids=["philox-key-7", "philox-key-3", "philox-key-0"],
)
def test_each_record_gets_a_philox_generator_keyed_by_seed_plus_global_index(seed, index, expected):
    for sampler in (IndexSampler(5, num_epochs=2, seed=seed), SequentialSampler(5, seed=seed)):
        assert sampler[index].rng.random() == expected


def test_without_a_seed_records_get_no_generator():
    assert IndexSampler(5)[3] == RecordMetadata(index=3, record_key=3, rng=None)
    assert SequentialSampler(5)[3] == RecordMetadata(index=3, record_key=3, rng=None)
    assert IndexSampler(5).seed is None and SequentialSampler(5, seed=9).seed == 9


@pytest.mark.parametrize(
    ("sampler", "expected"),
    [
        (lambda m: m.SequentialSampler(8), "SequentialSampler(num_records=8, shard_options="
         "NoSharding(shard_index=0, shard_count=1, drop_remainder=False))"),
        (lambda m: m.SequentialSampler(8, m.ShardOptions(1, 2), seed=4), "SequentialSampler("
         "num_records=8, shard_options=ShardOptions(shard_index=1, shard_count=2, "
         "drop_remainder=False))"),
        (lambda m: m.IndexSampler(16, num_epochs=1), "IndexSampler(num_records=16, shard_options="
         "NoSharding(shard_index=0, shard_count=1, drop_remainder=False), shuffle=False, "
         "num_epochs=1, seed=None)"),
        (lambda m: m.IndexSampler(10, m.ShardOptions(1, 3), True, 2, 42), "IndexSampler("
         "num_records=10, shard_options=ShardOptions(shard_index=1, shard_count=3, "
         "drop_remainder=False), shuffle=True, num_epochs=2, seed=42)"),
    ],
    ids=["sequential", "sequential-sharded-seed-not-shown", "index", "index-sharded-shuffled"],
)  # fmt: skip
def test_repr_is_grains_exact_text_because_checkpoints_compare_it(sampler, expected):
    from grainlite import sampling

    assert repr(sampler(sampling)) == expected
    assert repr(sampler(real_grain)) == expected


@pytest.mark.parametrize(
    ("build", "length"),
    [
        (lambda m: m.IndexSampler(8, num_epochs=2), 16),
        (lambda m: m.IndexSampler(8), sys.maxsize),
        (lambda m: m.IndexSampler(8, m.ShardOptions(0, 3, True), num_epochs=2), 12),
        (lambda m: m.IndexSampler(8, m.ShardOptions(2, 3, True)), sys.maxsize),
        (lambda m: m.SequentialSampler(8), 8),
        (lambda m: m.SequentialSampler(8, m.ShardOptions(1, 3, True)), 6),
    ],
    ids=["epochs", "endless", "drop-remainder", "drop-remainder-endless", "sequential",
         "sequential-drop-remainder"],
)  # fmt: skip
def test_len_matches_grain(build, length):
    from grainlite import sampling

    assert len(build(sampling)) == length
    assert len(build(real_grain)) == length


def _errors(build):
    """(grainlite's exception, Grain's exception) for the same bad arguments."""
    from grainlite import sampling

    found = []
    for module in (sampling, real_grain):
        try:
            build(module)
        except Exception as error:
            found.append(error)
        else:
            pytest.fail(f"{module.__name__} accepted the arguments")
    return found


RECORDS_TEXT = (
    "Invalid number of records in Sampler. Got {n} records, but number of records must be "
    "greater than 0."
)
EPOCHS_TEXT = (
    "Invalid number of epochs in Index Sampler.Got {n} epochs, but number of epochs must be "
    "greater than 0."
)
# Grain's two sentences run together; ours has the space between them, and nothing else differs.
OUR_SPACING = {"Index Sampler.Got": "Index Sampler. Got"}

RECORDS_HINT = (
    " A sampler needs a non-empty data source: check that the data source has records and pass "
    "num_records=len(data_source)."
)
EPOCHS_HINT = (
    " Pass num_epochs=N with N >= 1 for N passes over the data, or None for an endless stream."
)


@pytest.mark.parametrize(
    ("build", "kind", "grain_text", "hint"),
    [
        (lambda m: m.IndexSampler(0), GrainliteValueError, RECORDS_TEXT.format(n=0),
         RECORDS_HINT),
        (lambda m: m.SequentialSampler(-3), GrainliteValueError, RECORDS_TEXT.format(n=-3),
         RECORDS_HINT),
        (lambda m: m.IndexSampler(5, num_epochs=0), GrainliteValueError, EPOCHS_TEXT.format(n=0),
         EPOCHS_HINT),
        (lambda m: m.IndexSampler(5, num_epochs=-2), GrainliteValueError,
         EPOCHS_TEXT.format(n=-2), EPOCHS_HINT),
        (lambda m: m.IndexSampler(0, num_epochs=0), GrainliteValueError, RECORDS_TEXT.format(n=0),
         RECORDS_HINT),
        (lambda m: m.IndexSampler(5, shuffle=True), GrainliteValueError,
         "Shuffling requires specifying a seed.", " Pass seed=<an int in [0, 2**32 - 1]>."),
        (lambda m: m.IndexSampler(5, shuffle=True, seed=1.5), GrainliteTypeError,
         "Expected seed of int type. Got seed with type <class 'float'>",
         ": 1.5; pass an int in [0, 2**32 - 1] as a Python int (int(seed) converts a numpy "
         "integer)."),
        (lambda m: m.IndexSampler(5, shuffle=True, seed=np.int64(3)), GrainliteTypeError,
         "Expected seed of int type. Got seed with type <class 'numpy.int64'>",
         ": np.int64(3); pass an int in [0, 2**32 - 1] as a Python int (int(seed) converts a "
         "numpy integer)."),
    ],
    ids=["no-records", "negative-records", "no-epochs", "negative-epochs",
         "records-checked-before-epochs",
         "shuffle-without-seed", "float-seed", "numpy-seed"],
)  # fmt: skip
def test_bad_arguments_raise_grains_exception_and_text_plus_a_hint(build, kind, grain_text, hint):
    ours, grains = _errors(build)
    assert type(grains) in (ValueError, TypeError) and isinstance(ours, type(grains))
    assert str(grains) == grain_text
    assert isinstance(ours, kind)
    for grains_words, ours_words in OUR_SPACING.items():
        grain_text = grain_text.replace(grains_words, ours_words)
    assert str(ours) == grain_text + hint


@pytest.mark.parametrize(
    ("build", "kind", "message"),
    [
        (lambda: IndexSampler(2.5), GrainliteTypeError,
         "IndexSampler: num_records must be an int, got float 2.5; pass "
         "num_records=len(data_source)."),
        (lambda: SequentialSampler("3"), GrainliteTypeError,
         "SequentialSampler: num_records must be an int, got str '3'; pass "
         "num_records=len(data_source)."),
        (lambda: IndexSampler(5, num_epochs=2.5), GrainliteTypeError,
         "IndexSampler: num_epochs must be an int or None, got float 2.5; pass num_epochs=N with "
         "N >= 1 for N passes over the data, or None for an endless stream."),
        (lambda: IndexSampler(5, shard_options=None), GrainliteTypeError,
         "IndexSampler: shard_options must be a ShardOptions, got NoneType None; pass "
         "NoSharding(), ShardByJaxProcess() or ShardOptions(i, n)."),
        (lambda: IndexSampler(5, seed=1.5), GrainliteTypeError,
         "Expected seed of int type. Got seed with type <class 'float'>: 1.5; pass an int in "
         "[0, 2**32 - 1] as a Python int (int(seed) converts a numpy integer)."),
        (lambda: SequentialSampler(5, seed="x"), GrainliteTypeError,
         "Expected seed of int type. Got seed with type <class 'str'>: 'x'; pass an int >= 0 as "
         "a Python int (int(seed) converts a numpy integer)."),
        (lambda: SequentialSampler(5, seed=-3), GrainliteValueError,
         "SequentialSampler: seed must be a non-negative int or None, got -3; pass an int >= 0 "
         "(e.g. seed % 2**32), or None for records without a generator."),
    ],
    ids=["float-records", "string-records", "float-epochs", "no-shard-options",
         "float-seed-without-shuffle", "string-seed", "negative-sequential-seed"],
)  # fmt: skip
def test_arguments_grain_fails_on_later_or_obscurely_raise_a_clear_error_early(
    build, kind, message
):
    with pytest.raises(kind) as caught:
        build()
    assert str(caught.value) == message


PAST_THE_END = {
    "sequential": "for N passes over the data use IndexSampler(num_records, num_epochs=N)",
    "index": "for a longer stream pass num_epochs above 2, or None (endless)",
}


@pytest.mark.parametrize("kind", ["index", "sequential"])
@pytest.mark.parametrize("index", [-1, 10], ids=["negative", "at-len"])
def test_indices_outside_the_length_raise_index_error_with_the_range_and_the_fix(kind, index):
    if kind == "sequential":
        sampler = SequentialSampler(10, seed=1)
        grains = real_grain.SequentialSampler(10, seed=1)
    else:
        sampler = IndexSampler(5, num_epochs=2, seed=1)
        grains = real_grain.IndexSampler(5, num_epochs=2, seed=1)
    with pytest.raises(IndexError):
        grains[index]  # the type users catch (and the loader's end of stream) is Grain's
    with pytest.raises(IndexError) as caught:
        sampler[index]
    fix = (
        "negative indices do not count from the end: pass len(sampler) - k for the k-th from "
        "the end"
        if index < 0
        else PAST_THE_END[kind]
    )
    assert str(caught.value) == (
        f"{type(sampler).__name__} index {index} is out of range: indices must be in [0, 10) "
        f"(0 <= index < len(sampler)); {fix}."
    )
    with pytest.raises(TypeError) as wrong_type:
        sampler[3.0]
    assert str(wrong_type.value) == (
        f"{type(sampler).__name__} index must be an int, got float 3.0; pass an int in [0, 10), "
        "e.g. sampler[int(index)]."
    )


def test_the_end_of_an_endless_index_sampler_says_it_is_the_end():
    with pytest.raises(IndexError) as caught:
        IndexSampler(3)[sys.maxsize]
    assert str(caught.value) == (
        f"IndexSampler index {sys.maxsize} is out of range: indices must be in [0, {sys.maxsize}) "
        "(0 <= index < len(sampler)); this endless stream (num_epochs=None) ends at sys.maxsize."
    )


def test_samplers_satisfy_the_protocol_and_iterate_by_getitem():
    sampler: Sampler = SequentialSampler(4, ShardOptions(0, 2, True))
    assert [m.record_key for m in sampler] == [0, 1, 2, 3]  # old sequence protocol: stops at len
    assert sampler._shard_options == ShardOptions(0, 2, True)  # the DataLoader inherits it
    assert IndexSampler(3)._shard_options == NoSharding()
    assert sampler[np.int64(2)].index == 2 and type(sampler[np.int64(2)].index) is int


def _configurations():
    """Random sampler arguments within the ranges the DataLoader sees in practice."""
    return st.fixed_dictionaries(
        {
            "num_records": st.integers(1, 200),
            "shard_count": st.integers(1, 4),
            "shard_pick": st.integers(0, 3),
            "drop_remainder": st.booleans(),
            "num_epochs": st.sampled_from([None, 1, 2, 3]),
            "shuffle": st.booleans(),
            "seed": st.one_of(st.none(), st.integers(0, 2**32 - 1)),
        }
    )


def _twins(config):
    """The same IndexSampler from grainlite and from Grain, and whether this host's shard is
    empty (then ours reads no index; Grain reads none, or fails at its first)."""
    shard_count = config["shard_count"]
    args = (config["shard_pick"] % shard_count, shard_count, config["drop_remainder"])
    seed = config["seed"] if config["seed"] is not None or not config["shuffle"] else 7
    rest = (config["shuffle"], config["num_epochs"], seed)
    grains = real_grain.IndexSampler(config["num_records"], real_grain.ShardOptions(*args), *rest)
    ours = IndexSampler(config["num_records"], ShardOptions(*args), *rest)
    records = config["num_records"]
    empty = records < shard_count and (config["drop_remainder"] or args[0] >= records)
    if empty:
        assert repr(ours) == repr(grains)
        assert len(ours) <= args[0]  # this host's first index is past the end: nothing to read
        if len(grains) > args[0]:
            with pytest.raises(ZeroDivisionError):
                grains[args[0]]
    return ours, grains, empty


@settings(max_examples=120, deadline=None)
@given(config=_configurations(), data=st.data())
def test_index_sampler_equals_grain_for_random_configurations(config, data):
    ours, grains, empty = _twins(config)
    if empty:
        return
    assert repr(ours) == repr(grains) and len(ours) == len(grains)
    if not len(ours):
        return
    top = min(len(ours), 4 * config["num_records"] + 8) - 1
    indices = data.draw(st.lists(st.integers(0, top), min_size=1, max_size=10), label="indices")
    if config["num_epochs"] is not None:
        indices.append(len(ours) - 1)
    else:
        indices.append(data.draw(st.integers(0, sys.maxsize - 1), label="far index"))
    keys = ours.record_keys(np.array(indices))
    for i, key in zip(indices, keys.tolist()):
        mine, theirs = ours[i], grains[i]
        assert (mine.index, mine.record_key) == (i, theirs.record_key) == (i, key)
        if theirs.rng is None:
            assert mine.rng is None
        else:
            assert mine.rng.random() == theirs.rng.random()


@settings(max_examples=60, deadline=None)
@given(config=_configurations(), data=st.data())
def test_sequential_sampler_equals_grain_for_random_configurations(config, data):
    shard_count = config["shard_count"]
    options = (config["shard_pick"] % shard_count, shard_count, config["drop_remainder"])
    n, seed = config["num_records"], config["seed"]
    grains = real_grain.SequentialSampler(n, real_grain.ShardOptions(*options), seed)
    ours = SequentialSampler(n, ShardOptions(*options), seed)
    assert repr(ours) == repr(grains) and len(ours) == len(grains)
    if options[0] >= len(grains):  # both give this host an empty stream
        return
    for i in data.draw(st.lists(st.integers(0, n + 2), max_size=10), label="indices"):
        if i >= len(grains):
            with pytest.raises(IndexError):
                grains[i]
            with pytest.raises(IndexError):
                ours[i]
            continue
        mine, theirs = ours[i], grains[i]
        assert (mine.index, mine.record_key) == (theirs.index, theirs.record_key)
        assert (mine.rng is None) == (theirs.rng is None)
        assert mine.rng is None or mine.rng.random() == theirs.rng.random()


@settings(max_examples=40, deadline=None)
@given(config=_configurations(), start=st.integers(0, 10**6), size=st.integers(0, 600))
def test_record_keys_equal_getitem_keys_over_blocks_spanning_epochs(config, start, size):
    shard_count = min(config["shard_count"], config["num_records"])
    options = ShardOptions(config["shard_pick"] % shard_count, shard_count)
    ours = IndexSampler(config["num_records"], options, config["shuffle"], None, seed=5)
    indices = np.arange(start, start + size, dtype=np.int64)[::-1]  # any order works
    keys = ours.record_keys(indices)
    assert keys.dtype == np.int64 and keys.shape == indices.shape
    assert keys.tolist() == [ours[int(i)].record_key for i in indices]


@pytest.mark.parametrize(
    ("num_records", "shard"),
    [(70_000, (0, 1)), (300_001, (1, 3)), (1_048_600, (3, 4))],
    ids=["cycle-walk-one-host", "cycle-walk-sharded", "cycle-walk-long-walks"],
)
def test_large_shuffled_samplers_match_grain_across_an_epoch_boundary(num_records, shard):
    shard_index, shard_count = shard
    ours = IndexSampler(num_records, ShardOptions(*shard), shuffle=True, num_epochs=3, seed=99)
    grains = real_grain.IndexSampler(
        num_records, real_grain.ShardOptions(*shard), shuffle=True, num_epochs=3, seed=99
    )
    start, end = even_split(num_records, ShardOptions(*shard))
    boundary = (end - start) * shard_count + shard_index  # this host's first index of epoch 2
    indices = np.arange(boundary - 300 * shard_count, boundary + 300 * shard_count, shard_count)
    keys = ours.record_keys(indices).tolist()
    assert keys == [grains[int(i)].record_key for i in indices]
    assert keys[:300] != keys[300:], "the two epochs are shuffled differently"


EMPTY_SHARD_WARNING = (
    "{sampler}: shard {index} of {count} gets no records, because num_records={records} is "
    "smaller than shard_count={count}, so this host's stream is empty. In a multi-host job every "
    "host must leave its loop the same way (one that stops early skips the collectives the "
    "others wait at); use at most {records} shard{s} to give every host records."
)


@pytest.mark.parametrize(
    "build, words",
    [
        (lambda: IndexSampler(2, ShardOptions(2, 3), num_epochs=1),
         {"sampler": "IndexSampler", "index": 2, "count": 3, "records": 2, "s": "s"}),
        (lambda: IndexSampler(2, ShardOptions(2, 3), shuffle=True, num_epochs=3, seed=1),
         {"sampler": "IndexSampler", "index": 2, "count": 3, "records": 2, "s": "s"}),
        (lambda: IndexSampler(1, ShardOptions(1, 2)),
         {"sampler": "IndexSampler", "index": 1, "count": 2, "records": 1, "s": ""}),
        (lambda: IndexSampler(2, ShardOptions(0, 3, True), num_epochs=2),
         {"sampler": "IndexSampler", "index": 0, "count": 3, "records": 2, "s": "s"}),
        (lambda: SequentialSampler(2, ShardOptions(2, 3)),
         {"sampler": "SequentialSampler", "index": 2, "count": 3, "records": 2, "s": "s"}),
    ],
    ids=["one-epoch", "shuffled-epochs", "endless-one-record", "emptied-by-drop-remainder",
         "sequential"],
)  # fmt: skip
def test_a_shard_without_records_reads_an_empty_stream_with_a_warning_naming_it(
    build, words, caplog
):
    with caplog.at_level("WARNING", logger="grainlite"):
        sampler = build()
    said = [r.getMessage() for r in caplog.records if r.name == "grainlite.sampling.samplers"]
    assert said == [EMPTY_SHARD_WARNING.format(**words)]
    assert len(sampler) <= words["index"]  # this host's first index is past the end
