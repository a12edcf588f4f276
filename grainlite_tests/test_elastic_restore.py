"""Elastic restore: a state saved with one layout (hosts S, workers W) resumed in another (S', W').

The promise (``docs/how-to/checkpointing.md``): before + after delivers every record-level element
of the uninterrupted run exactly once, for filters, flat-maps and batches; with
``drop_remainder=True`` the elements missing are exactly those of each new worker's last, short
batch. Hosts are simulated in one process with ``ShardOptions``; the states of other host counts
go through the same entry the Orbax handler uses (``test_elastic_orbax.py`` runs real processes).
"""

from __future__ import annotations

import collections
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grainlite as grain
from grainlite.errors import CheckpointMismatchError, GrainliteValueError
from grainlite_tests.support import elastic_helpers as helpers
from grainlite_tests.support.elastic_helpers import flatten, operations, resume, save, uninterrupted

pytestmark = pytest.mark.timeout(120)

SPECS = st.lists(st.sampled_from(["filter", "fan"]), max_size=3).map(tuple)
BATCHES = st.none() | st.tuples(st.integers(1, 4), st.booleans())
# (S, W, S', W') with at most 4 worker processes in all: worker processes take ~0.3 s to start.
LAYOUTS_WITH_WORKERS = [
    (s, w, s2, w2)
    for s in range(1, 5)
    for w in range(5)
    for s2 in range(1, 5)
    for w2 in range(5)
    if (w or w2) and s * w + s2 * w2 <= 4 and (s, w) != (s2, w2)
]


def check_exactly_once(spec, batch, layout, steps):
    """Saves with (S, W) after ``steps`` per host, resumes with (S', W'), checks the ledger."""
    hosts, workers, new_hosts, new_workers = layout
    ops = operations(spec, batch)
    before, states = save(ops, hosts, workers, steps)
    after = [e for rest in resume(ops, states, new_hosts, new_workers) for e in rest]
    delivered = collections.Counter(flatten(before) + flatten(after))
    everything = uninterrupted(spec)
    if batch is None or not batch[1]:
        assert delivered == everything
        return
    # drop_remainder: the rule says each new worker drops only its last, short batch. The same
    # restore without drop_remainder shows those batches; they are exactly what is missing.
    kept = operations(spec, (batch[0], False))
    rests = resume(kept, states, new_hosts, new_workers)
    short = [b for rest in rests for b in rest if len(b) < batch[0]]
    assert all(len(b) == batch[0] for b in after)
    assert len(short) <= new_hosts * max(new_workers, 1)
    assert delivered + collections.Counter(flatten(short)) == everything


@settings(max_examples=40, deadline=None)
@given(
    spec=SPECS,
    batch=BATCHES,
    hosts=st.integers(1, 4),
    new_hosts=st.integers(1, 4),
    steps=st.lists(st.integers(0, 40), min_size=4, max_size=4),
)
def test_resizing_the_host_count_delivers_every_record_once(spec, batch, hosts, new_hosts, steps):
    check_exactly_once(spec, batch, (hosts, 0, new_hosts, 0), steps)


@settings(max_examples=3, deadline=None)
@given(
    spec=SPECS,
    batch=BATCHES,
    layout=st.sampled_from(LAYOUTS_WITH_WORKERS),
    steps=st.lists(st.integers(0, 40), min_size=4, max_size=4),
)
def test_resizing_workers_and_hosts_delivers_every_record_once(spec, batch, layout, steps):
    check_exactly_once(spec, batch, layout, steps)


@pytest.mark.parametrize(
    ("spec", "steps"),
    [(("filter", "fan"), 5), (("fan", "filter", "fan"), 9)],
    ids=["filter-then-flat-map", "nested-flat-maps"],
)
def test_changing_the_worker_count_on_one_host_delivers_every_record_once(spec, steps):
    check_exactly_once(spec, (2, False), (1, 2, 1, 1), [steps])


def _three_phases(spec, layouts, steps):
    """Saves, resumes with another layout for a few steps, saves again, resumes once more."""
    (hosts, workers), (hosts2, workers2), (hosts3, workers3) = layouts
    ops = operations(spec, None)
    before, states = save(ops, hosts, workers, [steps + 6 * h for h in range(hosts)])
    middle, middle_states = [], []
    for host in range(hosts2):
        with iter(helpers.loader(ops, host, hosts2, workers2)) as iterator:
            documents = {s: json.loads(state) for s, state in enumerate(states)}
            if hosts2 == hosts:
                iterator.set_state(states[host])
            else:
                iterator.restore_hosts(documents, hosts)
            middle += [e for _, e in zip(range(1), iterator)]
            middle_states.append(iterator.get_state())
    after = [e for rest in resume(ops, middle_states, hosts3, workers3) for e in rest]
    return collections.Counter(flatten(before + middle + after)), middle_states


