"""TorchDataLoader with real torch and real worker processes: epochs, len, state, lifecycle."""

from __future__ import annotations

import gc
import json

import grain.python as reference
import numpy as np
import pytest
import torch
from leak_check import live_children

import grainlite as grain
from grainlite.torch import TorchDataLoader
from grainlite_tests.support.processes import loader_processes
from grainlite_tests.support.torch_records import KeepEven, records

pytestmark = pytest.mark.timeout(120)
SESSION_CHILDREN: set[int] = set()


@pytest.fixture(autouse=True)
def session_children():
    """Children that exist before a test (multiprocessing's resource tracker) are not workers."""
    SESSION_CHILDREN.clear()
    SESSION_CHILDREN.update(live_children())


def started() -> set[int]:
    """The processes loaders started during this test (the session's helpers excluded): their
    workers, and the fork server that forks them where workers are forked."""
    return live_children() - SESSION_CHILDREN


def ids(batch) -> list[int]:
    return batch["id"].tolist()


def epoch_ids(loader) -> list[list[int]]:
    return [ids(batch) for batch in loader]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_epoch_is_that_epoch_of_grains_endless_sampler_on_each_rank(world):
    for rank in range(world):
        loader = TorchDataLoader(
            data_source=records(23),
            operations=[grain.Batch(1)],
            shuffle=True,
            seed=4,
            shard_options=grain.ShardOptions(rank, world),
        )
        sampler = reference.IndexSampler(
            23, reference.ShardOptions(rank, world), shuffle=True, num_epochs=None, seed=4
        )
        length = 23 // world + (rank < 23 % world)
        for epoch in range(3):
            expected = [
                sampler[rank + world * (epoch * length + j)].record_key for j in range(length)
            ]
            got = [i for batch in epoch_ids(loader) for i in batch]
            assert got == expected[: len(loader)]


def test_ranks_read_disjoint_shards_that_cover_every_record_each_epoch():
    loaders = [
        TorchDataLoader(
            data_source=records(24),
            operations=[grain.Batch(4)],
            shuffle=True,
            seed=1,
            shard_options=grain.ShardOptions(r, 2),
            worker_count=2,
        )
        for r in range(2)
    ]
    try:
        for _ in range(2):
            shards = [{i for batch in epoch_ids(loader) for i in batch} for loader in loaders]
            assert shards[0].isdisjoint(shards[1])
            assert shards[0] | shards[1] == set(range(24))
    finally:
        for loader in loaders:
            loader.close()


@pytest.mark.parametrize("num_records", [21, 22, 23])
def test_len_is_the_same_on_every_rank_and_each_rank_yields_exactly_that_many(num_records):
    loaders = [
        TorchDataLoader(
            data_source=records(num_records),
            operations=[grain.Batch(4)],
            shard_options=grain.ShardOptions(r, 3),
        )
        for r in range(3)
    ]
    assert len({len(loader) for loader in loaders}) == 1
    for loader in loaders:
        assert [len(epoch_ids(loader)) for _ in range(2)] == [len(loader)] * 2


def test_each_iter_is_the_next_epoch_reshuffled_and_batches_never_straddle_epochs():
    loader = TorchDataLoader(
        data_source=records(10), operations=[grain.Batch(4)], shuffle=True, seed=0
    )
    epochs = [epoch_ids(loader) for _ in range(3)]
    assert len({str(e) for e in epochs}) == 3
    for epoch in epochs:
        assert sorted(i for batch in epoch for i in batch) == list(range(10))
        assert [len(batch) for batch in epoch] == [4, 4, 2]


def test_set_epoch_moves_to_that_epoch_and_setting_the_next_epoch_again_is_a_no_op():
    def make():
        return TorchDataLoader(
            data_source=records(12), operations=[grain.Batch(3)], shuffle=True, seed=9
        )

    straight = make()
    epochs = [epoch_ids(straight) for _ in range(4)]
    loader = make()
    loader.set_epoch(2)
    assert epoch_ids(loader) == epochs[2]
    loader.sampler.set_epoch(3)  # where Lightning calls it
    loader.sampler.set_epoch(3)
    assert epoch_ids(loader) == epochs[3]
    loader.set_epoch(0)
    assert epoch_ids(loader) == epochs[0]
    assert loader.batch_sampler is None


