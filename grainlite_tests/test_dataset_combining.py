"""``mix``, ``concatenate`` and ``select_from_datasets`` against the installed grain: integer
proportions, lengths, every index (past the end and negative too), the iterator's states at every
step, restores both ways, stop rules and errors."""

from __future__ import annotations

import json
import random
import sys

import cloudpickle
import grain
import numpy as np
import pytest

from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.mix_selection import MixSelection, integer_proportions
from grainlite.transforms.selection import DatasetSelectionMap
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, run_with_states

OFFSET = 1_000_000  # dataset k holds k * OFFSET + i, so an element names its dataset and index

# Weights whose integer proportions depend on float rounding (0.67 / 0.67 * 100 is not 100 in
# Grain's arithmetic), plus the everyday ones.
TRICKY_WEIGHTS = [
    [1, 2],
    [0.3, 0.7],
    [0.67, 0.781158454128119],
    [0.3, 0.2, 4],
    [0.06, 3, 2, 0.77],
    [0.5911334385459631, 0.85],
    [0.1, 0.2, 0.3, 0.4],
    [3, 1, 1],
    [5],
]


def _random_weight_cases(seed, count):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        k = rng.randint(1, 4)
        choices = (
            lambda: rng.random() + 0.01,
            lambda: rng.randint(1, 9),
            lambda: round(rng.random(), 2) + 0.01,
        )
        cases.append([rng.choice(choices)() for _ in range(k)])
    return cases


def _inputs(module, lengths):
    return [module.MapDataset.range(k * OFFSET, k * OFFSET + n) for k, n in enumerate(lengths)]


@pytest.mark.parametrize("weights", TRICKY_WEIGHTS, ids=[str(w) for w in TRICKY_WEIGHTS])
def test_integer_proportions_match_the_ones_grain_reports(weights):
    theirs = str(grain.IterDataset.mix(_inputs(grain, [3] * len(weights)), weights))
    assert theirs.endswith(f"proportions={list(integer_proportions(weights, len(weights)))})")


@pytest.mark.parametrize("weights", TRICKY_WEIGHTS, ids=[str(w) for w in TRICKY_WEIGHTS])
def test_map_mix_matches_grain_at_every_index_of_several_periods(weights):
    lengths = [400_000 + 1000 * k for k in range(len(weights))]
    ours = MapDataset.mix(_inputs(grainlite_module, lengths), weights)
    theirs = grain.MapDataset.mix(_inputs(grain, lengths), weights)
    assert len(ours) == len(theirs)
    period = MixSelection(integer_proportions(weights, len(weights))).period
    indices = [*range(-2 * period - 3, 2 * period + 3), 10**7 + 11, -(10**7) - 7]
    expected = [theirs[i] for i in indices]
    assert [ours[i] for i in indices] == expected
    assert ours._getitems(indices) == expected


