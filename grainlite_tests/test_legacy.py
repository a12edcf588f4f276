"""Grain's legacy ``*Operation`` classes: the same elements, states and error types as grain 0.2.18,
in process and with worker processes, and one deprecation message per operation object."""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import threading
import time

import grain.python as real_grain
import numpy as np
import pytest

import grainlite as lite
from grainlite.transforms import legacy
from grainlite_tests.support.contracts import run_with_states
from grainlite_tests.support.grain_peer import TRANSFORMS

LIBRARIES = {"lite": legacy, "grain": real_grain}


def times_two(x):
    return x * 2


def not_multiple_of_three(x):
    return x % 3 != 0


def with_noise(x, rng):
    return x * 1000 + (999 if rng is None else int(rng.integers(0, 999)))


def total(values):
    return int(sum(values))


def fails_at_three(x):
    if x == 3:
        raise KeyError("no three")
    return x


def tuple_or_list(x):
    return [x] if x % 2 else (x,)


class Doubling(legacy.BatchOperation):
    """A BatchOperation subclass: Grain runs it on its legacy path, with a deprecation message."""


PIPELINES = {
    "map-filter-batch-after-a-transform": lambda ops, library: [
        TRANSFORMS["map"][library](),
        ops.MapOperation(times_two),
        ops.FilterOperation(not_multiple_of_three),
        ops.BatchOperation(2),
    ],
    "random-map-then-a-transform": lambda ops, library: [
        ops.RandomMapOperation(with_noise),
        TRANSFORMS["map"][library](),
    ],
    "batch-with-batch-fn-dropping-the-remainder": lambda ops, library: [
        ops.BatchOperation(3, drop_remainder=True, batch_fn=total),
    ],
}


def _loader(
    library: str, pipeline: str, worker_count: int, seed: int | None, num_records: int = 11
):
    g = lite if library == "lite" else real_grain
    return g.DataLoader(
        data_source=g.RangeDataSource(0, num_records, 1),
        sampler=g.IndexSampler(num_records, g.NoSharding(), shuffle=False, num_epochs=1, seed=seed),
        operations=PIPELINES[pipeline](LIBRARIES[library], library),
        worker_count=worker_count,
    )


def _states(states: list[bytes]) -> list[object]:
    return [json.loads(state) for state in states]


@pytest.mark.parametrize("worker_count", [0, 2], ids=["in-process", "two-workers"])
@pytest.mark.parametrize("seed", [None, 7], ids=["unseeded", "seeded"])
@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.timeout(240)
def test_legacy_operations_give_grains_elements_and_states(pipeline, seed, worker_count):
    with iter(_loader("lite", pipeline, worker_count, seed)) as iterator:
        elements, states = run_with_states(iterator)
    grain_elements, grain_states = run_with_states(
        iter(_loader("grain", pipeline, worker_count, seed))
    )
    assert elements == grain_elements
    assert _states(states) == _states(grain_states)


def test_each_legacy_operation_logs_one_deprecation_error_per_object(caplog):
    operations = [
        legacy.MapOperation(times_two),
        legacy.RandomMapOperation(with_noise),
        legacy.FilterOperation(not_multiple_of_three),
        Doubling(2),
        legacy.BatchOperation(2),  # exact: Grain silently makes it a Batch
    ]
    with caplog.at_level(logging.DEBUG, logger="grainlite"):
        for _ in range(2):  # a second loader over the same objects logs nothing new
            lite.DataLoader(
                data_source=[1, 2, 4],
                sampler=lite.IndexSampler(3, lite.NoSharding(), num_epochs=1),
                operations=operations,
            )
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            "grainlite",
            logging.ERROR,
            "MapOperation is deprecated (in Grain too); use grainlite.MapTransform instead.",
        ),
        (
            "grainlite",
            logging.ERROR,
            "RandomMapOperation is deprecated (in Grain too); use grainlite.RandomMapTransform "
            "instead.",
        ),
        (
            "grainlite",
            logging.ERROR,
            "FilterOperation is deprecated (in Grain too); use grainlite.FilterTransform instead.",
        ),
        (
            "grainlite",
            logging.ERROR,
            "Doubling is deprecated (in Grain too); use grainlite.Batch instead.",
        ),
    ]


