"""The DataLoader's arguments, its iterator's lifecycle, and in-process reading."""

from __future__ import annotations

import itertools

import absl.flags
import grain.python as real_grain
import numpy as np
import pytest

import grainlite as grain
from grainlite.errors import GrainliteTypeError, GrainliteValueError, LoaderClosedError
from grainlite_tests.support.contracts import (
    assert_resumes_at_every_step,
    assert_same_output_for_any_read_options,
    to_plain,
)

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed


def _sampler(n=8, **kwargs):
    kwargs.setdefault("num_epochs", 1)
    return grain.IndexSampler(n, grain.NoSharding(), **kwargs)


def _loader(n=8, **kwargs):
    kwargs.setdefault("sampler", _sampler(n))
    return grain.DataLoader(data_source=grain.RangeDataSource(0, n, 1), **kwargs)


class Double(grain.MapTransform):
    def map(self, x):
        return x * 2


def test_every_argument_is_keyword_only():
    with pytest.raises(TypeError):
        grain.DataLoader(grain.RangeDataSource(0, 8, 1), _sampler())  # type: ignore[misc]


WORKER_COUNT_FIX = (
    "pass 0 to run in this process, N >= 1 for N worker processes or None for one per usable CPU."
)
BUFFER_FIX = (
    "pass worker_buffer_size=N with N >= 0 to keep up to N finished elements ready per worker "
    "(0 works as 1)."
)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"worker_count": -1},
            GrainliteValueError,
            f"Worker count should be greater than or equal zero. Current worker_count is -1; "
            f"{WORKER_COUNT_FIX}",
        ),
        (
            {"worker_count": 1.0},
            GrainliteTypeError,
            f"worker_count must be an int or None, got float 1.0; {WORKER_COUNT_FIX}",
        ),
        (
            {"worker_buffer_size": -1},
            GrainliteValueError,
            "Worker buffer size must be greater than or equal zero. Current worker_buffer_size is "
            f"-1; {BUFFER_FIX}",
        ),
        (
            {"worker_buffer_size": "2"},
            GrainliteTypeError,
            f"worker_buffer_size must be an int, got str '2'; {BUFFER_FIX}",
        ),
        (
            {"read_options": {"num_threads": 1, "prefetch_buffer_size": 8}},
            GrainliteTypeError,
            "read_options must be a ReadOptions or None, got dict "
            "{'num_threads': 1, 'prefetch_buffer_size': 8}; pass "
            "grain.ReadOptions(**read_options), here "
            "grain.ReadOptions(num_threads=1, prefetch_buffer_size=8), or None for the defaults.",
        ),
        (
            {"read_options": (4, 100)},
            GrainliteTypeError,
            "read_options must be a ReadOptions or None, got tuple (4, 100); pass "
            "grain.ReadOptions(num_threads=..., prefetch_buffer_size=...), or None for the "
            "defaults.",
        ),
        (
            {"shard_options": (0, 1)},
            GrainliteTypeError,
            "shard_options must be a ShardOptions, got tuple (0, 1); pass "
            "grain.ShardOptions(shard_index=i, shard_count=n), grain.NoSharding() or "
            "grain.ShardByJaxProcess(), or None to use the sampler's.",
        ),
    ],
    ids=[
        "negative-workers",
        "float-workers",
        "negative-buffer",
        "string-buffer",
        "dict-read-options",
        "tuple-read-options",
        "tuple-shard-options",
    ],
)
def test_bad_arguments_are_rejected_with_the_rule_and_the_fix(kwargs, error, message):
    with pytest.raises(error) as caught:
        _loader(**kwargs)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "kwargs", [{"worker_count": -1}, {"worker_buffer_size": -1}], ids=["workers", "buffer"]
)
def test_negative_counts_raise_value_error_as_grain_does(kwargs):
    sampler = real_grain.IndexSampler(8, real_grain.NoSharding(), num_epochs=1)
    with pytest.raises(ValueError):
        real_grain.DataLoader(data_source=list(range(8)), sampler=sampler, **kwargs)
    with pytest.raises(ValueError):
        _loader(**kwargs)


def test_a_zero_worker_buffer_is_accepted_as_in_grain_and_works_as_one():
    loader = _loader(12, worker_count=2, worker_buffer_size=0)
    assert loader.multiprocessing_options == grain.MultiprocessingOptions(
        num_workers=2, per_worker_buffer_size=0
    )
    assert list(loader) == list(range(12))


def test_a_source_that_is_not_random_access_is_rejected():
    with pytest.raises(GrainliteTypeError) as caught:
        grain.DataLoader(data_source=iter([1, 2]), sampler=_sampler(2))
    assert str(caught.value) == (
        "data_source must be random-access (define __len__ and __getitem__), got list_iterator; "
        "wrap the data in a list, an ArrayRecordDataSource or an InMemoryDataSource."
    )


def test_a_custom_sampler_without_shard_options_needs_them_passed():
    class Custom:
        def __getitem__(self, index):
            if index >= 3:
                raise IndexError(index)
            return grain.RecordMetadata(index=index, record_key=2 - index)

    with pytest.raises(GrainliteValueError) as caught:
        grain.DataLoader(data_source=[10, 11, 12], sampler=Custom())
    assert str(caught.value) == (
        "No shard options were provided to the DataLoader. Please pass shard options to the "
        "DataLoader: the sampler (Custom) carries no sharding (it has no _shard_options "
        "attribute), so pass shard_options=grain.NoSharding() (one host) or "
        "grain.ShardByJaxProcess() (one shard per JAX process)."
    )
    loader = grain.DataLoader(
        data_source=[10, 11, 12], sampler=Custom(), shard_options=grain.NoSharding()
    )
    assert list(loader) == [12, 11, 10]  # no __len__: the stream ends at the first IndexError


