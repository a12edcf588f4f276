"""Elastic restore onto another host count of a loader that shards with its sampler.

The form of Grain's DataLoader tutorial, ``IndexSampler(n, ShardByJaxProcess(drop_remainder=True),
shuffle=True, seed=...)``, and Grain's default ``ShardByJaxProcess()`` (without drop_remainder:
the first ``n mod S`` hosts' blocks hold one record more, so hosts' epochs drift apart) give each
host its own block of records and number them per host. A state saved by ``S`` hosts restores onto
``S'`` hosts: the records of epochs up to ``E`` that the savers had not delivered come exactly
once, and the later epochs follow the new sharding as a fresh run of ``S'`` hosts would (the rule
of ``grainlite.loader.state.resharding``). Each check compares the ledger of delivered elements
(each names its record and its sampler index, hence its epoch) with those two uninterrupted runs.

The end-to-end tests run real ``jax.distributed`` processes on localhost with one Orbax
``CheckpointManager`` per job (``resharding_multihost_job.py``); the hypothesis tests draw layouts
and save points in one process, each host simulated by its shard options.
"""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grainlite as grain
from grainlite.errors import CheckpointMismatchError, GrainliteValueError
from grainlite_tests.support import resharding_helpers as helpers
from grainlite_tests.support.elastic_helpers import flatten

pytestmark = pytest.mark.timeout(200)

SPECS = st.lists(st.sampled_from(["filter", "fan"]), max_size=2).map(tuple)
BATCHES = st.none() | st.integers(1, 3)


@pytest.fixture(autouse=True)
def _quiet_drop_remainder(caplog):
    """Every sampler built here drops 23 mod S records and logs it; the notice is not the test."""
    caplog.set_level(logging.ERROR, logger="grainlite.sampling.sharding")


FORMS = [helpers.TUTORIAL, helpers.DEFAULT]
FORM_IDS = ["drop-remainder", "grain-default"]


def _check(spec, batch, hosts, workers, new_hosts, new_workers, steps, form=helpers.TUTORIAL):
    """Saves with ``hosts`` hosts after ``steps``, restores onto ``new_hosts``, checks the ledger
    and that ``E`` is the one the documented rule gives; returns ``E``."""
    ops = helpers.operations(spec, batch)
    before, states = helpers.save(ops, hosts, workers, steps, form)
    rests = helpers.resume(ops, states, new_hosts, new_workers, form)
    delivered = flatten(before) + [e for rest in rests for e in flatten(rest)]
    last = helpers.matching_epoch(spec, delivered, hosts, new_hosts, form)
    assert last is not None, "not the old run's epochs <= E plus a fresh run's later ones"
    if "fan" not in spec:
        assert last == helpers.rule_epoch(states, hosts, workers, form)
    return last


@settings(max_examples=40, deadline=None)
@given(
    spec=SPECS,
    batch=BATCHES,
    hosts=st.integers(1, 4),
    new_hosts=st.integers(1, 4),
    steps=st.lists(st.integers(0, 60), min_size=4, max_size=4),
)
def test_a_sampler_sharded_state_restores_onto_another_host_count_exactly_once(
    spec, batch, hosts, new_hosts, steps
):
    if hosts == new_hosts:
        new_hosts = hosts % 4 + 1
    _check(spec, batch, hosts, 0, new_hosts, 0, steps[:hosts])


@settings(max_examples=40, deadline=None)
@given(
    spec=SPECS,
    batch=BATCHES,
    hosts=st.integers(1, 4),
    new_hosts=st.integers(1, 4),
    num_records=st.integers(4, 29),
    steps=st.lists(st.integers(0, 60), min_size=4, max_size=4),
)
def test_grains_default_sharding_restores_onto_another_host_count_exactly_once(
    spec, batch, hosts, new_hosts, num_records, steps
):
    """``ShardByJaxProcess()`` without drop_remainder: blocks of unequal length, every record."""
    if hosts == new_hosts:
        new_hosts = hosts % 4 + 1
    form = helpers.Form(drop_remainder=False, num_records=num_records)
    _check(spec, batch, hosts, 0, new_hosts, 0, steps[:hosts], form)


