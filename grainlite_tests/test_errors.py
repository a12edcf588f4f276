"""A user mistake on the DataLoader path raises the error type Grain 0.2.18 raises (ours may
subclass it, and is always a GrainliteError), so ``except`` clauses written for Grain still work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import grainlite as lite
from grainlite.errors import GrainliteError
from grainlite_tests.support.grain_peer import real_grain

pytestmark = pytest.mark.timeout(120)


def _sampler(g: Any, shard: Any = None, **kwargs: Any) -> Any:
    return g.IndexSampler(8, shard or g.NoSharding(), num_epochs=1, **kwargs)


def _loader(g: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("sampler", _sampler(g))
    return g.DataLoader(data_source=g.RangeDataSource(0, 8, 1), **kwargs)


class _SamplerWithoutSharding:
    """A custom sampler that carries no shard options: the DataLoader must be given some."""

    def __init__(self, g: Any) -> None:
        self._g = g

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> Any:
        return self._g.RecordMetadata(index=index, record_key=index, rng=None)


def _restore_into(g: Any, **kwargs: Any) -> None:
    saved = iter(_loader(g))
    next(saved)
    iter(_loader(g, **kwargs)).set_state(saved.get_state())


# Restoring with another worker_count is not a mistake here: grainlite restores it (every record
# of the remainder exactly once, test_elastic_restore.py) where Grain raises.
MISTAKES: dict[str, Callable[[Any], Any]] = {
    "zero-epochs": lambda g: g.IndexSampler(8, g.NoSharding(), num_epochs=0),
    "negative-record-count": lambda g: g.IndexSampler(-1, g.NoSharding(), num_epochs=1),
    "shuffle-without-seed": lambda g: _sampler(g, shuffle=True),
    "negative-seed": lambda g: _sampler(g, shuffle=True, seed=-1),
    "shard-index-past-count": lambda g: g.ShardOptions(shard_index=2, shard_count=2),
    "zero-shards": lambda g: g.ShardOptions(shard_index=0, shard_count=0),
    "negative-read-threads": lambda g: g.ReadOptions(num_threads=-1),
    "negative-worker-count": lambda g: _loader(g, worker_count=-1),
    "missing-shard-options": lambda g: _loader(g, sampler=_SamplerWithoutSharding(g)),
    "not-a-transform": lambda g: list(_loader(g, operations=[object()])),
    "batch-size-zero": lambda g: list(_loader(g, operations=[g.Batch(batch_size=0)])),
    "restore-with-another-sampler": lambda g: _restore_into(
        g, sampler=_sampler(g, shuffle=True, seed=1)
    ),
    "record-key-past-the-end": lambda g: g.RangeDataSource(0, 8, 1)[9],
    "no-sampler": lambda g: _loader(g, sampler=None),
    "state-that-is-not-json": lambda g: iter(_loader(g)).set_state(b"not json"),
}


def _error_of(mistake: Callable[[Any], Any], g: Any) -> BaseException:
    try:
        mistake(g)
    except Exception as error:
        return error
    raise AssertionError("no error raised")


def _assert_same_type(mistake: Callable[[Any], Any]) -> None:
    theirs, ours = _error_of(mistake, real_grain), _error_of(mistake, lite)
    assert isinstance(ours, type(theirs)), f"Grain: {theirs!r}; grainlite: {ours!r}"
    assert isinstance(ours, GrainliteError), repr(ours)


@pytest.mark.parametrize("mistake", list(MISTAKES.values()), ids=list(MISTAKES))
def test_a_mistake_raises_grains_error_type(mistake):
    _assert_same_type(mistake)