@pytest.mark.parametrize(
    "layouts",
    [((3, 0), (2, 0), (4, 0)), ((2, 0), (3, 0), (1, 2))],
    ids=["hosts-3-2-4", "hosts-2-3-then-1-with-2-workers"],
)
@pytest.mark.parametrize("spec", [("filter",), ("filter", "fan")], ids=["filter", "flat-map"])
def test_resizing_again_before_the_holes_are_read_still_delivers_every_record_once(layouts, spec):
    delivered, middle_states = _three_phases(spec, layouts, steps=3)
    assert any(b"grainlite_holes" in state for state in middle_states)  # holes were pending
    assert delivered == uninterrupted(spec)


@pytest.mark.parametrize("spec", [("filter",), ("fan", "filter")], ids=["filter", "flat-map"])
def test_a_state_with_holes_left_restores_exactly_into_the_same_layout(spec):
    ops = operations(spec, (2, False))
    _, states = save(ops, 3, 0, [2, 9, 5])
    with iter(helpers.loader(ops, 0, 2, 0)) as iterator:
        iterator.restore_hosts({s: json.loads(state) for s, state in enumerate(states)}, 3)
        next(iterator)
        state = iterator.get_state()
        assert b"grainlite_holes" in state
        rest = [e.tolist() for e in iterator]
    with iter(helpers.loader(ops, 0, 2, 0)) as again:
        again.set_state(state)
        assert [e.tolist() for e in again] == rest


def test_the_same_state_and_layout_always_give_the_same_streams():
    ops = operations(("filter", "fan"), (3, False))
    _, states = save(ops, 2, 0, [4, 9])
    first = [[b.tolist() for b in rest] for rest in resume(ops, states, 3, 0)]
    second = [[b.tolist() for b in rest] for rest in resume(ops, states, 3, 0)]
    assert first == second


def _sequential(host, hosts, workers):
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, 20, 1),
        sampler=grain.SequentialSampler(20, grain.NoSharding()),
        worker_count=workers,
        shard_options=grain.ShardOptions(host, hosts),
    )


def _state(host, hosts, workers, last_seen):
    """The state Grain writes for host ``host`` whose workers last read ``last_seen``."""
    document = json.loads(iter(_sequential(host, hosts, 0)).get_state())
    seen = {str(w): index for w, index in enumerate(last_seen)}
    document.update(worker_count=workers, last_seen_indices=seen, last_worker_index=-1)
    return json.dumps(document).encode()


def test_one_host_reads_its_holes_first_then_its_native_tail():
    # Worker 0 of 2 read up to index 8 (next: 10), worker 1 up to 3 (next: 5): M = 10, the
    # holes are 5, 7, 9. With 2 workers -> 0, the one stream reads them, then 10, 11, ...
    resumed = iter(_sequential(0, 1, 0))
    resumed.set_state(_state(0, 1, 2, [8, 3]))
    assert [next(resumed) for _ in range(2)] == [5, 7]
    assert b"grainlite_holes" in resumed.get_state()
    assert next(resumed) == 9
    # Every hole read: the state is Grain's own v2 state for "everything up to 9 was read".
    expected = json.loads(iter(_sequential(0, 1, 0)).get_state())
    expected["last_seen_indices"] = {"0": 9}
    assert resumed.get_state() == json.dumps(expected, indent=4).encode()
    assert list(resumed) == list(range(10, 20))


def test_another_host_count_deals_the_holes_round_robin_then_reads_native_tails():
    # Host 0 of 2 read up to 8 (next: 10), host 1 up to 3 (next: 5): M = 10, holes 5, 7, 9.
    # Three hosts: stream g reads i >= 10 with i = g (mod 3), so stream 1 reads 10 first; hole j
    # goes to stream (1 - 3 + j) mod 3, so that streams 1, 2, 0, 1, ... read 5, 7, 9, 10, 11, ...
    documents = {0: json.loads(_state(0, 2, 0, [8])), 1: json.loads(_state(1, 2, 0, [3]))}
    rests = []
    for host in range(3):
        resumed = iter(_sequential(host, 3, 0))
        resumed.restore_hosts(documents, 2)
        rests.append(list(resumed))
    assert rests == [[9, 12, 15, 18], [5, 10, 13, 16, 19], [7, 11, 14, 17]]


