"""The TorchDataLoader's state dict: plain JSON-able data, checked field by field on load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grainlite.torch.state import FORMAT, LoaderState, from_dict

pytestmark = pytest.mark.timeout(30)

SAVED = LoaderState(epoch=2, batch=5, world_size=2, worker_count=1, ranks=("{}", "{}"))


def test_the_dict_is_plain_json_and_reads_back_equal():
    document = json.loads(json.dumps(SAVED.to_dict()))
    assert document["format"] == FORMAT
    assert from_dict(document) == SAVED


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"format": "other/1"}, "format 'other/1' is not 'grainlite.torch/1'"),
        ({"epoch": -1}, "'epoch' must be an int >= 0, got -1"),
        ({"batch": 1.5}, "'batch' must be an int >= 0, got 1.5"),
        ({"ranks": ["{}"]}, "'ranks' must be a list of 2 JSON strings, got ['{}']"),
        ({"epoch": None}, "'epoch' must be an int >= 0, got None"),
    ],
    ids=["format", "negative-epoch", "float-batch", "ranks-short", "epoch-none"],
)
def test_a_damaged_state_is_refused_naming_the_field(change, what):
    with pytest.raises(ValueError) as raised:
        from_dict({**SAVED.to_dict(), **change})
    assert str(raised.value) == (
        f"TorchDataLoader.load_state_dict: {what}. Pass the dict returned by state_dict() of a "
        f"TorchDataLoader (as saved in a Lightning checkpoint under 'loops')."
    )


def test_missing_fields_are_listed():
    with pytest.raises(ValueError, match=r"the fields \['batch', 'ranks'\] are missing"):
        from_dict({k: v for k, v in SAVED.to_dict().items() if k not in ("batch", "ranks")})


def test_something_else_than_a_dict_is_refused():
    with pytest.raises(ValueError, match="expected a dict, got list"):
        from_dict([1, 2])


def test_numpy_integer_fields_read_back_as_ints_and_a_bool_is_refused():
    # One rule for every integer field of a saved state (grainlite.checks.state_int): a numpy
    # integer counts (as in an int option and in Grain's states), a bool does not.
    document = {**SAVED.to_dict(), "epoch": np.int64(2), "batch": np.uint8(5)}
    loaded = from_dict(document)
    assert loaded == SAVED
    assert type(loaded.epoch) is int and type(loaded.batch) is int
    with pytest.raises(ValueError, match="'epoch' must be an int >= 0, got True"):
        from_dict({**SAVED.to_dict(), "epoch": True})
