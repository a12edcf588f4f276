"""ReadOptions and MultiprocessingOptions: Grain's defaults, validation and warning; the one read
policy both APIs' readers follow."""

from __future__ import annotations

import logging
import threading

import absl.flags
import grain.python as real_grain
import numpy as np
import pytest

import grainlite as grain
from grainlite.dataset import read_ahead, reading_process
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.loader import record_reader
from grainlite.options import READ_POLICY, ReadPolicy

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


WORKERS_FIX = "pass num_workers=0 to run in this process, or N >= 1 for N worker processes."
PER_WORKER_FIX = (
    "pass per_worker_buffer_size=N with N >= 0 to keep up to N finished elements ready per "
    "worker (0 works as 1)."
)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"num_workers": -3}, GrainliteValueError,
         f"MultiprocessingOptions num_workers must be greater than or equal to 0, got -3; "
         f"{WORKERS_FIX}"),
        ({"num_workers": 1.5}, GrainliteTypeError,
         f"MultiprocessingOptions num_workers must be an int, got float 1.5; {WORKERS_FIX}"),
        ({"num_workers": True}, GrainliteTypeError,
         f"MultiprocessingOptions num_workers must be an int, got bool True; {WORKERS_FIX}"),
        ({"per_worker_buffer_size": "x"}, GrainliteTypeError,
         f"MultiprocessingOptions per_worker_buffer_size must be an int, got str 'x'; "
         f"{PER_WORKER_FIX}"),
        ({"per_worker_buffer_size": -1}, GrainliteValueError,
         f"MultiprocessingOptions per_worker_buffer_size must be greater than or equal to 0, got "
         f"-1; {PER_WORKER_FIX}"),
    ],
)  # fmt: skip
def test_bad_multiprocessing_options_are_refused_where_they_are_made(kwargs, error, message):
    with pytest.raises(error) as raised:
        grain.MultiprocessingOptions(**kwargs)
    assert str(raised.value) == message


def test_zero_workers_and_a_zero_buffer_are_valid_multiprocessing_options_as_in_grain():
    options = grain.MultiprocessingOptions(num_workers=0, per_worker_buffer_size=0)
    assert (options.num_workers, options.per_worker_buffer_size) == (0, 0)
    real_grain.MultiprocessingOptions(num_workers=0, per_worker_buffer_size=0)


def test_numpy_integers_are_counts_everywhere_and_become_python_ints():
    options = grain.MultiprocessingOptions(
        num_workers=np.int64(2), per_worker_buffer_size=np.uint8(3)
    )
    read = grain.ReadOptions(num_threads=np.int32(4), prefetch_buffer_size=np.int64(8))
    sampler = grain.IndexSampler(4, grain.NoSharding(), num_epochs=np.int64(2))
    counts = [options.num_workers, options.per_worker_buffer_size, read.num_threads,
              read.prefetch_buffer_size]  # fmt: skip
    assert counts == [2, 3, 4, 8] and all(type(count) is int for count in counts)
    assert len(sampler) == 8
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 4, 1),
        sampler=sampler,
        worker_count=np.int64(0),
        worker_buffer_size=np.int64(2),
    )
    assert list(loader) == [0, 1, 2, 3, 0, 1, 2, 3]


def test_a_huge_bad_option_is_quoted_in_at_most_about_two_hundred_characters():
    with pytest.raises(GrainliteTypeError) as raised:
        grain.MultiprocessingOptions(num_workers="9" * 100_000)
    assert len(str(raised.value)) < 450
    assert "(100002 characters)" in str(raised.value)


def test_the_read_policy_takes_medians_so_one_stalled_read_does_not_move_fast_reads_to_threads():
    fast, slow = READ_POLICY.slow_read_s / 10, READ_POLICY.slow_read_s * 10
    large = READ_POLICY.read_share * 2
    assert not READ_POLICY.moves_to_threads([fast] * 4 + [1.0], [large] * 5)
    assert READ_POLICY.moves_to_threads([slow] * 4 + [fast], [large] * 4 + [0.0])
    # Slow reads that are a small part of the work (transforms dominate) stay in the consumer.
    assert not READ_POLICY.moves_to_threads([slow] * 5, [READ_POLICY.read_share / 2] * 5)


class _ReadBy:
    """Cheap records that remember which threads read them."""

    def __init__(self, size: int) -> None:
        self.size, self.threads = size, set()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        self.threads.add(threading.current_thread().name)
        return key


@pytest.mark.cpu_timing  # times this process's reads
def test_both_apis_move_reads_to_threads_by_the_one_read_policy(monkeypatch):
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=64)

    def readers() -> tuple[set[str], set[str]]:
        loader_source, dataset_source = _ReadBy(3000), _ReadBy(3000)
        loader = grain.DataLoader(
            data_source=loader_source,
            sampler=grain.IndexSampler(3000, grain.NoSharding(), False, 1),
            read_options=options,
        )
        assert list(loader) == list(range(3000))
        dataset = grain.MapDataset.source(dataset_source).to_iter_dataset(options)
        with iter(dataset) as iterator:
            assert list(iterator) == list(range(3000))
        return loader_source.threads, dataset_source.threads

    monkeypatch.setattr(reading_process, "usable_cpu_count", lambda: 8)  # spare CPUs for threads
    consumer = {threading.current_thread().name}
    assert readers() == (consumer, consumer)  # cheap reads: no thread, by the policy
    every_read_is_slow = ReadPolicy(slow_read_s=0.0, read_share=0.0)
    monkeypatch.setattr(record_reader, "READ_POLICY", every_read_is_slow)
    monkeypatch.setattr(read_ahead, "READ_POLICY", every_read_is_slow)
    by_loader, by_dataset = readers()
    assert any(name.startswith("grainlite-reader") for name in by_loader), by_loader
    assert any(name.startswith("grainlite-to-iter") for name in by_dataset), by_dataset
