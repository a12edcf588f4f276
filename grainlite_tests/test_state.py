"""The checkpoint JSON: Grain's exact bytes, and a clear error for every bad state."""

from __future__ import annotations

import json

import pytest

import grainlite as grain
from grainlite.errors import CheckpointMismatchError, GrainliteValueError


def _loader(workers=0, sampler=None, source=None):
    return grain.DataLoader(
        data_source=source if source is not None else grain.RangeDataSource(0, 8, 1),
        sampler=sampler or grain.SequentialSampler(8, grain.NoSharding()),
        worker_count=workers,
    )


def test_str_of_a_fresh_iterator_is_grains_exact_text_for_three_workers():
    iterator = iter(_loader(workers=3))
    assert str(iterator) == (
        "PyGrainDatasetIterator(state={\n"
        '    "version": 2,\n'
        '    "last_seen_indices": {\n'
        '        "0": -3,\n'
        '        "1": -2,\n'
        '        "2": -1\n'
        "    },\n"
        '    "last_worker_index": -1,\n'
        '    "worker_count": 3,\n'
        '    "sampler": "SequentialSampler(num_records=8, shard_options=NoSharding(shard_index=0, '
        'shard_count=1, drop_remainder=False))",\n'
        '    "data_source": "RangeDataSource(start=0, stop=8, step=1)"\n'
        "})"
    )
    iterator.close()


def test_plain_list_sources_appear_by_type_in_the_state():
    state = json.loads(iter(_loader(source=list(range(8)))).get_state())
    assert state["data_source"] == "<class 'list'>"


def _state(**changes) -> bytes:
    document = json.loads(iter(_loader()).get_state())
    document.update(changes)
    return json.dumps(document, indent=4).encode()


@pytest.mark.parametrize(
    "state, message",
    [
        (
            b"\xff\xfe",
            "Invalid iterator state: it is not UTF-8 text ('utf-8' codec can't decode byte 0xff "
            "in position 0: invalid start byte)",
        ),
        (
            b"{not json",
            "Invalid iterator state: it is not valid JSON (Expecting property name "
            "enclosed in double quotes: line 1 column 2 (char 1))",
        ),
        (b"[1, 2]", "Invalid iterator state: expected a JSON object, got list"),
        (
            b"{}",
            "Invalid iterator state: the fields ['version', 'last_seen_indices', "
            "'last_worker_index', 'worker_count', 'sampler', 'data_source'] are missing",
        ),
        (_state(version=1), "Invalid iterator state: version 1 is not supported, only version 2"),
        (
            _state(last_seen_indices={"0": "x"}),
            "Invalid iterator state: last_seen_indices[0] must be an integer, got 'x'",
        ),
        (
            _state(last_seen_indices={"1": 0}),
            "Invalid iterator state: last_seen_indices must have the keys ['0'], got {'1': 0}",
        ),
        (
            _state(last_seen_indices={"0": -5}),
            "Invalid iterator state: last_seen_indices['0']=-5 is not an index worker 0 reads "
            "(those are 0 + 1*k on this shard)",
        ),
        (
            _state(last_worker_index=3),
            "Invalid iterator state: last_worker_index must be in [-1, 0], got 3",
        ),
        (
            b'{"parent": {"next_index": 0}, "next_index_in_buffer": 0}',
            "Invalid iterator state: it was saved by a pipeline with a FlatMapTransform, this "
            "loader has none; restore it into a loader with the same operations",
        ),
    ],
    ids=[
        "not-utf8",
        "malformed-json",
        "not-an-object",
        "missing-fields",
        "wrong-version",
        "non-integer-index",
        "wrong-worker-keys",
        "index-off-the-stride",
        "bad-last-worker",
        "flat-map-state",
    ],
)
def test_a_bad_state_is_rejected_with_what_is_wrong_and_the_fix(state, message):
    iterator = iter(_loader())
    with pytest.raises(GrainliteValueError) as caught:
        iterator.set_state(state)
    assert str(caught.value) == (
        message + ". Pass the bytes returned by get_state() of a loader with the same settings."
    )


def test_a_state_of_another_worker_count_is_restored_with_the_rest_of_the_stream():
    # Grain refuses this; grainlite restores elastically (test_elastic_restore.py has the rule).
    saved = iter(_loader(workers=0))
    assert [next(saved) for _ in range(3)] == [0, 1, 2]
    iterator = iter(_loader(workers=2))
    iterator.set_state(saved.get_state())
    assert list(iterator) == [3, 4, 5, 6, 7]
    iterator.close()


def test_a_state_of_another_sampler_names_both_samplers_and_the_fix():
    state = iter(_loader()).get_state()
    other = grain.IndexSampler(8, grain.NoSharding(), shuffle=True, num_epochs=1, seed=1)
    with pytest.raises(CheckpointMismatchError) as caught:
        iter(_loader(sampler=other)).set_state(state)
    assert str(caught.value) == (
        "Sampler in checkpoint does not match dataloader sampler.\n"
        "sampler in checkpoint: SequentialSampler(num_records=8, shard_options=NoSharding("
        "shard_index=0, shard_count=1, drop_remainder=False))\n"
        f"sampler in dataloader: {other!r}\n"
        "The sampler is compared by `repr(sampler)`: build the loader with the same sampler "
        "arguments, or give a custom sampler a stable `__repr__`."
    )


def test_a_state_of_another_source_names_both_sources_and_the_fix():
    state = iter(_loader()).get_state()
    with pytest.raises(CheckpointMismatchError) as caught:
        iter(_loader(source=grain.RangeDataSource(0, 9, 1))).set_state(state)
    assert str(caught.value) == (
        "DataSource in checkpoint does not match datasource in dataloader.\n"
        "data source in checkpoint: RangeDataSource(start=0, stop=8, step=1)\n"
        "data source in dataloader: RangeDataSource(start=0, stop=9, step=1)\n"
        "The source is compared by `repr(data_source)`: use the same data, or give a custom "
        "source a stable `__repr__` (no memory addresses or random names)."
    )


def test_restoring_never_unpickles_anything_from_the_state():
    # A pickle payload that would run code if it were ever unpickled.
    payload = b"cos\nsystem\n(S'echo pwned'\ntR."
    iterator = iter(_loader())
    with pytest.raises(GrainliteValueError):
        iterator.set_state(payload)


class _PairFlatMap(grain.transforms.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return [element * 10, element * 10 + 1]


@pytest.mark.parametrize("workers", [0, 2], ids=["W=0", "W=2"])
def test_a_flat_map_state_beyond_max_fan_out_is_refused_not_a_skipped_record(workers):
    loader = grain.DataLoader(
        data_source=list(range(5)),
        sampler=grain.samplers.SequentialSampler(5, grain.sharding.NoSharding()),
        operations=[_PairFlatMap()],
        worker_count=workers,
    )
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    document = json.loads(iterator.get_state())
    entry = document if workers == 0 else document["iterators_in_use_states"][0]
    entry["next_index_in_buffer"] = 5
    fresh = iter(loader)
    with pytest.raises(ValueError, match="next_index_in_buffer 5 is beyond the max_fan_out 2"):
        fresh.set_state(json.dumps(document).encode())