def _first_error(library: str, operations: list[object], worker_count: int = 0) -> BaseException:
    g = lite if library == "lite" else real_grain
    loader = g.DataLoader(
        data_source=g.RangeDataSource(0, 6, 1),
        sampler=g.IndexSampler(6, g.NoSharding(), num_epochs=1),
        operations=operations,
        worker_count=worker_count,
    )
    with pytest.raises(Exception) as caught:
        list(loader)
    return caught.value


def random_fails_at_three(x, rng):
    return fails_at_three(x)


@pytest.mark.parametrize(
    ("name", "field", "function"),
    [
        ("MapOperation", "map_function", fails_at_three),
        ("FilterOperation", "condition_function", fails_at_three),
        ("RandomMapOperation", "random_map_function", random_fails_at_three),
    ],
    ids=["map", "filter", "random-map"],
)
def test_a_failing_function_raises_value_error_chaining_the_original_as_in_grain(
    name, field, function
):
    grain_error = _first_error("grain", [getattr(real_grain, name)(function)])
    error = _first_error("lite", [getattr(legacy, name)(function)])
    assert type(grain_error) is ValueError and type(grain_error.__cause__) is KeyError
    assert isinstance(error, ValueError) and isinstance(error, lite.GrainliteError)
    assert type(error.__cause__) is KeyError
    assert str(error) == (
        f"{name}'s {field} {function.__name__} raised KeyError: 'no three'. Like Grain, a legacy "
        f"operation reports a failing function as ValueError with the original exception as "
        f"__cause__; fix the function, or catch ValueError around next()."
    )


def test_a_failing_function_takes_its_elements_place_and_the_stream_goes_on_in_workers():
    loader = lite.DataLoader(
        data_source=lite.RangeDataSource(0, 6, 1),
        sampler=lite.IndexSampler(6, lite.NoSharding(), num_epochs=1),
        operations=[legacy.MapOperation(fails_at_three)],
        worker_count=2,
    )
    outcomes = []
    with iter(loader) as iterator:
        while True:
            try:
                outcomes.append(next(iterator))
            except StopIteration:
                break
            except ValueError as error:
                assert "MapOperation's map_function fails_at_three raised KeyError" in str(error)
                outcomes.append("ValueError")
    assert outcomes == [0, 1, 2, "ValueError", 4, 5]


@pytest.mark.parametrize("batch", ["exact", "subclass"])
def test_batch_operation_reports_elements_of_different_structures_as_type_error_as_grain(batch):
    class GrainDoubling(real_grain.BatchOperation):
        pass

    grain_batch = real_grain.BatchOperation(3) if batch == "exact" else GrainDoubling(3)
    lite_batch = legacy.BatchOperation(3) if batch == "exact" else Doubling(3)
    grain_error = _first_error("grain", [real_grain.MapOperation(tuple_or_list), grain_batch])
    error = _first_error("lite", [legacy.MapOperation(tuple_or_list), lite_batch])
    assert type(grain_error) is TypeError
    assert isinstance(error, TypeError) and isinstance(error, lite.GrainliteError)
    assert str(grain_error).startswith("Record structures do not match.")
    assert str(error).startswith(str(grain_error) + " ")
    assert (
        "BatchOperation cannot batch these elements: Expected all input elements to have the "
        "same structure but got: the element at position 0 has structure (int,), while the "
        "element at position 1 has structure [int]."
    ) in str(error)
    assert str(error).endswith("(BatchOperation raises TypeError here, as Grain's does)")


def test_batch_operation_last_in_a_worker_pipeline_batches_like_batch():
    def loader(batch):
        return lite.DataLoader(
            data_source=lite.RangeDataSource(0, 7, 1),
            sampler=lite.IndexSampler(7, lite.NoSharding(), num_epochs=1),
            operations=[batch],
            worker_count=2,
        )

    with iter(loader(legacy.BatchOperation(2))) as legacy_iterator:
        legacy_run = run_with_states(legacy_iterator)
    with iter(loader(lite.Batch(2))) as batch_iterator:
        batch_run = run_with_states(batch_iterator)
    assert legacy_run == batch_run
    assert legacy_run[0][0] == ("array", np.dtype(np.int64).str, (2,), [0, 2])


