"""TorchDataLoader's own argument checks, and the warning when pinning is impossible."""

from __future__ import annotations

import pytest

import grainlite as grain
import grainlite.torch.options as options_module
from grainlite.torch import TorchDataLoader
from grainlite_tests.support.torch_records import records

pytestmark = pytest.mark.timeout(60)


def ids(batch) -> list[int]:
    return batch["id"].tolist()


def epoch_ids(loader) -> list[list[int]]:
    return [ids(batch) for batch in loader]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"batches_per_epoch": 0},
            ValueError,
            "batches_per_epoch must be an int >= 1 or None, got 0; pass N to stop every epoch "
            "after N batches, or None for the full epoch.",
        ),
        (
            {"pin_memory": True, "to_torch": False},
            ValueError,
            "pin_memory=True needs to_torch=True: only torch tensors can be pinned. Pass "
            "to_torch=True, or pin_memory=False to keep numpy arrays.",
        ),
        (
            {"shard_options": (0, 2)},
            TypeError,
            "shard_options must be a ShardOptions or None, got tuple (0, 2); pass None to shard "
            "by torch.distributed rank, or grain.ShardOptions(shard_index=i, shard_count=n).",
        ),
    ],
    ids=["zero-batches", "pin-without-tensors", "shard-options-tuple"],
)
def test_bad_arguments_are_refused_with_the_fix(kwargs, error, message):
    with pytest.raises(error) as raised:
        TorchDataLoader(data_source=records(4), **kwargs)
    assert str(raised.value) == message


def test_pin_memory_reads_ahead_in_a_thread_and_warns_once_without_an_accelerator():
    def make(pin):
        return TorchDataLoader(
            data_source=records(10),
            operations=[grain.Batch(3)],
            shuffle=True,
            seed=1,
            worker_count=2,
            pin_memory=pin,
        )

    options_module._warned_no_accelerator = False
    with pytest.warns(UserWarning, match="no accelerator is available"):
        pinned = make(True)
    plain = make(False)
    with pinned, plain:
        for _ in range(2):
            assert epoch_ids(pinned) == epoch_ids(plain)
        iterator = iter(pinned)
        next(iterator)
        assert pinned.state_dict()["batch"] == 1  # delivered, not read ahead
