"""ReadOptions and MultiprocessingOptions: Grain's defaults, validation and warning."""

from __future__ import annotations

import logging

import pytest

import grainlite as grain
from grainlite.errors import GrainliteTypeError, GrainliteValueError


def test_read_options_default_to_grains_sixteen_threads_and_five_hundred_records():
    assert grain.ReadOptions() == grain.ReadOptions(num_threads=16, prefetch_buffer_size=500)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"num_threads": -1}, GrainliteValueError, "num_threads must be non-negative, got -1."),
        (
            {"prefetch_buffer_size": -2},
            GrainliteValueError,
            "prefetch_buffer_size must be non-negative, got -2.",
        ),
        (
            {"num_threads": 1.5},
            GrainliteTypeError,
            "num_threads must be an int, got 1.5 of type float; pass a non-negative integer.",
        ),
    ],
    ids=["negative-threads", "negative-buffer", "float-threads"],
)
def test_bad_read_options_are_rejected(kwargs, error, message):
    with pytest.raises(error) as caught:
        grain.ReadOptions(**kwargs)
    assert str(caught.value) == message


def test_a_buffer_smaller_than_the_thread_count_warns_with_the_fix(caplog):
    with caplog.at_level(logging.WARNING, logger="grainlite"):
        grain.ReadOptions(num_threads=10, prefetch_buffer_size=5)
    assert caplog.messages == [
        "prefetch_buffer_size=5 is smaller than num_threads=10: at most 5 threads can have work; "
        "raise prefetch_buffer_size to at least num_threads."
    ]


def test_a_zero_buffer_does_not_warn(caplog):
    with caplog.at_level(logging.WARNING, logger="grainlite"):
        grain.ReadOptions(num_threads=10, prefetch_buffer_size=0)
    assert caplog.messages == []


def test_multiprocessing_options_repr_is_grains():
    assert repr(grain.MultiprocessingOptions()) == (
        "MultiprocessingOptions(num_workers=0, per_worker_buffer_size=1, enable_profiling=False)"
    )