def test_a_state_of_another_sampler_is_refused_even_with_another_worker_count():
    ops = operations((), None)
    _, states = save(ops, 1, 0, [3])
    other = grain.IndexSampler(helpers.NUM_RECORDS, grain.NoSharding(), shuffle=True, seed=1)
    resized = grain.DataLoader(
        data_source=grain.RangeDataSource(0, helpers.NUM_RECORDS, 1),
        sampler=other,
        operations=ops,
        worker_count=2,
    )
    with pytest.raises(CheckpointMismatchError, match=r"^Sampler in checkpoint does not match"):
        iter(resized).set_state(states[0])


def test_a_state_of_another_data_source_is_refused_even_with_another_host_count():
    ops = operations((), None)
    _, states = save(ops, 2, 0, [3, 3])
    documents = {s: json.loads(state) for s, state in enumerate(states)}
    documents[1]["data_source"] = "RangeDataSource(start=0, stop=99, step=1)"
    with pytest.raises(CheckpointMismatchError, match=r"^DataSource in checkpoint does not match"):
        iter(helpers.loader(ops, 0, 3, 0)).restore_hosts(documents, 2)


class _Unbatch(grain.FlatMapTransform):
    """A batch's rows, one by one."""

    max_fan_out = 4

    def flat_map(self, element):
        yield from list(element)


class _Passthrough(grain.Operation):
    """A custom legacy Operation: records in, records out."""

    def __call__(self, records):
        yield from records


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            [grain.Batch(2), _Unbatch()],
            "This checkpoint was saved with another worker or host count, and operations[1] "
            "(_Unbatch) is a FlatMapTransform after a Batch: its inputs are batches, which another "
            "layout forms differently. Restore with the layout it was saved with, or move the "
            "FlatMapTransform before the Batch.",
        ),
        (
            [_Passthrough()],
            "This checkpoint was saved with another worker or host count, and operations[0] "
            "(_Passthrough) is a custom Operation, whose buffered records the checkpoint does "
            "not hold. Restore with the layout it was saved with, or use "
            "Map/Filter/FlatMap/Batch transforms.",
        ),
    ],
    ids=["flat-map-after-batch", "custom-operation"],
)
def test_a_pipeline_whose_remainder_cannot_be_split_is_refused_with_the_fix(ops, message):
    _, states = save(ops, 2, 0, [1, 1])
    with pytest.raises(GrainliteValueError) as caught:
        iter(helpers.loader(ops, 0, 1, 0)).restore_hosts(
            {s: json.loads(state) for s, state in enumerate(states)}, 2
        )
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("[]", "grainlite_holes must be a JSON object, got []"),
        (
            '{"shard_index": 0, "shard_count": 1, "worker_count": 0, "workers": {"0": '
            '{"holes": [1, 1], "cursor": []}}}',
            "grainlite_holes: worker 0 lists a hole twice",
        ),
        (
            '{"shard_index": 0, "shard_count": 1, "worker_count": 0, "workers": {"0": '
            '{"holes": [-4], "cursor": []}}}',
            "grainlite_holes: a hole index must be an integer >= 0, got -4",
        ),
        (
            '{"shard_index": 0, "shard_count": 1, "worker_count": 0, "workers": {"3": '
            '{"holes": [4], "cursor": []}}}',
            "grainlite_holes: worker '3' is not one of the 1 workers",
        ),
    ],
    ids=["not-an-object", "a-hole-twice", "negative-index", "unknown-worker"],
)
def test_a_malformed_holes_field_is_rejected_with_what_is_wrong(field, message):
    ops = operations((), None)
    _, states = save(ops, 1, 0, [3])
    state = json.loads(states[0])
    state["grainlite_holes"] = json.loads(field)
    with pytest.raises(GrainliteValueError) as caught:
        iter(helpers.loader(ops, 0, 1, 0)).set_state(json.dumps(state).encode())
    assert str(caught.value) == (
        f"Invalid iterator state: {message}. Pass the bytes returned by get_state() of a loader "
        f"with the same settings."
    )