def test_batch_operation_rejects_a_non_positive_batch_size_with_value_error_as_grain():
    with pytest.raises(ValueError):
        real_grain.BatchOperation(0)
    with pytest.raises(lite.GrainliteValueError) as caught:
        legacy.BatchOperation(0)
    assert str(caught.value) == (
        "batch_size must be positive. Got batch_size=0; pass Batch(batch_size=N) with N >= 1."
    )


def test_a_legacy_operation_with_a_function_that_is_not_callable_is_refused():
    with pytest.raises(lite.GrainliteTypeError) as caught:
        legacy.MapOperation(3)
    assert str(caught.value) == (
        "MapOperation map_function must be callable, got 3 of type int; pass a function, e.g. "
        "MapOperation(lambda x: x)."
    )


def _repeat(self, records):
    for record in records:
        yield record
        yield dataclasses.replace(record, data=record.data + 100)


def _sum_pairs(self, records):
    held = []
    for record in records:
        held.append(record)
        if len(held) == 2:
            yield dataclasses.replace(held[0], data=held[0].data + held[1].data)
            held = []
    if held:
        yield dataclasses.replace(held[0], data=-1)


def _fail_at_three(self, records):
    for record in records:
        if record.data == 3:
            raise KeyError("no three")
        yield record


CUSTOM_OPERATIONS = {
    name: {
        "lite": type(name, (legacy.Operation,), {"__call__": body}),
        "grain": type(name, (real_grain.Operation,), {"__call__": body}),
    }
    for name, body in [
        ("Repeat", _repeat),
        ("SumPairs", _sum_pairs),
        ("FailAtThree", _fail_at_three),
    ]
}
globals().update({name: twins["lite"] for name, twins in CUSTOM_OPERATIONS.items()})


def _custom_loader(library: str, name: str, worker_count: int):
    g = lite if library == "lite" else real_grain
    return g.DataLoader(
        data_source=g.RangeDataSource(0, 9, 1),
        sampler=g.IndexSampler(9, g.NoSharding(), shuffle=False, num_epochs=1, seed=3),
        operations=[TRANSFORMS["map"][library](), CUSTOM_OPERATIONS[name][library]()],
        worker_count=worker_count,
    )


@pytest.mark.parametrize("worker_count", [0, 2], ids=["in-process", "two-workers"])
@pytest.mark.parametrize("name", ["Repeat", "SumPairs"])
@pytest.mark.timeout(240)
def test_a_custom_operation_gives_grains_elements_and_states(name, worker_count):
    with iter(_custom_loader("lite", name, worker_count)) as iterator:
        elements, states = run_with_states(iterator)
    grain_elements, grain_states = run_with_states(
        iter(_custom_loader("grain", name, worker_count))
    )
    assert elements == grain_elements
    assert _states(states) == _states(grain_states)


def test_a_custom_operation_that_raises_keeps_the_error_type_and_restarts_for_the_next_record():
    assert type(_first_error("grain", [CUSTOM_OPERATIONS["FailAtThree"]["grain"]()])) is KeyError
    loader = lite.DataLoader(
        data_source=lite.RangeDataSource(0, 6, 1),
        sampler=lite.IndexSampler(6, lite.NoSharding(), num_epochs=1),
        operations=[CUSTOM_OPERATIONS["FailAtThree"]["lite"]()],
    )
    outcomes = []
    with iter(loader) as iterator:
        while True:
            try:
                outcomes.append(next(iterator))
            except StopIteration:
                break
            except KeyError as error:
                assert error.args == ("no three",)
                outcomes.append("KeyError")
    assert outcomes == [0, 1, 2, "KeyError", 4, 5]


class YieldsData(legacy.Operation):
    def __call__(self, records):
        for record in records:
            yield record.data


