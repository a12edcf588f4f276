"""Seeds against the installed grain: ``.seed(s)`` and the default seed of every node below it,
the generator ``random_map`` hands the function for each index, and the errors."""

from __future__ import annotations

import pickle
import threading

import grain
import numpy as np
import pytest

import grainlite.dataset as gd
from grainlite.dataset import seed as seeding
from grainlite.dataset.map_dataset import MapDataset


def _ident(x):
    return x


def _rng_state(x, rng):
    state = rng.bit_generator.state
    return (
        type(rng).__name__,
        type(rng.bit_generator).__name__,
        state["state"]["key"].tolist(),
        state["state"]["counter"].tolist(),
        state["buffer_pos"],
        int(rng.integers(1 << 30)),
    )


class _TwoParents(MapDataset):
    """A user's node with two parents (the shape of ``mix``), to check seed pairs per parent."""

    def __init__(self, a, b):
        super().__init__([a, b])

    def __len__(self):
        return 1

    def __getitem__(self, index):
        return index


def _chains(lib):
    m = lib.MapDataset
    return {
        "seed-node": m.range(3).seed(7),
        "depth-1": m.range(3).seed(7).map(_ident),
        "depth-3": m.range(3).seed(7).map(_ident).map(_ident).map(_ident),
        "reseeded": m.range(3).seed(7).seed(9).map(_ident),
        "seed-between": m.range(3).seed(7).map(_ident).seed(3).map(_ident).map(_ident),
        "through-to-iter": m.range(3).seed(7).to_iter_dataset().map(_ident),
        "iter-seed": m.range(3).to_iter_dataset().seed(4).map(_ident),
        "big-seed": m.range(3).seed(2**130).map(_ident),
        "zero-seed": m.range(3).seed(0),
        "unseeded": m.range(3).map(_ident),
    }


@pytest.mark.parametrize("name", list(_chains(grain)))
def test_default_seed_of_every_node_matches_grain(name):
    expected = _chains(grain)[name]._default_seed
    actual = _chains(gd)[name]._default_seed
    assert actual == (None if expected is None else int(expected))


def test_default_seed_collects_every_seeded_parent_in_order():
    # Grain's mix of two seeded parents, at depth 1 from each: entropy [1, 1, 2, 1].
    both = grain.MapDataset.mix(
        [grain.MapDataset.range(3).seed(1), grain.MapDataset.range(3).seed(2)]
    )
    ours = _TwoParents(MapDataset.range(3).seed(1), MapDataset.range(3).seed(2))
    assert ours._default_seed == int(both._default_seed)
    one = _TwoParents(MapDataset.range(3), MapDataset.range(3).seed(1).map(_ident))
    assert one._default_seed == seeding._seed_from_entropy((1, 2))


def test_default_seed_is_a_plain_int():
    assert type(MapDataset.range(3).seed(7).map(_ident)._default_seed) is int


@pytest.mark.parametrize("seed", [0, 5, 2**32 - 1, 2**40, 2**70])
def test_random_map_generator_matches_grain_for_every_index(seed):
    ours = MapDataset.range(4).random_map(_rng_state, seed=seed)
    theirs = grain.MapDataset.range(4).random_map(_rng_state, seed=seed)
    indices = [0, 1, 3, 4, 9, 2**40]
    assert [ours[i] for i in indices] == [theirs[i] for i in indices]
    assert ours._getitems(indices) == [theirs[i] for i in indices]


def test_random_map_after_seed_uses_its_own_default_seed_like_grain():
    def build(lib):
        return lib.MapDataset.range(4).seed(7).map(_ident).random_map(_rng_state)

    assert [build(gd)[i] for i in range(6)] == [build(grain)[i] for i in range(6)]


def test_generator_is_reset_between_elements_even_after_draws():
    ds = MapDataset.range(3).random_map(
        lambda x, rng: rng.integers(1 << 30, size=50).tolist(), seed=1
    )
    assert ds[1] == ds[1] == ds._getitems([1])[0]


def test_each_thread_gets_its_own_generator():
    rngs = seeding.IndexRng(5)
    seen, draws = {}, {}

    def record(name):
        seen[name] = rngs.rng(3)
        draws[name] = seen[name].integers(1 << 30, size=4).tolist()

    threads = [threading.Thread(target=record, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen[0] is not seen[1]
    assert draws[0] == draws[1]


def test_index_rng_pickles_by_seed():
    clone = pickle.loads(pickle.dumps(seeding.IndexRng(9)))
    assert clone.rng(4).integers(1000) == seeding.IndexRng(9).rng(4).integers(1000)


@pytest.mark.parametrize("op", ["random_map", "shuffle"])
def test_random_node_without_any_seed_is_a_value_error_at_construction(op):
    def build(lib):
        ds = lib.MapDataset.range(3)
        return ds.shuffle() if op == "shuffle" else ds.random_map(_rng_state)

    with pytest.raises(ValueError):
        build(grain)
    with pytest.raises(ValueError) as raised:
        build(gd)
    assert str(raised.value) == (
        f"`{op}` needs a seed and got none (seed=None, and no ds.seed(...) upstream); set one "
        f"with ds.seed(seed) before the random transformations, or pass it directly: "
        f"ds.{op}(..., seed=seed)."
    )


def test_iter_random_map_without_any_seed_is_a_value_error():
    with pytest.raises(ValueError, match="`random_map` needs a seed"):
        MapDataset.range(3).to_iter_dataset().random_map(_rng_state)


@pytest.mark.parametrize(
    "seed, error, message",
    [
        (-1, ValueError, r"ds.seed\(...\) seed must be a non-negative int \(got -1\)"),
        (1.5, TypeError, r"ds.seed\(...\) seed must be an int \(got 1.5 of type float\)"),
        (True, TypeError, r"must be an int \(got True of type bool\)"),
    ],
    ids=["negative", "float", "bool"],
)
def test_bad_seeds_are_rejected_when_set(seed, error, message):
    with pytest.raises(error, match=message):
        MapDataset.range(3).seed(seed)


def test_numpy_integer_seeds_are_accepted():
    assert MapDataset.range(3).seed(np.int64(7)).map(_ident)._default_seed == int(
        grain.MapDataset.range(3).seed(7).map(_ident)._default_seed
    )


def test_seed_nodes_pass_elements_and_iterator_state_through():
    ds = MapDataset.range(5).seed(3)
    assert len(ds) == 5 and [ds[i] for i in range(7)] == [0, 1, 2, 3, 4, 0, 1]
    assert ds._getitems([4, 6]) == [4, 1] and list(ds[1:3]) == [1, 2]
    it = iter(MapDataset.range(5).to_iter_dataset().seed(3))
    next(it)
    assert it.get_state() == {"next_index": 1}
