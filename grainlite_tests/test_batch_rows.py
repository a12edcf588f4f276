"""Batches of large elements filled row by row give exactly what stacking at the end gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import grainlite as grain
from grainlite.transforms.batch import make_batch
from grainlite.transforms.batch_rows import MIN_ELEMENT_BYTES, BatchRows, batch_as_they_come

BIG = MIN_ELEMENT_BYTES // 4  # float32 values in a leaf that makes an element large enough


def assert_identical(got, want):
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_identical(got[key], want[key])
        return
    if not isinstance(want, np.ndarray | np.generic):  # a Python scalar
        assert got == want
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def element(i: int, extra: dict | None = None) -> dict:
    rng = np.random.default_rng(i)
    leaves = {
        "z_image": rng.random(BIG, dtype=np.float32),
        "label": np.int64(i),
        "flag": bool(i % 2),
        "weight": float(i) / 3,
        "count": i,
    }
    leaves.update(extra or {})
    return leaves


# What an element may turn into midway, and whether it still fits the rows.
CHANGES = {
    "same": ({}, True),
    "dtype": ({"label": np.int32(1)}, False),
    "shape": ({"z_image": np.zeros(BIG + 1, np.float32)}, False),
    "array dtype": ({"z_image": np.zeros(BIG, np.float64)}, False),
    "huge int": ({"count": 2**70}, False),
    "int to float": ({"count": 1.5}, False),
}


@settings(max_examples=30, deadline=None)
@given(
    size=st.integers(2, 6),
    count=st.integers(1, 6),
    change=st.sampled_from(sorted(CHANGES)),
    at=st.integers(1, 5),
)
def test_rows_equal_make_batch_or_hand_the_elements_back_unchanged(size, count, change, at):
    count = min(count, size)
    elements = [element(i, CHANGES[change][0] if i == at else None) for i in range(count)]
    rows = BatchRows.start(elements[0], size, None)
    assert rows is not None
    for position, value in enumerate(elements[1:], 1):
        fits = rows.add(value)
        assert fits == (CHANGES[change][1] or position != at)
        if not fits:
            handed_back = rows.elements(copy=True) + elements[position:]
            for got, want in zip(handed_back, elements, strict=True):
                assert_identical(got, want)
            return
    assert_identical(rows.batch(), make_batch(elements))


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 6),
    count=st.integers(1, 6),
    change=st.sampled_from(sorted(CHANGES)),
    at=st.integers(0, 5),
)
@example(size=4, count=4, change="huge int", at=0)
@example(size=4, count=4, change="shape", at=0)
def test_a_batch_filled_as_its_elements_come_equals_stacking_them_all(size, count, change, at):
    count = min(count, size)
    elements = [element(i, CHANGES[change][0] if i == at else None) for i in range(count)]
    try:
        want = make_batch(elements)
    except Exception as error:
        with pytest.raises(type(error)) as raised:
            batch_as_they_come(iter(elements), size, np.empty, make_batch)
        assert str(raised.value) == str(error)
        return
    assert_identical(batch_as_they_come(iter(elements), size, np.empty, make_batch), want)


def test_a_first_element_the_rows_cannot_write_is_stacked_and_not_lost():
    # A Python int beyond int64 in the first element: the rows cannot hold it, so the batch is
    # stacked the usual way (it was dropped from the batch before).
    elements = [element(i, {"count": 2**70} if i == 0 else None) for i in range(4)]
    assert BatchRows.start(elements[0], 4, None) is None
    loader = grain.DataLoader(
        data_source=elements,
        sampler=grain.SequentialSampler(4, grain.NoSharding()),
        operations=[grain.Batch(4)],
        worker_count=0,
    )
    (batch,) = list(loader)
    assert_identical(batch, make_batch(elements))


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_rows_promise_to_take_all_elements_only_when_writing_each_of_them_will_succeed(change):
    extra, fits = CHANGES[change]
    elements = [element(i, extra if i == 2 else None) for i in range(4)]
    without_int = [{k: v for k, v in e.items() if k != "count"} for e in elements]
    for values in (elements, without_int):
        rows = BatchRows.layout(values[0])
        assert rows is not None and rows.buffers == []  # nothing allocated yet
        promised = rows.takes_all(values[1:])
        # A Python int may overflow int64, which only writing it tells: no promise then.
        changes_count_only = "count" in extra
        assert promised == (values is without_int and (fits or changes_count_only))
        if promised:
            rows.allocate(len(values), None)
            assert all(rows.add(value) for value in values)
            assert_identical(rows.batch(), make_batch(values))


@pytest.mark.parametrize(
    "first",
    [
        {"image": np.zeros(8, np.float32)},  # too small to be worth it
        {"image": np.zeros(BIG, object)},
        {"name": "text", "image": np.zeros(BIG, np.float32)},
        np.ma.masked_array(np.zeros(BIG, np.float32)),
        [np.zeros(BIG, np.float32)],
    ],
    ids=["small", "objects", "string leaf", "masked array", "list"],
)
def test_other_elements_are_left_to_make_batch(first):
    assert BatchRows.start(first, 4, None) is None


class Large(grain.MapTransform):
    """A large element per record; records 5 and 6 of every 8 fail or change dtype."""

    def map(self, record: int) -> dict:
        if record % 8 == 5:
            raise ValueError(f"record {record} is bad")
        if record % 8 == 6:
            return element(record, {"label": np.int32(record)})
        return element(record)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_gives_the_same_batches_and_errors_as_stacking_at_the_end(workers):
    def run(batch):
        loader = grain.DataLoader(
            data_source=grain.RangeDataSource(0, 40, 1),
            sampler=grain.IndexSampler(40, grain.NoSharding(), shuffle=True, seed=3, num_epochs=1),
            operations=[Large(), batch],
            worker_count=workers,
        )
        out = []
        with iter(loader) as iterator:
            while True:
                try:
                    out.append(next(iterator))
                except StopIteration:
                    return out
                except ValueError as error:
                    out.append(str(error).splitlines()[0])

    rows = run(grain.Batch(4))
    stacked = run(grain.Batch(4, batch_fn=make_batch))
    assert len(rows) == len(stacked) and any(isinstance(x, str) for x in rows)
    for got, want in zip(rows, stacked, strict=True):
        if isinstance(want, str):
            assert got == want
        else:
            assert_identical(got, want)