@pytest.mark.parametrize("seed", range(4))
def test_map_mix_matches_grain_in_length_and_elements_for_random_weights_and_lengths(seed):
    rng = random.Random(seed)
    for weights in _random_weight_cases(seed, 25):
        lengths = [rng.randint(1, 300) for _ in weights]
        ours = MapDataset.mix(_inputs(grainlite_module, lengths), weights)
        theirs = grain.MapDataset.mix(_inputs(grain, lengths), weights)
        assert len(ours) == len(theirs), (weights, lengths)
        indices = list(range(-len(theirs) - 5, 2 * len(theirs) + 5))
        expected = [theirs[i] for i in indices]
        assert ours._getitems(indices) == expected, (weights, lengths)
        assert [ours[i] for i in indices[:: max(1, len(indices) // 50)]] == expected[
            :: max(1, len(indices) // 50)
        ]


class _GrainliteModule:
    MapDataset = MapDataset
    IterDataset = IterDataset


grainlite_module = _GrainliteModule


class RecordingReads(MapDataset):
    """A user's MapDataset that records its block reads (and counts single reads)."""

    def __init__(self, start, size):
        super().__init__()
        self.start, self.size, self.block_calls, self.single_reads = start, size, [], 0

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        self.single_reads += 1
        return self.start + index % self.size

    def _getitems(self, indices):
        self.block_calls.append(list(indices))
        return [self.start + i % self.size for i in indices]


@pytest.mark.parametrize(
    "combine",
    [
        lambda inputs: MapDataset.mix(inputs, [1, 2]),
        lambda inputs: MapDataset.concatenate(inputs),
    ],
    ids=["mix", "concatenate"],
)
def test_block_reads_read_each_input_with_one_block_read(combine):
    inputs = [RecordingReads(0, 5), RecordingReads(100, 7)]
    combined = combine(inputs)
    values = combined._getitems(list(range(len(combined))))
    assert [len(recorder.block_calls) for recorder in inputs] == [1, 1]
    assert sum(len(recorder.block_calls[0]) for recorder in inputs) == len(combined)
    assert [recorder.single_reads for recorder in inputs] == [0, 0]
    assert values == [combined[i] for i in range(len(combined))]


@pytest.mark.parametrize(
    "datasets, weights, error, message",
    [
        (
            [],
            None,
            ValueError,
            "MapDataset.mix got no datasets; pass at least one MapDataset to mix.",
        ),
        (
            [MapDataset.range(3), MapDataset.range(0)],
            None,
            ValueError,
            "All datasets must have positive length for mixing, but dataset(s) at index 1 "
            "(RangeMapDataset(start=0, stop=0, step=1)) have length 0. Leave empty datasets out "
            "of the mix.",
        ),
        (
            [MapDataset.range(3), MapDataset.range(3)],
            [1, 0],
            ValueError,
            "Must specify all non-zero proportions for mixing: every mix weight must be above 0, "
            "got [1, 0]; drop the datasets you do not want to read, or give each a weight above "
            "0.",
        ),
        (
            [MapDataset.range(3), MapDataset.range(3)],
            [1, -2],
            ValueError,
            "every mix weight must be above 0, got [1, -2]; drop the datasets you do not want to "
            "read, or give each a weight above 0.",
        ),
        (
            [MapDataset.range(3)],
            [1, 2],
            ValueError,
            "mix got 2 weights for 1 datasets (weights=[1, 2]); pass one weight per dataset, or "
            "weights=None to mix them equally.",
        ),
        (
            [MapDataset.range(3), MapDataset.range(3)],
            ["a", "b"],
            TypeError,
            "mix weights must be real numbers (got 'a' of type str in ['a', 'b']); pass numbers "
            "such as [0.3, 0.7].",
        ),
        (
            MapDataset.range(3),
            None,
            TypeError,
            "MapDataset.mix takes a sequence of MapDatasets (got a single object of type "
            "RangeMapDataset); pass a list such as [ds_a, ds_b].",
        ),
    ],
    ids=[
        "no-datasets",
        "empty-dataset",
        "zero-weight",
        "negative-weight",
        "weight-count",
        "str-weights",
        "not-a-list",
    ],
)
def test_map_mix_errors_name_the_value_and_the_fix(datasets, weights, error, message):
    with pytest.raises(error) as raised:
        MapDataset.mix(datasets, weights)
    assert str(raised.value) == message


def test_map_mix_errors_keep_grains_types_where_grain_raises_one():
    for datasets, weights, error in [
        ([], None, ValueError),
        ([MapDataset.range(3), MapDataset.range(0)], None, ValueError),
        ([MapDataset.range(3), MapDataset.range(3)], [0, 1], ValueError),
    ]:
        theirs = [grain.MapDataset.range(len(d)) for d in datasets]
        with pytest.raises(error):
            grain.MapDataset.mix(theirs, weights)
        with pytest.raises(error):
            MapDataset.mix(datasets, weights)


@pytest.mark.parametrize("lengths", [[5, 3, 2], [1], [4, 0, 6], [0, 0, 3]], ids=str)
def test_concatenate_matches_grain_at_every_index_including_wrapped_ones(lengths):
    ours = MapDataset.concatenate(_inputs(grainlite_module, lengths))
    theirs = grain.MapDataset.concatenate(_inputs(grain, lengths))
    assert len(ours) == len(theirs)
    indices = list(range(-3 * len(theirs), 3 * len(theirs)))
    expected = [theirs[i] for i in indices]
    assert [ours[i] for i in indices] == expected
    assert ours._getitems(indices) == expected
    assert list(ours[1:4]) == list(theirs[1:4])


def _recording(base, tag, size):
    class Recording(base):
        """A user's MapDataset that records the indices it is asked for (no wrap-around)."""

        def __init__(self):
            super().__init__()
            self.asked = []

        def __len__(self):
            return size

        def __getitem__(self, index):
            self.asked.append(index)
            return tag, index

    return Recording()


def test_concatenate_past_the_end_reads_the_inputs_later_epochs_like_grain():
    indices = list(range(-12, 16))
    ours_inputs = [_recording(MapDataset, "a", 3), _recording(MapDataset, "b", 2)]
    theirs_inputs = [_recording(grain.MapDataset, "a", 3), _recording(grain.MapDataset, "b", 2)]
    ours, theirs = MapDataset.concatenate(ours_inputs), grain.MapDataset.concatenate(theirs_inputs)
    assert [ours[i] for i in indices] == [theirs[i] for i in indices]
    assert [r.asked for r in ours_inputs] == [r.asked for r in theirs_inputs]
    assert ours._getitems(indices) == [theirs[i] for i in indices]


def test_mix_past_the_end_reads_the_inputs_later_epochs_like_grain():
    indices = list(range(-12, 16))
    ours_inputs = [_recording(MapDataset, "a", 3), _recording(MapDataset, "b", 2)]
    theirs_inputs = [_recording(grain.MapDataset, "a", 3), _recording(grain.MapDataset, "b", 2)]
    ours = MapDataset.mix(ours_inputs, [2, 1])
    theirs = grain.MapDataset.mix(theirs_inputs, [2, 1])
    assert [ours[i] for i in indices] == [theirs[i] for i in indices]
    assert [r.asked for r in ours_inputs] == [r.asked for r in theirs_inputs]


def test_concatenate_of_nothing_fails_on_reading_like_grain():
    with pytest.raises(ZeroDivisionError):
        grain.MapDataset.concatenate([])[0]
    empty = MapDataset.concatenate([])
    assert len(empty) == 0
    with pytest.raises(ZeroDivisionError, match="every input is empty"):
        empty[0]


class EvenOdd(DatasetSelectionMap):
    """Six records: even positions from dataset 0, odd ones from dataset 1."""

    def __len__(self):
        return 6

    def __getitem__(self, index):
        return index % 2, index // 2


class GrainEvenOdd(grain.transforms.DatasetSelectionMap):
    def __len__(self):
        return 6

    def __getitem__(self, index):
        return index % 2, index // 2


def test_select_from_datasets_matches_grain_and_passes_indices_to_the_map_unchanged():
    ours = MapDataset.select_from_datasets(_inputs(grainlite_module, [5, 3]), EvenOdd())
    theirs = grain.MapDataset.select_from_datasets(_inputs(grain, [5, 3]), GrainEvenOdd())
    assert len(ours) == len(theirs) == 6
    indices = list(range(-7, 20))
    expected = [theirs[i] for i in indices]
    assert [ours[i] for i in indices] == expected
    assert ours._getitems(indices) == expected


class ToDatasetFive(DatasetSelectionMap):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return 5, index


def test_select_from_datasets_names_a_missing_dataset_with_an_index_error():
    ds = MapDataset.select_from_datasets(
        [MapDataset.range(3), MapDataset.range(3)], ToDatasetFive()
    )
    for read in (lambda: ds[1], lambda: ds._getitems([0, 1])):
        with pytest.raises(IndexError) as raised:
            read()
        assert str(raised.value).startswith(
            "The selection map sent index 0 to dataset 5, but there are only 2 datasets "
            "(positions 0 to 1)"
        ) or str(raised.value).startswith("The selection map sent index 1 to dataset 5")


def test_select_from_datasets_needs_a_selection_map():
    with pytest.raises(TypeError, match="selection map with __len__ and __getitem__"):
        MapDataset.select_from_datasets([MapDataset.range(3)], lambda i: (0, i))


# IterDataset.mix ----------------------------------------------------------------------------


def _iter_input(module, start, size, keep=None):
    ds = module.MapDataset.range(start, start + size).to_iter_dataset()
    return ds if keep is None else ds.filter(keep)


ITER_MIXES = {
    "equal": lambda m: m.IterDataset.mix([_iter_input(m, 0, 5), _iter_input(m, 100, 3)]),
    "1:2": lambda m: m.IterDataset.mix([_iter_input(m, 0, 5), _iter_input(m, 100, 3)], [1, 2]),
    "0.3:0.7": lambda m: m.IterDataset.mix(
        [_iter_input(m, 0, 9), _iter_input(m, 100, 20)], [0.3, 0.7]
    ),
    "2:1": lambda m: m.IterDataset.mix([_iter_input(m, 0, 5), _iter_input(m, 100, 3)], [2, 1]),
    "mapping": lambda m: m.IterDataset.mix(
        {"y": _iter_input(m, 100, 3), "x": _iter_input(m, 0, 5)}, {"y": 2, "x": 1}
    ),
    "mapping-list-weights": lambda m: m.IterDataset.mix(
        {"y": _iter_input(m, 100, 3), "x": _iter_input(m, 0, 5)}, [2, 1]
    ),
    "three-with-filter": lambda m: m.IterDataset.mix(
        [_iter_input(m, 0, 30, lambda x: x % 3), _iter_input(m, 100, 9), _iter_input(m, 200, 12)],
        [1, 1, 3],
    ),
    "map-dataset-inputs": lambda m: m.IterDataset.mix(
        [m.MapDataset.range(4), m.MapDataset.range(10, 16)], [1, 1]
    ),
}


@pytest.mark.parametrize("name", list(ITER_MIXES))
def test_iter_mix_matches_grain_elements_and_states_after_every_step(name):
    ours = iter(ITER_MIXES[name](grainlite_module))
    theirs = iter(ITER_MIXES[name](grain))
    assert run_with_states(ours) == run_with_states(theirs)
    for iterator in (ours, theirs):  # stopped for good
        with pytest.raises(StopIteration):
            next(iterator)
    assert ours.get_state() == theirs.get_state()


@pytest.mark.parametrize("name", list(ITER_MIXES))
def test_iter_mix_restores_from_grains_states_and_grain_from_ours(name):
    elements, states = run_with_states(iter(ITER_MIXES[name](grain)))
    ours_run = iter(ITER_MIXES[name](grainlite_module))
    for k, state in enumerate(states):
        ours = iter(ITER_MIXES[name](grainlite_module))
        ours.set_state(json.loads(json.dumps(state)))
        assert run_with_states(ours)[0] == elements[k:], k
        theirs = iter(ITER_MIXES[name](grain))
        theirs.set_state(ours_run.get_state())
        assert run_with_states(theirs)[0] == elements[k:], k
        if k < len(elements):
            next(ours_run)


@pytest.mark.parametrize("name", ["1:2", "mapping", "three-with-filter"])
def test_iter_mix_resumes_at_every_step(name):
    assert_dataset_resumes_at_every_step(lambda: iter(ITER_MIXES[name](grainlite_module)))


def _fails_at_two(x):
    if x == 2:
        raise KeyError("boom")
    return x


def test_iter_mix_stops_for_good_after_an_input_raises_like_grain():
    def run(m):
        mix = m.IterDataset.mix([_iter_input(m, 0, 5).map(_fails_at_two), _iter_input(m, 100, 3)])
        iterator, out = iter(mix), []
        for _ in range(6):
            try:
                out.append(next(iterator))
            except StopIteration:
                out.append("stop")
                break
            except KeyError:
                out.append("KeyError")
            out.append(iterator.get_state())
        return out

    assert run(grainlite_module) == run(grain)


def test_iter_mix_keyed_weights_need_keyed_datasets_with_the_same_names():
    with pytest.raises(ValueError) as raised:
        IterDataset.mix({"x": _iter_input(grainlite_module, 0, 3)}, {"z": 1})
    assert str(raised.value) == (
        "IterDataset.mix weights {'z': 1} are keyed by name, so the datasets must be a mapping "
        "with the same keys (got ['x']); key both by the same names, or pass the weights as a list."
    )


def _named_mix(m, names, weights=None):
    inputs = {name: _iter_input(m, 100 * k, 6) for k, name in enumerate("abcd") if name in names}
    return m.IterDataset.mix(inputs, weights and dict(zip(sorted(names), weights)))


def _listed_mix(m, count, weights=None):
    return m.IterDataset.mix([_iter_input(m, 100 * k, 6) for k in range(count)], weights)


# (mixture saved, mixture restored into): Grain restores the inputs the state has a state for.
ITER_MIX_CHANGES = {
    "more-named": (lambda m: _named_mix(m, "ab"), lambda m: _named_mix(m, "abc")),
    "fewer-named": (
        lambda m: _named_mix(m, "abc", [2, 3, 5]),
        lambda m: _named_mix(m, "ab", [2, 3]),
    ),
    "other-named": (lambda m: _named_mix(m, "abc"), lambda m: _named_mix(m, "bd", [3, 2])),
    "reweighted-named": (lambda m: _named_mix(m, "abc"), lambda m: _named_mix(m, "abc", [1, 1, 4])),
    "more-listed": (lambda m: _listed_mix(m, 2), lambda m: _listed_mix(m, 3, [1, 2, 1])),
    "fewer-listed": (lambda m: _listed_mix(m, 3), lambda m: _listed_mix(m, 2)),
}


@pytest.mark.parametrize("name", list(ITER_MIX_CHANGES))
def test_a_mix_state_restores_into_more_fewer_or_other_datasets_as_in_grain(name):
    saved, restored = ITER_MIX_CHANGES[name]
    ours_run, theirs_run = iter(saved(grainlite_module)), iter(saved(grain))
    for k in range(8):
        state = json.loads(json.dumps(ours_run.get_state()))
        assert state == theirs_run.get_state(), k
        ours, theirs = iter(restored(grainlite_module)), iter(restored(grain))
        ours.set_state(state)
        theirs.set_state(state)
        assert run_with_states(ours) == run_with_states(theirs), k
        assert next(ours_run) == next(theirs_run)


def test_a_listed_mix_state_into_a_named_mixture_or_back_is_refused():
    named = iter(ITER_MIXES["mapping"](grainlite_module))
    listed = iter(ITER_MIXES["equal"](grainlite_module))
    with pytest.raises(
        ValueError, match=r"reads datasets named \['x', 'y'\], but the state's parents"
    ):
        named.set_state(listed.get_state())
    with pytest.raises(
        ValueError, match=r"reads a sequence of 2 datasets, but the state's parents"
    ):
        listed.set_state(named.get_state())


def test_combined_datasets_travel_by_cloudpickle():
    for build in (
        lambda: MapDataset.mix([MapDataset.range(5), MapDataset.range(100, 103)], [1, 2]),
        lambda: MapDataset.concatenate([MapDataset.range(5), MapDataset.range(100, 103)]),
        lambda: MapDataset.select_from_datasets(
            [MapDataset.range(5), MapDataset.range(100, 103)], EvenOdd()
        ),
        lambda: ITER_MIXES["mapping"](grainlite_module),
    ):
        ds = build()
        assert list(cloudpickle.loads(cloudpickle.dumps(ds))) == list(ds)
    assert np.asarray(list(MapDataset.mix([MapDataset.range(2)]))).tolist() == [0, 1]


def test_iter_mix_restored_into_a_stopped_state_stays_stopped_like_grain():
    state = {"parents": [{"next_index": 1}, {"next_index": 1}], "index": 2, "stop": True}
    for module in (grainlite_module, grain):
        iterator = iter(ITER_MIXES["equal"](module))
        iterator.set_state(state)
        assert iterator.get_state() == state
        assert list(iterator) == []


@pytest.mark.parametrize("weights", [[1, 700], [0.001, 0.5, 1]], ids=str)
def test_map_mix_with_a_period_too_long_to_tabulate_matches_grain(weights):
    proportions = integer_proportions(weights, len(weights))
    assert MixSelection(proportions).owner_table() is None  # computed offset by offset
    lengths = [10**6] * len(weights)
    ours = MapDataset.mix(_inputs(grainlite_module, lengths), weights)
    theirs = grain.MapDataset.mix(_inputs(grain, lengths), weights)
    assert len(ours) == len(theirs)
    rng = random.Random(0)
    indices = [rng.randrange(-(10**7), 10**7) for _ in range(300)] + list(range(-50, 300))
    expected = [theirs[i] for i in indices]
    assert ours._getitems(indices) == expected
    assert [ours[i] for i in indices] == expected
    mixed = IterDataset.mix(
        [_iter_input(grainlite_module, k * OFFSET, 400) for k in range(len(weights))], weights
    )
    theirs_mixed = grain.IterDataset.mix(
        [_iter_input(grain, k * OFFSET, 400) for k in range(len(weights))], weights
    )
    assert list(mixed) == list(theirs_mixed)


def test_a_mix_of_endless_datasets_is_endless_and_mixes_again_as_in_grain():
    def mixed(library_map_dataset):
        zeros = library_map_dataset.range(0, 1).repeat()
        ones = library_map_dataset.range(1, 2).repeat()
        once = library_map_dataset.mix([zeros, ones], [4, 1])
        twice = library_map_dataset.mix([once, ones], [1, 1])
        return len(once), len(twice), [twice[i] for i in range(200)]

    ours = mixed(MapDataset)
    assert ours[:2] == (sys.maxsize, sys.maxsize)
    assert ours == mixed(grain.MapDataset)


def test_an_empty_input_of_a_mix_is_named_as_grain_names_it_and_quoted_within_bounds():
    class Nothing(MapDataset):
        def __len__(self):
            return 0

        def __getitem__(self, index):
            raise IndexError(index)

        def __str__(self):
            return "Nothing" + "!" * 5000

    long_name = Nothing()
    with pytest.raises(ValueError) as raised:
        MapDataset.mix([MapDataset.range(3), MapDataset.range(0), long_name])
    message = str(raised.value)
    assert message.startswith(
        "All datasets must have positive length for mixing, but dataset(s) at index 1 "
        "(RangeMapDataset(start=0, stop=0, step=1)), index 2 ("
    )
    assert len(message) < 600


def test_a_mixed_map_dataset_reprs_as_grains():
    def shown(library_map_dataset):
        evens, odds = library_map_dataset.range(0, 10, 2), library_map_dataset.range(1, 10, 2)
        return repr(library_map_dataset.mix([evens, odds, library_map_dataset.range(7)], [1, 2, 3]))

    assert shown(MapDataset) == shown(grain.MapDataset)