def test_iterating_twice_starts_over():
    loader = _loader(operations=[Double()])
    assert list(loader) == list(loader) == [x * 2 for x in range(8)]


def test_a_closed_iterator_says_how_to_go_on():
    iterator = iter(_loader())
    next(iterator)
    iterator.close()
    iterator.close()  # idempotent
    with pytest.raises(LoaderClosedError) as caught:
        next(iterator)
    assert str(caught.value) == (
        "This iterator was closed; call iter(loader) for a new one, or restore a saved state "
        "into a new iterator with set_state()."
    )


def test_a_context_manager_closes_the_iterator():
    with iter(_loader()) as iterator:
        assert next(iterator) == 0
    with pytest.raises(LoaderClosedError):
        next(iterator)


class DropMultiplesOfFive(grain.FilterTransform):
    def filter(self, x):
        return x % 5 != 0


def test_reads_give_the_same_output_for_any_read_options_reader_threads_included():
    def make_loader(source, read_options):
        return grain.DataLoader(
            data_source=source,
            sampler=_sampler(len(source), shuffle=True, seed=9, num_epochs=2),
            operations=[DropMultiplesOfFive(), grain.Batch(7)],
            read_options=read_options,
        )

    assert_same_output_for_any_read_options(make_loader)


def test_a_zero_buffer_with_threads_still_reads_everything_unlike_grain_0_2_12():
    assert list(
        _loader(5, read_options=grain.ReadOptions(num_threads=4, prefetch_buffer_size=0))
    ) == [0, 1, 2, 3, 4]


def test_without_num_epochs_the_stream_never_ends():
    loader = _loader(3, sampler=grain.IndexSampler(3, grain.NoSharding(), num_epochs=None))
    with iter(loader) as iterator:
        assert list(itertools.islice(iterator, 10)) == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]


def test_record_keys_past_the_end_of_the_source_wrap_as_in_grain():
    loader = grain.DataLoader(data_source=[7, 8], sampler=_sampler(5))
    assert list(loader) == [7, 8, 7, 8, 7]


class Fails(grain.MapTransform):
    def map(self, x):
        raise ZeroDivisionError("no")


def test_an_in_process_transform_error_propagates_unchanged_with_a_note_naming_it():
    with pytest.raises(ZeroDivisionError) as caught:
        list(_loader(operations=[Fails()]))
    assert caught.value.args == ("no",)
    assert caught.value.__notes__[0].startswith("grainlite: raised by the transform")


def test_a_random_map_after_a_batch_gets_the_last_records_generator():
    class Draw(grain.RandomMapTransform):
        def random_map(self, x, rng):
            return float(rng.random())

    loader = _loader(4, sampler=_sampler(4, seed=7), operations=[grain.Batch(2), Draw()])
    expected = [np.random.Generator(np.random.Philox(key=7 + i)).random() for i in (1, 3)]
    assert list(loader) == expected


def test_two_random_maps_share_one_advancing_generator_per_record():
    class Draw(grain.RandomMapTransform):
        def random_map(self, x, rng):
            return [*x, float(rng.random())] if isinstance(x, list) else [float(rng.random())]

    loader = _loader(2, sampler=_sampler(2, seed=1), operations=[Draw(), Draw()])
    for index, pair in enumerate(loader):
        rng = np.random.Generator(np.random.Philox(key=1 + index))
        assert pair == [rng.random(), rng.random()]


def test_load_builds_a_shuffled_batched_loader_like_grain():
    loader = grain.load(list(range(10)), num_epochs=1, shuffle=True, seed=0, batch_size=4)
    batches = [b.tolist() for b in loader]
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(x for b in batches for x in b) == list(range(10))


def test_restore_resumes_at_the_next_element_in_process():
    class Keep(grain.FilterTransform):
        def filter(self, x):
            return x % 5 != 1

    sampler = _sampler(23, shuffle=True, seed=3, num_epochs=2)
    assert_resumes_at_every_step(
        lambda: _loader(23, sampler=sampler, operations=[Double(), Keep(), grain.Batch(3)])
    )


def test_elements_equal_between_workers_and_in_process_for_one_to_one_pipelines():
    sampler = _sampler(50, shuffle=True, seed=2)
    single = [to_plain(x) for x in _loader(50, sampler=sampler, operations=[Double()])]
    with iter(_loader(50, sampler=sampler, operations=[Double()], worker_count=2)) as it:
        assert [to_plain(x) for x in it] == single


@pytest.mark.parametrize("worker_count", [0, 2])
def test_a_three_host_evaluation_over_two_records_gives_the_third_host_an_empty_stream(
    worker_count, caplog
):
    def evaluate(g, host):
        sampler = g.IndexSampler(2, g.ShardOptions(host, 3), shuffle=False, num_epochs=1)
        loader = g.DataLoader(
            data_source=g.RangeDataSource(0, 2, 1), sampler=sampler, worker_count=worker_count
        )
        return loader, list(loader)

    with caplog.at_level("WARNING", logger="grainlite"):
        loaders, streams = zip(*(evaluate(grain, host) for host in range(3)))
    assert list(streams) == [[0], [1], []]  # each host reads its remainder; the third has none
    assert len(loaders[2]) == 0
    warned = [r.getMessage() for r in caplog.records if "gets no records" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("IndexSampler: shard 2 of 3 gets no records")
    assert evaluate(real_grain, 2)[1] == []  # Grain's third host: empty too