def test_a_custom_operation_that_yields_something_other_than_records_is_a_clear_type_error():
    loader = lite.DataLoader(
        data_source=[5],
        sampler=lite.IndexSampler(1, lite.NoSharding(), num_epochs=1),
        operations=[YieldsData()],
    )
    with iter(loader) as iterator, pytest.raises(lite.GrainliteTypeError) as caught:
        next(iterator)
    assert str(caught.value) == (
        "A custom Operation must yield Records, but YieldsData yielded 5 of type int; yield "
        "grainlite.Record(metadata, data), e.g. dataclasses.replace(record, data=new_data)."
    )


def _operation_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("grainlite-operation-")]


def test_an_iterator_abandoned_mid_stream_ends_its_custom_operations_thread():
    before = set(_operation_threads())
    loader = lite.DataLoader(
        data_source=lite.RangeDataSource(0, 50, 1),
        sampler=lite.IndexSampler(50, lite.NoSharding(), num_epochs=1),
        operations=[CUSTOM_OPERATIONS["Repeat"]["lite"]()],
    )
    iterator = iter(loader)
    assert next(iterator) == 0
    (started,) = set(_operation_threads()) - before  # measured while it is held
    iterator.close()
    del iterator
    deadline = time.monotonic() + 10
    while started.is_alive() and time.monotonic() < deadline:
        gc.collect()
        started.join(timeout=0.1)
    assert not started.is_alive()


@pytest.mark.parametrize("worker_count", [0, 2], ids=["in-process", "two-workers"])
@pytest.mark.timeout(240)
def test_grains_own_legacy_operation_objects_run_as_in_grain(worker_count):
    def loader(library):
        g = lite if library == "lite" else real_grain
        return g.DataLoader(
            data_source=g.RangeDataSource(0, 9, 1),
            sampler=g.IndexSampler(9, g.NoSharding(), num_epochs=1, seed=5),
            operations=[
                real_grain.RandomMapOperation(with_noise),
                real_grain.FilterOperation(not_multiple_of_three),
                real_grain.BatchOperation(2),
            ],
            worker_count=worker_count,
        )

    with iter(loader("lite")) as iterator:
        elements, states = run_with_states(iterator)
    grain_elements, grain_states = run_with_states(iter(loader("grain")))
    assert elements == grain_elements
    assert _states(states) == _states(grain_states)


def test_operation_is_a_protocol_that_isinstance_refuses_as_in_grain():
    for operation in (real_grain.Operation, legacy.Operation):
        with pytest.raises(TypeError):
            isinstance(legacy.MapOperation(times_two), operation)


def test_legacy_operations_applied_to_records_directly_drop_the_record_key():
    records = [lite.Record(lite.RecordMetadata(index=i, record_key=i + 10), i) for i in range(5)]
    mapped = list(legacy.MapOperation(times_two)(iter(records)))
    kept = list(legacy.FilterOperation(not_multiple_of_three)(iter(mapped)))
    batched = list(legacy.BatchOperation(3)(iter(kept)))
    assert [(r.metadata.index, r.metadata.record_key, r.data) for r in mapped] == [
        (0, None, 0),
        (1, None, 2),
        (2, None, 4),
        (3, None, 6),
        (4, None, 8),
    ]
    assert [r.data for r in kept] == [2, 4, 8]
    assert [(r.metadata.index, r.data.tolist()) for r in batched] == [(4, [2, 4, 8])]


def test_batch_operation_quotes_records_of_other_structures_within_bounds():
    records = [{"a": "x" * 5000}, *({"b": k} for k in range(30))]
    with pytest.raises(TypeError) as raised:
        wrapped = [
            lite.Record(lite.RecordMetadata(index=i, record_key=i), r)
            for i, r in enumerate(records)
        ]
        list(legacy.BatchOperation(len(records))(iter(wrapped)))
    message = str(raised.value)
    assert message.startswith("Record structures do not match. Record at position 0 has ")
    assert "while records at positions [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] (and 20 more)" in message
    assert len(message) < 2000
