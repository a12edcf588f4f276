"""Every state error is built by one builder (``grainlite.checks.invalid_state``): it names the
field, quotes the bad value at most ~200 characters (a state may hold megabytes), and says what
to pass instead, with the error type each API raises there."""

from __future__ import annotations

import json

import pytest

import grainlite as grain
from grainlite.device import state as device_state
from grainlite.errors import SHOWN_CHARS, GrainliteTypeError, GrainliteValueError
from grainlite.experimental import ElasticIterator
from grainlite.torch import state as torch_state

HUGE = "x" * 1_000_000
# The longest message here, with its value quoted at SHOWN_CHARS and its fix, stays well below it.
SHORT = SHOWN_CHARS + 400


def _to_iter_state(value: object) -> None:
    iter(grain.MapDataset.range(5).to_iter_dataset()).set_state({"next_index": value})


def _elastic_iterator_state(value: object) -> None:
    ds = grain.MapDataset.range(8)
    iterator = ElasticIterator(ds, 2, grain.ShardOptions(shard_index=0, shard_count=1))
    iterator.set_state({"global_next_index": value})


def _torch_state(value: object) -> None:
    document = {"format": torch_state.FORMAT, "epoch": value, "batch": 0, "world_size": 0}
    torch_state.from_dict({**document, "worker_count": 0, "ranks": []})


def _device_state(value: object) -> None:
    device_state.decode(
        json.dumps({device_state.HOST: {}, device_state.RECEIVED: value}), host_takes_bytes=False
    )


def _loader_state(value: object) -> None:
    source = grain.RangeDataSource(0, 8, 1)
    sampler = grain.IndexSampler(8, grain.NoSharding(), shuffle=False, num_epochs=1)
    iterator = iter(grain.DataLoader(data_source=source, sampler=sampler))
    document = json.loads(iterator.get_state())
    document["last_seen_indices"] = {"0": value}
    iterator.set_state(json.dumps(document).encode())


@pytest.mark.parametrize(
    ("restore", "error", "start"),
    [
        (_to_iter_state, GrainliteTypeError, "Checkpoint `next_index` must be an int (got 'xxx"),
        (_elastic_iterator_state, GrainliteTypeError, "ElasticIterator state global_next_index"),
        (_torch_state, GrainliteValueError, "TorchDataLoader.load_state_dict: 'epoch' must be"),
        (_device_state, GrainliteValueError, "Invalid device iterator state: batches_received"),
        (_loader_state, GrainliteValueError, "Invalid iterator state: last_seen_indices[0] must"),
    ],
)
def test_a_megabyte_bad_value_in_a_state_is_quoted_short_with_the_fix(restore, error, start):
    with pytest.raises(error) as raised:
        restore(HUGE)
    message = str(raised.value)
    assert message.startswith(start)
    assert f"({len(HUGE) + 2} characters)" in message  # the quoted value says how long it was
    assert len(message) < SHORT
    assert "get_state()" in message or "state_dict()" in message  # the fix: what to pass
