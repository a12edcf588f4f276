"""The resume contract on representative Dataset-API pipelines: a checkpoint taken before any
element and restored into a fresh iterator gives exactly the rest of the uninterrupted run, and
the state is plain JSON; plus the Orbax round trip of a dataset iterator, both ways with Grain."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, to_plain
from grainlite_tests.support.dataset_pipelines import (
    add_noise,
    not_multiple_of_three,
    times_ten_plus_one,
)


def _records(count: int) -> list[dict[str, Any]]:
    return [{"id": np.int64(i), "x": np.arange(i, i + 3, dtype=np.int32)} for i in range(count)]


PIPELINES: dict[str, Callable[[], Any]] = {
    "source-shuffle-map-batch-to_iter": lambda: (
        grain.MapDataset.source(_records(11)).shuffle(seed=4).map(times_ten_plus_one).batch(3)
    ).to_iter_dataset(),
    "filter-to_iter-batch-random_map": lambda: (
        grain.MapDataset.range(17)
        .filter(not_multiple_of_three)
        .to_iter_dataset()
        .batch(2, drop_remainder=True)
        .random_map(add_noise, seed=9)
    ),
    "seeded-mix-repeat-with-reader-threads": lambda: (
        grain.MapDataset.mix([grain.MapDataset.range(5), grain.MapDataset.range(100, 104)], [2, 1])
        .seed(3)
        .shuffle()
        .repeat(2)
        .to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
    ),
    "iter-mix-of-filtered-streams": lambda: grain.IterDataset.mix(
        [
            grain.MapDataset.range(9).to_iter_dataset().filter(not_multiple_of_three),
            grain.MapDataset.range(50, 60).to_iter_dataset().map(times_ten_plus_one),
        ],
        [1, 2],
    ),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_dataset_iterators_resume_at_every_step(name):
    assert_dataset_resumes_at_every_step(lambda: iter(PIPELINES[name]()))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_mp_prefetch_iterators_resume_at_every_step(workers):
    def make_iterator() -> Any:
        ds = grain.MapDataset.range(13).shuffle(seed=5).map(times_ten_plus_one).to_iter_dataset()
        options = grain.MultiprocessingOptions(num_workers=workers)
        return iter(ds.filter(not_multiple_of_three).mp_prefetch(options).batch(2))

    # Each fresh restore starts workers: a few positions (start, middle, end) stand for all.
    assert_dataset_resumes_at_every_step(make_iterator, steps=[0, 2, 5])


class _CountsFromState(grain.DatasetIterator):
    """A user's iterator whose state may be made wrong on purpose (to prove the contract bites)."""

    def __init__(self, stop: int, lie: bool = False, numpy_state: bool = False) -> None:
        super().__init__()
        self._next, self._stop, self._lie, self._numpy = 0, stop, lie, numpy_state

    def __next__(self) -> int:
        if self._next >= self._stop:
            raise StopIteration
        self._next += 1
        return self._next - 1

    def get_state(self) -> dict[str, Any]:
        position = self._next + (1 if self._lie and self._next == 3 else 0)
        return {"next": np.int64(position) if self._numpy else position}

    def set_state(self, state: dict[str, Any]) -> None:
        self._next = int(state["next"])


def test_the_resume_contract_holds_for_a_users_iterator():
    assert_dataset_resumes_at_every_step(lambda: _CountsFromState(6))


def test_the_resume_contract_fails_an_iterator_whose_state_is_off_by_one():
    with pytest.raises(AssertionError, match="restored after 3 elements differs"):
        assert_dataset_resumes_at_every_step(lambda: _CountsFromState(6, lie=True))


def test_the_resume_contract_fails_a_state_that_is_not_plain_json():
    with pytest.raises(TypeError, match="int64"):
        assert_dataset_resumes_at_every_step(lambda: _CountsFromState(6, numpy_state=True))


# Orbax ------------------------------------------------------------------------------------------


def _orbax_pipeline(lib: Any) -> Any:
    ds = lib.MapDataset.range(20).shuffle(seed=8).map(times_ten_plus_one).to_iter_dataset()
    return ds.batch(3)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "saver, restorer", [("lite", "lite"), ("grain", "lite"), ("lite", "grain")]
)
def test_orbax_saves_and_restores_a_dataset_iterator(tmp_path, saver, restorer):
    ocp = pytest.importorskip("orbax.checkpoint")
    import grain as real_grain

    libs = {"lite": grain, "grain": real_grain}
    expected = [to_plain(b) for b in _orbax_pipeline(real_grain)]
    saving = iter(_orbax_pipeline(libs[saver]))
    assert [to_plain(next(saving)) for _ in range(3)] == expected[:3]
    with ocp.CheckpointManager(tmp_path / f"saved-by-{saver}") as manager:
        manager.save(3, args=libs[saver].checkpoint.CheckpointSave(saving))
        manager.wait_until_finished()
    saving.close()
    fresh = iter(_orbax_pipeline(libs[restorer]))
    with ocp.CheckpointManager(tmp_path / f"saved-by-{saver}") as manager:
        restored = manager.restore(3, args=libs[restorer].checkpoint.CheckpointRestore(fresh))
    assert restored is fresh
    assert [to_plain(b) for b in fresh] == expected[3:]
    fresh.close()
