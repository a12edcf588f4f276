"""A failed element takes its place and the stream goes on, at every worker count and checkpoint."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite.errors import GrainliteRuntimeError, WorkerDiedError
from grainlite_tests.support.contracts import to_plain

pytestmark = pytest.mark.timeout(180)

FAILING = (5, 6, 11, 17)  # records whose transform raises; 5 and 6 fall in one batch of 3


class FailOn(grain.MapTransform):
    def map(self, x):
        if int(x) in FAILING:
            raise ValueError(f"record {int(x)} is bad")
        return x


class DropFailing(grain.FilterTransform):
    """What the stream of elements must look like: the failing records left out, nothing else."""

    def filter(self, x):
        return int(x) not in FAILING


class MarkFailing(grain.MapTransform):
    """Without a Batch, the stream must be this one with each marked record raising instead."""

    def map(self, x):
        return ("error", f"record {int(x)} is bad") if int(x) in FAILING else x


class KeepOdd(grain.FilterTransform):
    def filter(self, x):
        return int(x) % 7 != 3


class Twice(grain.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, x):
        return [x, x]


def _loader(workers: int, batch: int | None, first: Any, flat: str = ""):
    """KeepOdd, ``first``, an optional Batch; ``flat`` puts Twice "before" or "after" ``first``."""
    middle = {"": [first], "before": [Twice(), first], "after": [first, Twice()]}[flat]
    operations = [KeepOdd(), *middle] + ([grain.Batch(batch)] if batch else [])
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, 24, 1),
        sampler=grain.IndexSampler(24, grain.NoSharding(), shuffle=True, num_epochs=1, seed=3),
        operations=operations,
        worker_count=workers,
    )


def _drain(iterator, limit: int = 1000) -> tuple[list, list[bytes]]:
    """Everything the iterator gives, errors as ("error", message), and the state after each."""
    out, states = [], []
    for _ in range(limit):
        try:
            out.append(to_plain(next(iterator)))
        except StopIteration:
            return out, states
        except ValueError as error:
            out.append(("error", str(error)))
        states.append(iterator.get_state())
    raise AssertionError("the stream did not end")


CASES = [(w, b) for w in (0, 1, 2, 3) for b in (None, 3)]
FLAT_CASES = [(w, where) for w in (0, 2) for where in ("before", "after")]


@pytest.mark.parametrize(("workers", "batch"), CASES, ids=lambda v: str(v))
def test_an_error_takes_its_elements_place_and_the_stream_goes_on(workers, batch):
    with iter(_loader(workers, batch, FailOn())) as iterator:
        out, _ = _drain(iterator)
    errors = [e for e in out if isinstance(e, tuple) and e and e[0] == "error"]
    assert sorted(errors) == sorted(("error", f"record {r} is bad") for r in FAILING if r % 7 != 3)
    if batch is None:  # each error exactly where its element would have been
        with iter(_loader(workers, batch, MarkFailing())) as iterator:
            expected, _ = _drain(iterator)
        assert out == [("error", e[1][1]) if isinstance(e, tuple) else e for e in expected]
    else:  # the batches are those of a stream without the failing records: nothing else lost
        with iter(_loader(workers, batch, DropFailing())) as iterator:
            expected, _ = _drain(iterator)
        batches = [e for e in out if e not in errors]
        if workers <= 1:
            assert batches == expected
        else:  # the error took a turn in the round-robin, so compare the batches as a multiset
            assert sorted(map(repr, batches)) == sorted(map(repr, expected))


@pytest.mark.parametrize(("workers", "batch"), CASES, ids=lambda v: str(v))
def test_a_state_saved_right_after_an_error_resumes_after_it(workers, batch):
    with iter(_loader(workers, batch, FailOn())) as iterator:
        out, states = _drain(iterator)
    error_positions = [k for k, e in enumerate(out) if isinstance(e, tuple) and e[0] == "error"]
    assert error_positions
    for k in error_positions:
        with iter(_loader(workers, batch, FailOn())) as restored:
            restored.set_state(states[k])
            assert restored.get_state() == states[k]
            rest, _ = _drain(restored)
        assert rest == out[k + 1 :], f"restored after the error at {k}"


@pytest.mark.parametrize(("workers", "flat"), FLAT_CASES, ids=lambda v: str(v))
def test_below_a_flat_map_a_state_saved_right_after_an_error_resumes_after_it(workers, flat):
    with iter(_loader(workers, 3, FailOn(), flat)) as iterator:
        out, states = _drain(iterator)
    errors = [k for k, e in enumerate(out) if isinstance(e, tuple) and e[0] == "error"]
    assert len(errors) >= 3
    for k in errors:
        with iter(_loader(workers, 3, FailOn(), flat)) as restored:
            restored.set_state(states[k])
            assert restored.get_state() == states[k]
            rest, _ = _drain(restored)
        assert rest == out[k + 1 :], f"restored after the error at {k}"


def test_a_skip_list_is_written_only_while_a_batch_holds_elements_from_before_the_error():
    with iter(_loader(0, 3, FailOn())) as iterator:
        out, states = _drain(iterator)
    marked = [b'"grainlite_skipped_indices"' in state for state in states]
    first_error = next(k for k, e in enumerate(out) if isinstance(e, tuple))
    assert any(marked) and not marked[-1]
    assert marked[first_error]  # 5 failed while a batch held earlier records


def test_after_an_error_the_in_process_state_matches_grain_when_no_batch_is_held():
    real_grain = pytest.importorskip("grain.python")
    import grainlite_tests.support.grain_peer  # noqa: F401  (marks grain's absl flags as parsed)

    class GrainFailOn(real_grain.MapTransform):
        def map(self, x):
            return FailOn().map(x)

    def build(library, transform):
        return library.DataLoader(
            data_source=list(range(24)),
            sampler=library.IndexSampler(
                24, library.NoSharding(), shuffle=True, num_epochs=1, seed=3
            ),
            operations=[transform],
            worker_count=0,
        )

    with iter(build(grain, FailOn())) as ours:
        ours_out, ours_states = _drain(ours)
    theirs_out, theirs_states = _drain(iter(build(real_grain, GrainFailOn())))
    assert ours_out == theirs_out
    assert ours_states == theirs_states


class ExitOn(grain.MapTransform):
    def map(self, x):
        if int(x) == 4:
            os._exit(3)
        return x


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_the_stream_cannot_go_on_after_is_raised_again_not_an_early_end(workers):
    class BadSource:
        def __len__(self):
            return 10

        def __getitem__(self, key):
            if key == 6:
                raise OSError("disk gone")
            return np.int64(key)

    source = BadSource()
    operations = [ExitOn()] if workers else []
    loader = grain.DataLoader(
        data_source=source if not workers else grain.RangeDataSource(0, 10, 1),
        sampler=grain.IndexSampler(10, grain.NoSharding(), num_epochs=1),
        operations=operations,
        worker_count=workers,
    )
    expected = WorkerDiedError if workers else OSError
    with iter(loader) as iterator:
        with pytest.raises(expected):
            list(iterator)
        with pytest.raises(GrainliteRuntimeError, match="stopped at an earlier error"):
            next(iterator)
        iterator.set_state(iterator.get_state())  # the documented way on: from the last element
        if not workers:
            with pytest.raises(OSError, match="disk gone"):
                next(iterator)
