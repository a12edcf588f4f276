"""The base classes: ``pipe``, ``parents``, iteration of a ``MapDataset``, ``close`` cascading
and the context manager, and users' own subclasses working wherever built-in nodes do."""

from __future__ import annotations

import grain
import pytest

import grainlite.dataset as gd
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step


def _user_classes(lib):
    class Squares(lib.MapDataset):
        """A user's source: ``len`` and ``[]`` only, no ``_getitems``."""

        def __init__(self, n):
            super().__init__()
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, index):
            if isinstance(index, slice):
                return self.slice(index)
            return (index % self.n) ** 2

    class CountUp(lib.DatasetIterator):
        def __init__(self, stop):
            super().__init__()
            self.i, self.stop, self.closed = 0, stop, False

        def __next__(self):
            if self.i >= self.stop:
                raise StopIteration
            self.i += 1
            return self.i - 1

        def get_state(self):
            return {"i": self.i}

        def set_state(self, state):
            self.i = state["i"]

        def close(self):
            self.closed = True

    class Counter(lib.IterDataset):
        """A user's stream source with its own iterator and state."""

        def __init__(self, stop):
            super().__init__()
            self.stop = stop

        def __iter__(self):
            return CountUp(self.stop)

    return Squares, Counter


def _user_pipelines(lib):
    squares, counter = _user_classes(lib)
    return {
        "map-dataset": squares(9).map(lambda x: x + 1).shuffle(3).filter(lambda x: x % 2),
        "map-dataset-to-iter": squares(9).seed(1).random_map(lambda x, r: (x, int(r.integers(9)))),
        "iter-dataset": counter(7).map(lambda x: x * 3).filter(lambda x: x % 2 == 0),
        "iter-dataset-indexed": counter(7).seed(2).random_map(lambda x, r: int(r.integers(99))),
    }


@pytest.mark.parametrize("name", list(_user_pipelines(grain)))
def test_users_subclasses_under_built_in_nodes_match_grain(name):
    ours, theirs = _user_pipelines(gd)[name], _user_pipelines(grain)[name]
    if isinstance(theirs, grain.MapDataset):
        assert [ours[i] for i in range(18)] == [theirs[i] for i in range(18)]
        ours, theirs = ours.to_iter_dataset(), theirs.to_iter_dataset()
    a, b = iter(ours), iter(theirs)
    assert [(x, a.get_state()) for x in a] == [(x, b.get_state()) for x in b]


@pytest.mark.parametrize("name", ["iter-dataset", "iter-dataset-indexed"])
def test_users_iterators_under_built_in_nodes_resume_at_every_step(name):
    ds = _user_pipelines(gd)[name]
    assert_dataset_resumes_at_every_step(lambda: iter(ds))


def test_close_cascades_to_a_users_iterator():
    _, counter = _user_classes(gd)
    iterator = iter(counter(5).map(lambda x: x).filter(bool))
    user = iterator._parent._parent
    iterator.close()
    assert user.closed


def test_context_manager_closes():
    _, counter = _user_classes(gd)
    with iter(counter(5).map(lambda x: x)) as iterator:
        next(iterator)
    assert iterator._parent.closed


def test_iterating_a_map_dataset_goes_through_to_iter_dataset_and_skips_holes():
    ds = MapDataset.range(6).filter(lambda x: x % 2)
    assert list(ds) == list(grain.MapDataset.range(6).filter(lambda x: x % 2)) == [1, 3, 5]
    assert type(iter(ds)).__name__ == "PrefetchDatasetIterator"


def test_pipe_calls_the_function_with_the_dataset_and_arguments():
    def add(ds, k, *, times=1):
        return ds.map(lambda x: (x + k) * times)

    assert list(MapDataset.range(3).pipe(add, 1, times=2)) == [2, 4, 6]
    assert list(MapDataset.range(3).to_iter_dataset().pipe(add, 1)) == [1, 2, 3]


def test_parents_are_the_inputs_of_each_node():
    source = MapDataset.range(3)
    mapped = source.map(str)
    stream = mapped.to_iter_dataset()
    assert list(source.parents) == [] and list(mapped.parents) == [source]
    assert list(stream.parents) == [mapped]


def test_parent_of_a_node_without_exactly_one_parent_is_a_value_error():
    with pytest.raises(ValueError, match="RangeMapDataset has 0 parents"):
        _ = MapDataset.range(3)._parent


def test_base_classes_are_abstract():
    for cls in (MapDataset, IterDataset, DatasetIterator):
        with pytest.raises(TypeError):
            cls()


def test_pipelines_and_iterators_mid_stream_survive_cloudpickle():
    import pickle

    import cloudpickle

    ds = (
        MapDataset.range(20)
        .seed(3)
        .shuffle()
        .random_map(lambda x, r: (x, int(r.integers(9))))
        .filter(lambda e: e[0] % 2)[2:15]
        .repeat(2)
        .to_iter_dataset()
        .map_with_index(lambda i, x: (i, x))
    )
    iterator = iter(ds)
    for _ in range(3):
        next(iterator)
    assert list(pickle.loads(cloudpickle.dumps(iterator))) == list(iterator)
    assert list(pickle.loads(cloudpickle.dumps(ds))) == list(ds)


class _GivesAPlainIterator(IterDataset):
    """A user's stream whose ``__iter__`` returns a plain Python iterator, not a DatasetIterator."""

    def __init__(self, values: list[int], as_generator: bool) -> None:
        super().__init__()
        self._values = values
        self._as_generator = as_generator

    def __iter__(self):  # type: ignore[override]
        if self._as_generator:
            return (v for v in self._values)
        return iter(self._values)


@pytest.mark.parametrize("as_generator", [False, True], ids=["iterator", "generator"])
def test_a_plain_iterator_under_map_and_filter_gives_every_element_once(as_generator):
    source = _GivesAPlainIterator([1, 2, 3, 4], as_generator)
    assert list(source.map(lambda x: x * 10)) == [10, 20, 30, 40]
    assert list(source.filter(lambda x: x % 2 == 0)) == [2, 4]