def test_set_epoch_of_the_loaded_epoch_keeps_the_loaded_mid_epoch_position():
    def make():
        return TorchDataLoader(
            data_source=records(12), operations=[grain.Batch(3)], shuffle=True, seed=9
        )

    saver = make()
    saver.set_epoch(1)
    batches = iter(saver)
    next(batches)
    rest = [ids(batch) for batch in batches]
    resumed = make()
    saver.set_epoch(1)
    batches = iter(saver)
    next(batches)
    resumed.load_state_dict(saver.state_dict())
    resumed.set_epoch(1)  # Lightning does this after loading a mid-epoch checkpoint
    assert epoch_ids(resumed) == rest


def test_iter_starts_nothing_until_the_first_next():
    with TorchDataLoader(
        data_source=records(8), operations=[grain.Batch(2)], worker_count=2
    ) as loader:
        iterator = iter(loader)
        assert not started()
        next(iterator)
        assert len(started()) == loader_processes(2)


@pytest.mark.parametrize(
    "operations",
    [[grain.Batch(2)], [KeepEven(), grain.Batch(2)]],
    ids=["epoch-ends-at-len", "epoch-ends-with-the-stream"],
)
def test_the_same_worker_processes_serve_every_epoch(operations):
    with TorchDataLoader(
        data_source=records(8), operations=operations, worker_count=2, shuffle=True, seed=1
    ) as loader:
        seen = []
        for _ in range(3):
            assert epoch_ids(loader)
            seen.append(started())
        assert len(seen[0]) == loader_processes(2) and seen[0] == seen[1] == seen[2]