@pytest.mark.parametrize(
    ("spec", "num_records", "hosts", "new_hosts", "steps", "last"),
    [
        (("filter",), 23, 2, 3, (7, 12), 1),
        (("filter",), 23, 2, 3, (13, 25), 2),
        (("filter",), 23, 3, 2, (5, 9, 14), 2),  # host 2's shorter block is an epoch ahead
        (("filter",), 25, 3, 4, (4, 9, 13), 2),
        (("filter",), 25, 4, 3, (6, 6, 6, 7), 1),
        ((), 5, 2, 3, (4, 7), 3),  # host 0 (3 records) owes the rest of epoch 1 and epoch 2
        ((), 5, 2, 7, (1, 6), 2),  # new hosts 5 and 6 hold no block: they read holes only
    ],
    ids=["23:2-to-3", "23:2-to-3-late", "23:3-to-2", "25:3-to-4", "25:4-to-3", "drift", "empty"],
)
def test_record_counts_divisible_by_neither_process_count_restore_exactly_once(
    spec, num_records, hosts, new_hosts, steps, last
):
    """Blocks of unequal length on both sides, hosts in different epochs; ``E`` is the largest
    epoch a saving host had read in (worked out by hand from where each host stood)."""
    form = helpers.Form(drop_remainder=False, num_records=num_records)
    assert num_records % hosts and num_records % new_hosts
    assert _check(spec, None, hosts, 0, new_hosts, 0, list(steps), form) == last


@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
@settings(max_examples=4, deadline=None)
@given(
    spec=SPECS,
    batch=BATCHES,
    layout=st.sampled_from([(2, 2, 3, 0), (3, 0, 2, 2), (2, 1, 1, 3), (1, 2, 2, 2)]),
    steps=st.lists(st.integers(0, 40), min_size=3, max_size=3),
)
def test_workers_on_either_side_keep_the_restore_exactly_once(form, spec, batch, layout, steps):
    hosts, workers, new_hosts, new_workers = layout
    _check(spec, batch, hosts, workers, new_hosts, new_workers, steps[:hosts], form)


@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
@pytest.mark.parametrize("new_workers", [0, 2], ids=["in-process", "two-workers"])
def test_a_state_saved_while_holes_are_left_resizes_again_exactly_once(new_workers, form):
    """2 hosts -> 3 hosts (a few elements, holes left) -> 1 host: the old run's epochs <= E1,
    the 3-host run's epochs in (E1, E2], then the 1-host run's."""
    spec, ops = ("filter",), helpers.operations(("filter",), 2)
    steps = [5, 9] if form.drop_remainder else [3, 9]  # holes left after one batch each
    before, states = helpers.save(ops, 2, 0, steps, form)
    documents = {s: json.loads(state) for s, state in enumerate(states)}
    middle, middle_states = [], []
    for host in range(3):
        with iter(helpers.loader(ops, host, 3, new_workers, form)) as iterator:
            iterator.restore_hosts(documents, 2)
            middle += [next(iterator) for _ in range(1)]
            middle_states.append(iterator.get_state())
    assert any("grainlite_holes" in json.loads(state) for state in middle_states)
    after = [e for rest in helpers.resume(ops, middle_states, 1, 0, form) for e in flatten(rest)]
    got = sorted(flatten(before) + flatten(middle) + after)
    first = helpers.uninterrupted(spec, 2, form)
    second, third = helpers.uninterrupted(spec, 3, form), helpers.uninterrupted(spec, 1, form)
    top = max([*first, *second, *third])
    runs = []
    for e1 in range(-1, top + 1):
        for e2 in range(e1, top + 1):
            expected = []
            for e in range(top + 1):
                run = first if e <= e1 else second if e <= e2 else third
                expected += run[e].elements()
            runs.append(sorted(expected))
    assert got in runs


