"""A MaxText-style input pipeline, written once against Grain's API and run unchanged under
``import grainlite as grain`` and under ``import grain``: documents → shuffle → map (tokenize,
truncate, shift) → ``FirstFitPackIterDataset`` → ``batch`` → ``mp_prefetch``. The two give the same
batches and the same checkpoints, a checkpoint of either restores in the other, and grainlite's
pipeline resumes at every step."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import absl.flags
import grain as real_grain
import pytest

import grainlite
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step
from grainlite_tests.support.llm_pipeline import BATCH_SIZE, MAX_LENGTH, pipeline
from grainlite_tests.support.packing_data import run

pytestmark = pytest.mark.timeout(180)
absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18's mp_prefetch reads absl flags (its bug #1355)


def _run_closing(lib: ModuleType, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    iterator = iter(pipeline(lib, **kwargs))
    try:
        return run(iterator)
    finally:
        iterator.close()


@pytest.fixture(scope="module")
def grain_run() -> tuple[list[Any], list[Any]]:
    """Grain's batches and the state before each (one run, shared by the tests below)."""
    return _run_closing(real_grain)


def test_the_same_pipeline_gives_grains_batches_and_checkpoints(grain_run):
    batches, states = _run_closing(grainlite)
    assert len(batches) >= 4
    assert (batches, states) == grain_run
    batch = dict(batches[0]["dict"])
    assert batch["inputs"][2] == (BATCH_SIZE, MAX_LENGTH)
    assert batch["inputs_segment_ids"][1] == "<i4"


@pytest.mark.parametrize("step", [1, 3])
def test_a_grain_checkpoint_restores_in_grainlite(grain_run, step):
    batches, states = grain_run
    ours = iter(pipeline(grainlite))
    try:
        ours.set_state(states[step])
        assert run(ours)[0] == batches[step:]
    finally:
        ours.close()


@pytest.mark.parametrize("step", [2])
def test_a_grainlite_checkpoint_restores_in_grain_in_process(step):
    # In-process (workers=0): Grain's worker processes import JAX, too slow to start twice here;
    # the states under mp_prefetch are compared above.
    batches, states = _run_closing(grainlite, workers=0)
    assert (batches, states) == _run_closing(real_grain, workers=0)
    theirs = iter(pipeline(real_grain, workers=0))
    theirs.set_state(states[step])
    assert run(theirs)[0] == batches[step:]


@pytest.mark.parametrize("workers", [0, 2])
def test_grainlites_pipeline_resumes_at_every_step_in_process_and_under_mp_prefetch(workers):
    # Under mp_prefetch every restore starts worker processes: a shorter stream and one step.
    count, steps = (90, None) if workers == 0 else (20, [2])

    def make() -> Any:
        return iter(pipeline(grainlite, workers=workers, count=count))

    assert_dataset_resumes_at_every_step(make, steps=steps)