def resume_at_every_batch(make, epochs: int = 2, new_loader_at: tuple[int, ...] = (1,)) -> None:
    """State after every batch, through JSON, loaded into one live loader (its running workers
    move) and at ``new_loader_at`` into a new one: the rest always equals the straight run."""
    straight = make()
    reference_batches, states = [], []
    for _ in range(epochs):
        for batch in straight:
            reference_batches.append(ids(batch))
            states.append(json.loads(json.dumps(straight.state_dict())))
    straight.close()
    per_epoch = len(reference_batches) // epochs

    def rest_after(loader, k):
        loader.load_state_dict(states[k])
        return [ids(batch) for _ in range(epochs - k // per_epoch) for batch in loader]

    with make() as live:
        for k in range(len(states)):
            assert rest_after(live, k) == reference_batches[k + 1 :], k
    for k in new_loader_at:
        with make() as resumed:
            assert rest_after(resumed, k) == reference_batches[k + 1 :], k


@pytest.mark.parametrize("workers", [0, 2])
def test_state_dict_round_trips_through_json_and_resumes_after_every_batch(workers):
    resume_at_every_batch(
        lambda: TorchDataLoader(
            data_source=records(11),
            operations=[grain.Batch(3)],
            shuffle=True,
            seed=3,
            worker_count=workers,
        )
    )


def test_a_filtered_loader_resumes_after_every_batch_from_its_own_state():
    resume_at_every_batch(
        lambda: TorchDataLoader(
            data_source=records(14),
            operations=[KeepEven(), grain.Batch(2)],
            shuffle=True,
            seed=3,
            worker_count=2,
        )
    )


def test_state_dict_holds_every_ranks_state_as_that_rank_reports_it():
    def make(rank):
        return TorchDataLoader(
            data_source=records(23),
            operations=[grain.Batch(3)],
            shuffle=True,
            seed=3,
            worker_count=2,
            shard_options=grain.ShardOptions(rank, 2),
        )

    loaders = [make(0), make(1)]
    try:
        iterators = [iter(loader) for loader in loaders]
        for _ in range(3):
            for iterator in iterators:
                next(iterator)
        saved = loaders[0].state_dict()
        assert saved["ranks"][1] == loaders[1].state_dict()["ranks"][1]
        assert saved["ranks"][1] == loaders[1]._resources.iterator.get_state().decode()
        assert (saved["epoch"], saved["batch"], saved["world_size"]) == (0, 3, 2)
    finally:
        for loader in loaders:
            loader.close()


def test_state_dict_is_plain_data_that_torch_loads_with_weights_only(tmp_path):
    loader = TorchDataLoader(data_source=records(6), operations=[grain.Batch(2)])
    next(iter(loader))
    torch.save({"loader": loader.state_dict()}, tmp_path / "checkpoint.pt")
    loaded = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert loaded["loader"] == loader.state_dict()
    assert loaded["loader"]["batch"] == 1


def test_a_state_saved_after_the_last_batch_resumes_at_the_next_epoch():
    def make():
        return TorchDataLoader(
            data_source=records(8), operations=[grain.Batch(4)], shuffle=True, seed=2
        )

    straight = make()
    first, second = epoch_ids(straight), epoch_ids(straight)
    loader = make()
    epoch_ids(loader)
    resumed = make()
    resumed.load_state_dict(loader.state_dict())
    assert first and epoch_ids(resumed) == []  # what is left of epoch 0: nothing
    assert epoch_ids(resumed) == second


def test_a_filter_under_several_ranks_needs_batches_per_epoch_and_says_so_at_iter():
    loader = TorchDataLoader(
        data_source=records(12),
        operations=[KeepEven(), grain.Batch(2)],
        shard_options=grain.ShardOptions(0, 2),
    )
    with pytest.raises(TypeError, match="batches_per_epoch=N"):
        len(loader)
    with pytest.raises(ValueError) as raised:
        next(iter(loader))
    assert str(raised.value) == (
        "TorchDataLoader: with filter operations the number of batches per epoch depends on the "
        "data, and with 2 ranks a rank with one batch more than the others would hang "
        "distributed training. Pass batches_per_epoch=N, with N at most the batches the "
        "smallest rank makes, so that every rank stops after N batches."
    )


def test_batches_per_epoch_stops_every_epoch_there_on_every_rank():
    for rank in range(2):
        loader = TorchDataLoader(
            data_source=records(20),
            operations=[KeepEven(), grain.Batch(2)],
            shard_options=grain.ShardOptions(rank, 2),
            batches_per_epoch=2,
        )
        assert len(loader) == 2
        assert [len(epoch_ids(loader)) for _ in range(3)] == [2, 2, 2]


def test_batches_per_epoch_beyond_what_the_data_holds_is_refused():
    loader = TorchDataLoader(
        data_source=records(8), operations=[grain.Batch(4)], batches_per_epoch=3
    )
    with pytest.raises(ValueError, match=r"Pass batches_per_epoch <= 2, or None for 2"):
        len(loader)


def test_a_filtered_state_refuses_another_world_size_and_names_the_fix():
    def make(rank, world):
        return TorchDataLoader(
            data_source=records(20),
            operations=[KeepEven(), grain.Batch(2)],
            shard_options=grain.ShardOptions(rank, world),
            batches_per_epoch=2,
        )

    saver = make(0, 1)
    next(iter(saver))
    with pytest.raises(ValueError, match=r"call loader.set_epoch\(1\) to start at an epoch"):
        make(0, 2).load_state_dict(saver.state_dict())


def test_close_stops_the_workers_at_once_and_the_loader_can_start_again():
    loader = TorchDataLoader(data_source=records(8), operations=[grain.Batch(2)], worker_count=2)
    with loader:
        next(iter(loader))
        assert len(started()) == loader_processes(2)
    assert not started()
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (0, 1)
    assert len(epoch_ids(loader)) == 4
    loader.close()
    loader.close()
    assert not started()


def test_a_forgotten_loader_leaves_no_workers_once_collected():
    loader = TorchDataLoader(data_source=records(8), operations=[grain.Batch(2)], worker_count=2)
    next(iter(loader))
    assert len(started()) == loader_processes(2)
    del loader
    gc.collect()
    assert not started()


def test_set_epoch_refuses_a_negative_epoch():
    loader = TorchDataLoader(data_source=records(4))
    with pytest.raises(ValueError, match="epoch must be an int >= 0, got -1"):
        loader.set_epoch(-1)


def test_set_epoch_refuses_a_non_integer_as_a_value_error_quoting_it_briefly():
    loader = TorchDataLoader(data_source=records(4))
    for bad in ("x" * 100_000, True, 1.0):
        with pytest.raises(
            ValueError, match="set_epoch: epoch must be an int >= 0, got "
        ) as raised:
            loader.set_epoch(bad)
        assert len(str(raised.value)) < 400
    loader.set_epoch(np.int64(0))  # a numpy integer counts, as for every int option


def test_to_torch_false_keeps_numpy_arrays():
    loader = TorchDataLoader(data_source=records(4), operations=[grain.Batch(2)], to_torch=False)
    batch = next(iter(loader))
    assert isinstance(batch["x"], np.ndarray)
