"""``DataLoaderIterator.set_num_workers(n)``: a live iterator goes on with another worker count,
every record exactly once (the elastic restore of its own state), states that restore, and no
process left; ``mp_prefetch``, whose state needs the same count, refuses and says why.
(RayWorkers: test_ray_workers.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

import grainlite as grain
from grainlite.errors import GrainliteValueError
from grainlite_tests.support import ray_pipelines as rp

pytestmark = pytest.mark.timeout(180)

COUNT = 120
KEPT = [x for x in range(COUNT) if x % 5 != 0]


def records_of(run: list) -> list[int]:
    return [int(x) for batch, _ in run for x in np.asarray(batch).ravel()]


def test_local_workers_2_to_3_to_1_give_every_record_exactly_once_and_states_that_restore():
    it = iter(rp.numbers_loader(COUNT, worker_count=2))
    run = rp.take_changing_workers(it, [(2, 4), (3, 5), (1, -1)])
    assert sorted(records_of(run)) == KEPT  # none lost, none repeated, across both changes
    it.close()
    # A state taken after a change restores onto a new iterator (any count) and gives the rest.
    after_change = rp.take_changing_workers(
        iter(rp.numbers_loader(COUNT, worker_count=2)), [(2, 3), (3, 2)]
    )
    saved = after_change[-1][1]
    assert json.loads(saved)["worker_count"] == 3
    with iter(rp.numbers_loader(COUNT, worker_count=3)) as restored:
        restored.set_state(saved)
        rest = rp.run_with_states(restored)
    assert sorted(records_of(after_change) + records_of(rest)) == KEPT


def test_a_worker_count_change_gives_what_restoring_the_state_onto_that_count_gives():
    it = iter(rp.numbers_loader(COUNT, worker_count=2))
    before = rp.run_with_states(it, 4)
    it.set_num_workers(3)
    changed = rp.run_with_states(it)
    it.close()
    with iter(rp.numbers_loader(COUNT, worker_count=3)) as fresh:
        fresh.set_state(before[-1][1])
        rp.assert_same_run(changed, rp.run_with_states(fresh))


def test_set_num_workers_before_the_first_element_and_to_no_workers():
    it = iter(rp.numbers_loader(COUNT, worker_count=2))
    run = rp.take_changing_workers(it, [(3, 2), (0, 3), (2, -1)])
    assert sorted(records_of(run)) == KEPT
    it.close()


def test_a_worker_count_that_is_not_an_int_of_at_least_0_is_refused():
    with iter(rp.numbers_loader(COUNT, worker_count=2)) as it:
        for bad in (-1, 1.5, True, "2"):
            with pytest.raises(GrainliteValueError, match="set_num_workers"):
                it.set_num_workers(bad)  # type: ignore[arg-type]
        assert records_of(rp.run_with_states(it))  # still at its start, unchanged


def test_mp_prefetch_refuses_another_worker_count_and_says_why():
    ds = grain.MapDataset.range(20).to_iter_dataset()
    with iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))) as it:
        assert int(next(it)) == 0
        it.set_num_workers(2)  # the same count: nothing changes
        with pytest.raises(GrainliteValueError, match="state is one iterator state per worker"):
            it.set_num_workers(3)
        assert [int(x) for x in it] == list(range(1, 20))  # the stream went on untouched
