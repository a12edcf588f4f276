"""ZipMapDataset / ZipIterDataset: Grain's tuples, lengths, strict rule and state."""

from __future__ import annotations

import grain as real_grain
import pytest

import grainlite as grain
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, to_plain
from grainlite_tests.support.stream_checks import assert_matches_grain

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("first", "second"), [(3, 5), (5, 3), (4, 4), (0, 2)])
def test_zip_iter_without_strict_stops_with_the_shortest_like_grain(first, second):
    def build(lib):
        parents = [
            lib.MapDataset.range(first).to_iter_dataset(),
            lib.MapDataset.range(10, 10 + second).map(lambda x: {"x": x}).to_iter_dataset(),
        ]
        return iter(lib.experimental.ZipIterDataset(parents, strict=False))

    assert_matches_grain(build)


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        (3, 4, "ZipIterDataset argument 2 is longer than argument 1"),
        (4, 3, "ZipIterDataset argument 2 is shorter than argument 1"),
    ],
)
def test_strict_zip_raises_grains_value_error_where_the_lengths_part(first, second, message):
    def observe(lib):
        parents = [lib.MapDataset.range(n).to_iter_dataset() for n in (first, second)]
        iterator = iter(lib.experimental.ZipIterDataset(parents))
        elements = []
        with pytest.raises(ValueError, match=message):
            for element in iterator:
                elements.append(element)
        return elements, iterator.get_state()

    assert observe(grain) == observe(real_grain)


def test_a_parents_own_value_error_passes_through_unchanged():
    def fails(x):
        raise ValueError(f"bad {x}")

    parents = [grain.MapDataset.range(2).to_iter_dataset().map(fails)]
    with pytest.raises(ValueError, match=r"^bad 0$"):
        next(iter(grain.experimental.ZipIterDataset(parents)))


def test_zip_iter_resumes_at_every_step():
    def make():
        parents = [
            grain.MapDataset.range(9).to_iter_dataset().filter(lambda x: x % 2 == 0),
            grain.MapDataset.range(20, 25).shuffle(seed=3).to_iter_dataset(),
        ]
        return iter(grain.experimental.ZipIterDataset(parents))

    assert_dataset_resumes_at_every_step(make)


def test_zip_map_matches_grain_at_every_index_and_in_blocks():
    def build(lib):
        return lib.experimental.ZipMapDataset(
            [lib.MapDataset.range(5), lib.MapDataset.range(5).shuffle(seed=1).map(lambda x: -x)]
        )

    theirs, mine = build(real_grain), build(grain)
    indices = list(range(-2, 12))
    expected = [to_plain(theirs[i]) for i in indices]
    assert len(mine) == len(theirs) == 5
    assert [to_plain(mine[i]) for i in indices] == expected
    assert [to_plain(e) for e in mine._getitems(indices)] == expected
    assert_matches_grain(lambda lib: iter(build(lib).to_iter_dataset()))


def test_zip_map_rejects_parents_of_different_lengths():
    with pytest.raises(ValueError, match=r"same length. ZipMapDataset got lengths \[3, 4\]"):
        grain.experimental.ZipMapDataset([grain.MapDataset.range(3), grain.MapDataset.range(4)])


def test_zip_map_read_in_order_resumes_at_every_step():
    def make():
        parents = [grain.MapDataset.range(7), grain.MapDataset.range(7).shuffle(seed=2)]
        return iter(grain.experimental.ZipMapDataset(parents).to_iter_dataset())

    assert_dataset_resumes_at_every_step(make)


def test_a_strict_zip_error_reads_exactly_as_grains_and_notes_the_fix():
    parents = [grain.MapDataset.range(n).to_iter_dataset() for n in (2, 2, 1)]
    with pytest.raises(ValueError) as raised:
        list(grain.experimental.ZipIterDataset(parents))
    assert str(raised.value) == "ZipIterDataset argument 3 is shorter than arguments 1-2"
    assert any("strict=False" in note for note in raised.value.__notes__)
