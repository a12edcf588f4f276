"""An exception raised in a worker carries the worker's own frames in its traceback (as Grain's
does): ``traceback.extract_tb`` names the user's nested functions that raised, in order."""

from __future__ import annotations

import traceback

import pytest

import grainlite as grain

pytestmark = pytest.mark.timeout(120)


class Nested(grain.transforms.Map):
    def outer_step(self, x: int) -> int:
        return self.inner_step(x)

    def inner_step(self, x: int) -> int:
        if x == 3:
            raise ValueError("no 3 here")
        return x

    def map(self, x: int) -> int:
        return self.outer_step(x)


def _names(tb: object) -> list[str]:
    return [frame.name for frame in traceback.extract_tb(tb)]  # type: ignore[arg-type]


def _first_error(workers: int) -> ValueError:
    options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=1)
    ds = grain.MapDataset.range(8).to_iter_dataset().map(Nested()).mp_prefetch(options)
    with iter(ds) as iterator:
        try:
            for _ in range(8):
                next(iterator)
        except ValueError as error:
            return error
    raise AssertionError("no ValueError")


def test_a_worker_error_under_mp_prefetch_has_the_users_nested_frames_in_its_traceback():
    error = _first_error(2)
    names = _names(error.__traceback__)
    assert names[-3:] == ["map", "outer_step", "inner_step"]
    printed = "".join(traceback.format_exception(error))
    assert 'raise ValueError("no 3 here")' in printed  # the source line, read from this file
    assert printed.count(", in inner_step") == 1  # once: no second copy in a cause


def test_with_remove_frames_the_cause_also_carries_the_worker_frames():
    grain.config.update("py_traceback_filtering", "remove_frames")
    try:
        error = _first_error(1)
    finally:
        grain.config.update("py_traceback_filtering", "auto")
    assert _names(error.__traceback__)[-1] == "inner_step"
    assert error.__cause__ is not None
    assert _names(error.__cause__.__traceback__) == ["map", "outer_step", "inner_step"]