@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
def test_a_state_with_foreign_holes_restores_exactly_into_the_same_layout(form):
    ops = helpers.operations(("filter",), None)
    _, states = helpers.save(ops, 2, 0, [4, 11], form)
    documents = {s: json.loads(state) for s, state in enumerate(states)}
    with iter(helpers.loader(ops, 1, 3, 2, form)) as iterator:
        iterator.restore_hosts(documents, 2)
        for _ in range(2):
            next(iterator)
        state = iterator.get_state()
        rest = list(iterator)
    holes = json.loads(state)["grainlite_holes"]["workers"].values()
    assert any(hole < 0 for worker in holes for hole in worker["holes"])  # old layout's records
    with iter(helpers.loader(ops, 1, 3, 2, form)) as again:
        again.set_state(state)
        assert list(again) == rest


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({"seed": 6}, "seed=5 in the checkpoint, 6 here"),
        ({"num_epochs": 4}, "num_epochs=3 in the checkpoint, 4 here"),
        ({"shuffle": False, "seed": 5}, "shuffle=True in the checkpoint, False here"),
        ({"num_records": 22}, "num_records=23 in the checkpoint, 22 here"),
        ({"drop_remainder": False}, "drop_remainder=True in the checkpoint, False here"),
    ],
    ids=["seed", "epochs", "shuffle", "record-count", "drop-remainder"],
)
def test_another_sampler_is_refused_naming_what_differs(change, differs):
    ops = helpers.operations((), None)
    _, states = helpers.save(ops, 2, 0, [3, 3])
    documents = {s: json.loads(state) for s, state in enumerate(states)}
    arguments = {"num_records": 23, "shuffle": True, "num_epochs": 3, "seed": 5} | change
    options = grain.ShardOptions(0, 3, arguments.pop("drop_remainder", True))
    sampler = grain.IndexSampler(shard_options=options, **arguments)
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 23, 1), sampler=sampler, operations=ops
    )
    with pytest.raises(CheckpointMismatchError) as caught:
        iter(loader).restore_hosts(documents, 2)
    assert str(caught.value).startswith("Sampler in checkpoint does not match")
    assert f"What differs: {differs}." in str(caught.value)


def test_another_data_source_is_refused():
    ops = helpers.operations((), None)
    _, states = helpers.save(ops, 2, 0, [3, 3])
    documents = {s: json.loads(state) for s, state in enumerate(states)}
    documents[0]["data_source"] = "RangeDataSource(start=0, stop=99, step=1)"
    with pytest.raises(CheckpointMismatchError, match=r"^DataSource in checkpoint does not match"):
        iter(helpers.loader(ops, 0, 3, 0)).restore_hosts(documents, 2)


def test_a_custom_sampler_in_the_checkpoint_is_refused():
    ops = helpers.operations((), None)
    _, states = helpers.save(ops, 2, 0, [3, 3])
    documents = {s: json.loads(state) for s, state in enumerate(states)}
    documents[1]["sampler"] = "MySampler(seed=5)"
    with pytest.raises(CheckpointMismatchError) as caught:
        iter(helpers.loader(ops, 0, 3, 0)).restore_hosts(documents, 2)
    assert "the checkpoint's sampler is not an IndexSampler" in str(caught.value)


@pytest.mark.parametrize(
    ("hole", "why"),
    [
        (-1 - 29, "names a record of 30 hosts, more hosts than the sampler's 23 records"),
        (-1 - ((10**6 << 20) | 1), "names index 1000000 of 2 hosts, past the end of that sampler"),
    ],
    ids=["too-many-hosts", "past-the-end"],
)
def test_a_foreign_hole_the_sampler_cannot_read_is_refused(hole, why):
    ops = helpers.operations((), None)
    _, states = helpers.save(ops, 2, 0, [4, 11])
    documents = {s: json.loads(state) for s, state in enumerate(states)}
    with iter(helpers.loader(ops, 0, 3, 0)) as iterator:
        iterator.restore_hosts(documents, 2)
        document = json.loads(iterator.get_state())
    holes = document["grainlite_holes"]["workers"]["0"]["holes"]
    holes[0] = hole
    with pytest.raises(GrainliteValueError, match=why):
        iter(helpers.loader(ops, 0, 3, 0)).set_state(json.dumps(document).encode())


def test_a_dataset_iterator_sliced_by_host_restores_only_with_the_count_that_saved(tmp_path):
    """``ds[process_index::process_count]``: its state is a position in one host's slice, so the
    handler refuses another process count with the count to use."""
    pytest.importorskip("orbax.checkpoint")
    item = tmp_path / "item"
    item.mkdir()
    for host in range(2):
        iterator = iter(grain.MapDataset.range(10)[host::2].to_iter_dataset())
        next(iterator)
        (item / f"process_{host}-of-2.json").write_text(json.dumps(iterator.get_state()))
    iterator = iter(grain.MapDataset.range(10)[0::1].to_iter_dataset())
    with pytest.raises(GrainliteValueError) as caught:
        grain.GrainCheckpointHandler().restore(item, args=grain.GrainCheckpointRestore(iterator))
    assert "Restore with 2 JAX process(es)" in str(caught.value)


def test_files_of_more_processes_than_records_are_refused():
    ops = helpers.operations((), None)
    _, states = helpers.save(ops, 2, 0, [3, 3])
    documents = {s: json.loads(states[0]) for s in range(30)}
    with pytest.raises(GrainliteValueError, match="saved by 30 processes, more than the sampler's"):
        iter(helpers.loader(ops, 0, 3, 0)).restore_hosts(documents, 30)