def test_grain_reads_a_state_with_holes_left_and_resumes_the_native_tails():
    gp = pytest.importorskip("grain.python")
    ops = operations(("filter",), None)
    _, states = save(ops, 3, 0, [4, 6, 2])
    with iter(helpers.loader(ops, 0, 2, 0)) as iterator:
        iterator.restore_hosts({s: json.loads(state) for s, state in enumerate(states)}, 3)
        state = iterator.get_state()
    assert b"grainlite_holes" in state
    sampler = gp.IndexSampler(
        helpers.NUM_RECORDS, gp.NoSharding(), shuffle=True, num_epochs=helpers.EPOCHS, seed=11
    )
    theirs = gp.DataLoader(
        data_source=gp.RangeDataSource(0, helpers.NUM_RECORDS, 1),
        sampler=sampler,
        operations=[],
        worker_count=0,
        shard_options=gp.ShardOptions(0, 2),
    )
    grain_iterator = iter(theirs)
    grain_iterator.set_state(state)
    tail_start = json.loads(state)["last_seen_indices"]["0"] + 2
    assert [r for r in grain_iterator] == [
        sampler[i].record_key for i in range(tail_start, len(sampler), 2)
    ]


class _FailOnSeven(grain.MapTransform):
    """Raises for record 7, passes every other record through."""

    def map(self, element):
        if element == 7:
            raise ValueError("record 7 is broken")
        return element


def test_a_record_whose_error_was_delivered_is_not_read_again_after_a_resize():
    def build(host, hosts):
        return grain.DataLoader(
            data_source=grain.RangeDataSource(0, 20, 1),
            sampler=grain.SequentialSampler(20, grain.NoSharding()),
            operations=[_FailOnSeven(), grain.Batch(3)],
            worker_count=0,
            shard_options=grain.ShardOptions(host, hosts),
        )

    before = []
    with iter(build(0, 1)) as iterator:
        while True:  # batches up to the error: [0, 1, 2], [3, 4, 5], then 7 fails while 6 is held
            try:
                before += next(iterator).tolist()
            except ValueError:
                break
        state = iterator.get_state()
    assert b"grainlite_skipped_indices" in state and before == [0, 1, 2, 3, 4, 5]
    after = []
    for host in range(2):
        with iter(build(host, 2)) as iterator:
            iterator.restore_hosts({0: json.loads(state)}, 1)
            after += [x for batch in iterator for x in batch.tolist()]  # no error again
    assert sorted(before + after) == [x for x in range(20) if x != 7]


def test_a_state_whose_workers_stand_absurdly_far_apart_is_refused(monkeypatch):
    from grainlite.loader.state import holes_field as pending

    monkeypatch.setattr(pending, "MAX_HOLES", 5)
    resumed = iter(_sequential(0, 1, 0))
    with pytest.raises(GrainliteValueError) as caught:
        resumed.set_state(_state(0, 1, 2, [18, 1]))  # worker 1's 3, 5, ..., 17 would be holes
    assert str(caught.value) == (
        "Invalid iterator state: its workers stand more than 5 records apart (the furthest is at "
        "sampler index 20), which no DataLoader run leaves. Pass the bytes returned by "
        "get_state() of a loader with the same settings."
    )


TWO_FAN = ("fan", "fan")


@pytest.mark.parametrize(
    ("steps", "workers", "new_workers"),
    [(1, 2, 1), (4, 2, 1), (12, 0, 2), (19, 3, 1)],
)
def test_two_flat_maps_resume_exactly_once_when_a_worker_starts_from_a_hole_record(
    steps, workers, new_workers
):
    """The parent makes a worker's first element (the head start), and the worker goes on from
    the state after it: inside a partly delivered hole record, below two FlatMaps."""
    ops = operations(TWO_FAN, None)
    before, states = save(ops, 1, workers, [steps])
    rests = resume(ops, states, 1, new_workers)
    delivered = flatten(before) + flatten(rests[0])
    assert collections.Counter(delivered) == uninterrupted(TWO_FAN)


@pytest.mark.parametrize(
    ("steps", "workers", "taken"), [(4, 2, 1), (4, 3, 1), (6, 2, 1), (6, 2, 2), (8, 3, 2)]
)
def test_a_state_saved_inside_a_partly_delivered_hole_record_resumes_right_after_it(
    steps, workers, taken
):
    ops = operations(TWO_FAN, None)
    before, states = save(ops, 1, workers, [steps])
    with iter(helpers.loader(ops, 0, 1, 0)) as iterator:
        iterator.set_state(states[0])
        middle = [next(iterator) for _ in range(taken)]
        state = iterator.get_state()
    with iter(helpers.loader(ops, 0, 1, 0)) as iterator:
        iterator.set_state(state)
        rest = list(iterator)
    delivered = flatten(before) + flatten(middle) + flatten(rest)
    assert collections.Counter(delivered) == uninterrupted(TWO_FAN)
