"""The DataLoader's arguments, its iterator's lifecycle, and in-process reading."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import grainlite as grain
from grainlite.errors import GrainliteTypeError, GrainliteValueError, LoaderClosedError
from grainlite_tests.contracts import assert_resumes_at_every_step, to_plain


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


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"worker_count": -1},
            GrainliteValueError,
            "Worker count should be greater than or equal zero. Current worker_count is -1; pass 0 "
            "to run in this process or N >= 1 for N worker processes.",
        ),
        (
            {"worker_count": 1.0},
            GrainliteTypeError,
            "worker_count must be an int or None, got 1.0; pass 0 to run in this process or N >= 1 "
            "for N worker processes.",
        ),
        (
            {"worker_buffer_size": -1},
            GrainliteValueError,
            "Worker buffer size must be greater than or equal zero. Current worker_buffer_size is "
            "-1; pass N >= 1.",
        ),
        (
            {"read_options": {"num_threads": 1}},
            GrainliteTypeError,
            "read_options must be a ReadOptions, got {'num_threads': 1}.",
        ),
    ],
    ids=["negative-workers", "float-workers", "negative-buffer", "dict-read-options"],
)
def test_bad_arguments_are_rejected_with_the_rule_and_the_fix(kwargs, error, message):
    with pytest.raises(error) as caught:
        _loader(**kwargs)
    assert str(caught.value) == message


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

    with pytest.raises(GrainliteValueError, match="No shard options were provided"):
        grain.DataLoader(data_source=[10, 11, 12], sampler=Custom())
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


@pytest.mark.parametrize(
    "options",
    [
        grain.ReadOptions(0, 500),
        grain.ReadOptions(4, 0),
        grain.ReadOptions(1, 1),
        grain.ReadOptions(3, 7),
        grain.ReadOptions(16, 500),
    ],
    ids=["no-threads", "no-buffer", "one-thread", "odd-sizes", "defaults"],
)
def test_reads_give_the_same_output_for_any_read_options(options):
    sampler = _sampler(300, shuffle=True, seed=9, num_epochs=2)
    expected = list(_loader(300, sampler=sampler, read_options=grain.ReadOptions(0, 0)))
    assert list(_loader(300, sampler=sampler, read_options=options)) == expected
    assert len(expected) == 600


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
