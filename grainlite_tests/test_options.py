"""ReadOptions and MultiprocessingOptions: Grain's defaults, validation and warning."""

from __future__ import annotations

import logging

import absl.flags
import grain.python as real_grain
import pytest

import grainlite as grain
from grainlite.errors import GrainliteTypeError, GrainliteValueError

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed


def test_read_options_default_to_grains_sixteen_threads_and_five_hundred_records():
    assert grain.ReadOptions() == grain.ReadOptions(num_threads=16, prefetch_buffer_size=500)


NO_THREADS = "(0 reads in the consuming thread, without reader threads)."


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"num_threads": -1},
            GrainliteValueError,
            "num_threads must be non-negative, got -1; pass num_threads=N with N >= 0 "
            f"{NO_THREADS}",
        ),
        (
            {"prefetch_buffer_size": -2},
            GrainliteValueError,
            "prefetch_buffer_size must be non-negative, got -2; pass prefetch_buffer_size=N with "
            f"N >= 0 {NO_THREADS}",
        ),
        (
            {"num_threads": 1.5},
            GrainliteTypeError,
            "ReadOptions.num_threads must be an int, got float 1.5; pass num_threads=N with N >= 0 "
            f"{NO_THREADS}",
        ),
        (
            {"prefetch_buffer_size": "8"},
            GrainliteTypeError,
            "ReadOptions.prefetch_buffer_size must be an int, got str '8'; pass "
            f"prefetch_buffer_size=N with N >= 0 {NO_THREADS}",
        ),
    ],
    ids=["negative-threads", "negative-buffer", "float-threads", "string-buffer"],
)
def test_bad_read_options_name_the_value_the_rule_and_the_fix(kwargs, error, message):
    with pytest.raises(error) as caught:
        grain.ReadOptions(**kwargs)
    assert str(caught.value) == message


@pytest.mark.parametrize("name", ["num_threads", "prefetch_buffer_size"])
def test_negative_read_options_start_with_grains_value_error_text(name):
    with pytest.raises(ValueError) as grains:
        real_grain.ReadOptions(**{name: -1})
    with pytest.raises(ValueError) as ours:
        grain.ReadOptions(**{name: -1})
    assert str(ours.value).startswith(str(grains.value) + ";")


def test_zero_threads_or_zero_buffer_are_accepted_and_read_synchronously():
    assert grain.ReadOptions(num_threads=0).synchronous
    assert grain.ReadOptions(prefetch_buffer_size=0).synchronous
    assert not grain.ReadOptions(num_threads=1, prefetch_buffer_size=1).synchronous


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
