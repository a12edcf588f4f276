"""Map -> Batch pipelines mapped in runs give what the element-by-element chain gives.

A pipeline ``Map|RandomMap -> Batch`` takes the run shortcut (:mod:`grainlite.loader.runs`); the
same pipeline with a Filter that keeps everything does not. Elements, states, failures and the
records the failures name must be the same.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import grainlite as grain
from grainlite.loader.runs import MappedRuns
from grainlite.loader.stages import build_chain


class Noisy(grain.RandomMapTransform):
    """The record plus a draw of its generator; fails on the records in ``bad``."""

    def __init__(self, bad: frozenset[int]) -> None:
        self.bad = bad

    def random_map(self, record: int, rng: np.random.Generator) -> np.ndarray:
        if record in self.bad:
            raise ValueError(f"record {record} is bad")
        return np.array([record, rng.integers(1 << 30)])


class Plain(grain.MapTransform):
    def __init__(self, bad: frozenset[int]) -> None:
        self.bad = bad

    def map(self, record: int) -> np.ndarray:
        if record in self.bad:
            raise ValueError(f"record {record} is bad")
        return np.array([record, record * 7])


class KeepAll(grain.FilterTransform):
    def filter(self, element: object) -> bool:
        return True


def outcomes(operations: list[object], records: int, workers: int, seed: int) -> list[object]:
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, records, 1),
        sampler=grain.IndexSampler(
            records, grain.NoSharding(), shuffle=True, seed=seed, num_epochs=1
        ),
        operations=operations,
        worker_count=workers,
    )
    seen: list[object] = []
    with iter(loader) as iterator:
        while True:
            try:
                element = next(iterator)
            except StopIteration:
                return seen
            except ValueError as error:
                notes = [n for n in error.__notes__ if "sampler index" in n]
                seen.append((str(error), notes))
            else:
                seen.append(element.tolist())
            seen.append(iterator.get_state())


@settings(max_examples=8, deadline=None)
@given(
    records=st.integers(1, 60),
    batch=st.integers(2, 9),
    bad=st.frozensets(st.integers(0, 59), max_size=4),
    workers=st.sampled_from([0, 2]),
    random=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_runs_give_the_elements_states_and_failures_of_the_chain(
    records, batch, bad, workers, random, seed
):
    transform = Noisy(bad) if random else Plain(bad)
    fast = outcomes([transform, grain.Batch(batch)], records, workers, seed)
    slow = outcomes([transform, KeepAll(), grain.Batch(batch)], records, workers, seed)
    assert fast == slow


def test_only_a_map_then_the_default_batch_takes_runs():
    def head(*operations):
        steps = grain.DataLoader(
            data_source=[0],
            sampler=grain.IndexSampler(1, grain.NoSharding()),
            operations=operations,
        )._pipeline.steps
        return build_chain(steps, 0)[0]

    assert MappedRuns.of(head(Plain(frozenset()), grain.Batch(2))) is not None
    assert MappedRuns.of(head(Noisy(frozenset()), grain.Batch(2))) is not None
    assert MappedRuns.of(head(Plain(frozenset()), KeepAll(), grain.Batch(2))) is None
    assert MappedRuns.of(head(Plain(frozenset()), grain.Batch(2, batch_fn=list))) is None
    assert MappedRuns.of(head(Plain(frozenset()))) is None
