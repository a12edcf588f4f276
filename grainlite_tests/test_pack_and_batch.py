"""``PackAndBatchOperation`` against the installed grain: batches and metadata when called on
records and inside a DataLoader (elements, checkpoints and restores), worker processes,
and where grainlite fixes Grain (no state on the object, empty input)."""

from __future__ import annotations

import absl.flags
import grain
import numpy as np
import pytest

import grainlite
from grainlite.transforms.pack_and_batch import PackAndBatchOperation
from grainlite_tests.support.contracts import to_plain
from grainlite_tests.support.packing_data import sequence

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18's DataLoader reads absl flags


def _records(lib, items):
    return [
        lib.Record(lib.RecordMetadata(index=i, record_key=i, rng=None), item)
        for i, item in enumerate(items)
    ]


def _random_case(seed: int) -> tuple[list[dict], dict]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 9, size=rng.integers(1, 30)).tolist()
    options: dict = {
        "length_struct": {"targets": 8, "inputs": 8},
        "batch_size": int(rng.integers(1, 4)),
    }
    if rng.integers(0, 2):
        options["max_sequences_per_bin"] = int(rng.integers(1, 3))
    return [sequence(i, n, np.int32) for i, n in enumerate(lengths)], options


def _packed(lib, items, options):
    operation = lib.experimental.PackAndBatchOperation(**options)
    return [(str(r.metadata), to_plain(r.data)) for r in operation(iter(_records(lib, items)))]


@pytest.mark.parametrize("seed", range(10))
def test_batches_and_metadata_match_grain_when_called_on_records(seed):
    items, options = _random_case(seed)
    assert _packed(grainlite, items, options) == _packed(grain, items, options)


def test_the_data_is_a_tuple_of_data_segmentations_and_positions_for_any_tree():
    items = [(np.arange(n) + 1000 * i, {"mask": np.ones(n, bool)}) for i, n in enumerate([3, 6, 2])]
    options = {"length_struct": (8, {"mask": 8}), "batch_size": 2}
    ours = _packed(grainlite, items, options)
    assert ours == _packed(grain, items, options)
    record = next(PackAndBatchOperation(**options)(iter(_records(grainlite, items))))
    data, segmentations, positions = record.data
    assert data[0].tolist() == [[0, 1, 2, 2000, 2001, 0, 0, 0], [*range(1000, 1006), 0, 0]]
    assert segmentations[1]["mask"].tolist() == [[1, 1, 1, 2, 2, 0, 0, 0], [1] * 6 + [0, 0]]
    assert segmentations[1]["mask"].dtype == positions[0].dtype == np.int32
    assert positions[0].tolist() == [[0, 1, 2, 0, 1, 0, 0, 0], [*range(6), 0, 0]]


def _loader(lib, items, options, workers=0):
    sampler = lib.samplers.IndexSampler(
        len(items),
        shard_options=lib.sharding.NoSharding(),
        shuffle=True,
        num_epochs=1,
        seed=3,
    )
    operation = lib.experimental.PackAndBatchOperation(**options)
    return lib.DataLoader(
        data_source=items, sampler=sampler, operations=[operation], worker_count=workers
    )


def _run(loader):
    iterator = iter(loader)
    elements, states = [], [iterator.get_state()]
    for element in iterator:
        elements.append(to_plain(element))
        states.append(iterator.get_state())
    return elements, states


@pytest.mark.parametrize("seed", [0, 4])
def test_a_data_loader_gives_grains_batches_and_checkpoints(seed):
    items, options = _random_case(seed)
    assert _run(_loader(grainlite, items, options)) == _run(_loader(grain, items, options))


@pytest.mark.parametrize("step", [1, 2])
def test_a_data_loader_restored_from_a_checkpoint_continues_like_grains(step):
    # The loader's checkpoint counts the records the operation has read, so the record carried
    # over to the next batch is not read again after a restore, in Grain and here: for exact
    # resumption, pack with FirstFitPackIterDataset in a Dataset pipeline.
    items, options = _random_case(6)
    rests = []
    for lib in (grainlite, grain):
        iterator = iter(_loader(lib, items, options))
        for _ in range(step):
            next(iterator)
        restored = iter(_loader(lib, items, options))
        restored.set_state(iterator.get_state())
        rests.append([to_plain(element) for element in restored])
    assert rests[0] == rests[1]


def test_with_two_workers_every_token_arrives_once():
    items, options = _random_case(8)
    tokens = []
    for data, segmentations, _ in _loader(grainlite, items, options, workers=2):
        tokens.extend(data["inputs"][segmentations["inputs"] > 0].tolist())
    assert sorted(tokens) == sorted(np.concatenate([i["inputs"] for i in items]).tolist())


def test_calling_it_logs_grains_deprecation_message(caplog):
    items, options = _random_case(1)
    list(PackAndBatchOperation(**options)(iter(_records(grainlite, items))))
    assert "PackAndBatchOperation is deprecated (in Grain too); use " in caplog.text


def test_the_operation_keeps_no_state_so_it_can_run_twice():
    items, options = _random_case(2)
    operation = PackAndBatchOperation(**options)
    first = [to_plain(r.data) for r in operation(iter(_records(grainlite, items)))]
    again = [to_plain(r.data) for r in operation(iter(_records(grainlite, items)))]
    assert first == again


def test_an_empty_input_gives_no_batch_where_grain_raises():
    options = {"length_struct": {"inputs": 4}, "batch_size": 2}
    assert list(PackAndBatchOperation(**options)(iter([]))) == []
    with pytest.raises(AttributeError):
        list(grain.experimental.PackAndBatchOperation(**options)(iter([])))


def test_a_leaf_longer_than_its_length_is_a_value_error_naming_it():
    items = [{"inputs": np.arange(3)}, {"inputs": np.arange(6)}]
    operation = PackAndBatchOperation(length_struct={"inputs": 4}, batch_size=2)
    with pytest.raises(ValueError) as error:
        list(operation(iter(_records(grainlite, items))))
    assert str(error.value) == (
        "Inputs to PackAndBatchOperation must be truncated to max length: ['inputs'] has 6 (max "
        "4) (record 1). Truncate each leaf to its length_struct entry in an earlier operation."
    )


def test_a_batch_size_below_one_is_a_value_error():
    with pytest.raises(ValueError, match=r"batch_size must be a positive int \(got 0\)"):
        PackAndBatchOperation(length_struct={"inputs": 4}, batch_size=0)
