"""Each option or argument error states one rule, and the value its fix suggests is accepted.

One case per message family: the whole message for a bad value (its rule stated once, with one
bound), then the call made again with the value the message tells the user to pass, which must
go through. Grain's error types are kept (each is also the builtin Grain raises); Grain's words
only where they are true (a sentence of Grain's that contradicts the rule is left out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import grainlite as grain
from grainlite.sampling.index_sampler import IndexSampler

pytestmark = pytest.mark.timeout(60)


def _loader(**kwargs: Any) -> Any:
    sampler = grain.IndexSampler(4, grain.NoSharding(), num_epochs=1)
    return grain.DataLoader(data_source=list(range(4)), sampler=sampler, **kwargs)


def _stream() -> Any:
    return grain.MapDataset.range(4).to_iter_dataset()


def _mp_prefetch(**counts: int) -> Any:
    class Options:  # Grain's own MultiprocessingOptions checks nothing; mp_prefetch does
        num_workers = counts.get("num_workers", 0)
        per_worker_buffer_size = counts.get("per_worker_buffer_size", 1)

    return _stream().mp_prefetch(Options())


def _mix(weights: list[float]) -> Any:
    return grain.MapDataset.mix([grain.MapDataset.range(3), grain.MapDataset.range(3)], weights)


CASES: list[tuple[str, Callable[[Any], Any], Any, type, str, Any]] = [
    (
        "worker_buffer_size",
        lambda v: _loader(worker_buffer_size=v),
        -1,
        ValueError,
        "Worker buffer size must be greater than or equal zero. Current worker_buffer_size is "
        "-1; pass worker_buffer_size=N with N >= 0 to keep up to N finished elements ready per "
        "worker (0 works as 1).",
        0,
    ),
    (
        "worker_count",
        lambda v: _loader(worker_count=v),
        -2,
        ValueError,
        "Worker count should be greater than or equal zero. Current worker_count is -2; pass 0 "
        "to run in this process, N >= 1 for N worker processes or None for one per usable CPU.",
        0,
    ),
    (
        "per_worker_buffer_size",
        lambda v: grain.MultiprocessingOptions(per_worker_buffer_size=v),
        -1,
        ValueError,
        "MultiprocessingOptions per_worker_buffer_size must be greater than or equal to 0, got "
        "-1; pass per_worker_buffer_size=N with N >= 0 to keep up to N finished elements ready "
        "per worker (0 works as 1).",
        0,
    ),
    (
        "num_workers",
        lambda v: grain.MultiprocessingOptions(num_workers=v),
        -1,
        ValueError,
        "MultiprocessingOptions num_workers must be greater than or equal to 0, got -1; pass "
        "num_workers=0 to run in this process, or N >= 1 for N worker processes.",
        0,
    ),
    (
        "mp_prefetch-options",
        lambda v: _mp_prefetch(per_worker_buffer_size=v),
        -1,
        ValueError,
        "mp_prefetch options per_worker_buffer_size must be greater than or equal to 0, got -1; "
        "pass grain.MultiprocessingOptions(num_workers=N, per_worker_buffer_size=M) with N >= 0 "
        "and M >= 0.",
        0,
    ),
    (
        "read_options",
        lambda v: grain.ReadOptions(num_threads=v),
        -1,
        ValueError,
        "num_threads must be non-negative, got -1; pass num_threads=N with N >= 0 (0 reads in "
        "the consuming thread, without reader threads).",
        0,
    ),
    (
        "limit-count",
        lambda v: grain.experimental.LimitIterDataset(_stream(), v),
        0,
        ValueError,
        "LimitIterDataset count must be an int >= 1, got 0; pass how many elements to keep (>= 1).",
        1,
    ),
    (
        "index-sampler-seed",
        lambda v: IndexSampler(5, shuffle=True, seed=v),
        -1,
        ValueError,
        "IndexSampler seed must be an int in [0, 2**32 - 1], got -1; pass an int in that range, "
        "e.g. seed % 2**32.",
        -1 % 2**32,
    ),
    (
        "index-sampler-seed-past-32-bits",
        lambda v: IndexSampler(5, shuffle=True, seed=v),
        2**32,
        ValueError,
        "IndexSampler seed must be an int in [0, 2**32 - 1], got 4294967296; pass an int in that "
        "range, e.g. seed % 2**32.",
        2**32 % 2**32,
    ),
    (
        "mix-zero-weight",
        lambda v: _mix(v),
        [1, 0],
        ValueError,
        "Must specify all non-zero proportions for mixing: every mix weight must be above 0, got "
        "[1, 0]; drop the datasets you do not want to read, or give each a weight above 0.",
        [1, 0.5],
    ),
    (
        "mix-negative-weight",
        lambda v: _mix(v),
        [1, -1],
        ValueError,
        "every mix weight must be above 0, got [1, -1]; drop the datasets you do not want to "
        "read, or give each a weight above 0.",
        [1, 1],
    ),
    (
        "repeat-epochs",
        lambda v: grain.MapDataset.range(3).repeat(v),
        0,
        ValueError,
        "num_epochs must be positive, but got 0; pass num_epochs >= 1, or None to repeat "
        "endlessly.",
        1,
    ),
    (
        "shard-count",
        lambda v: grain.ShardOptions(shard_index=0, shard_count=v),
        0,
        ValueError,
        "Number of shards must be a positive integer but got 0. Pass shard_count >= 1 (the "
        "number of hosts reading the data).",
        1,
    ),
]


@pytest.mark.parametrize(
    ("make", "bad", "error", "message", "suggested"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_message_states_one_rule_and_its_suggested_value_is_accepted(
    make, bad, error, message, suggested
):
    with pytest.raises(error) as caught:
        make(bad)
    assert str(caught.value) == message
    make(suggested)  # the value the message suggests goes through
