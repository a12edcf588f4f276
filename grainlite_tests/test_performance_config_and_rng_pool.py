"""``pick_performance_config`` and ``RngPool`` give what Grain 0.2.18's give, checked against it."""

from __future__ import annotations

import logging

import absl.flags
import grain.experimental as real_experimental
import grain.python as real_grain
import numpy as np
import pytest

import grainlite as lite
import grainlite.experimental as lite_experimental

absl.flags.FLAGS.mark_as_parsed()


def _picked(config: object) -> tuple[int, int, int, int]:
    mp = config.multiprocessing_options  # type: ignore[attr-defined]
    read = config.read_options  # type: ignore[attr-defined]
    return (mp.num_workers, mp.per_worker_buffer_size, read.num_threads, read.prefetch_buffer_size)


def _arrays(package: object, floats: int) -> object:
    return (
        package.MapDataset.range(20)  # type: ignore[attr-defined]
        .map(lambda i: {"x": np.zeros((floats,), np.float32), "i": i, "s": "text"})
        .to_iter_dataset()
    )


@pytest.mark.parametrize("floats", [1_000, 250_000, 2_500_000])
@pytest.mark.parametrize("ram_budget_mb", [1, 10, 100, 1000])
@pytest.mark.parametrize("max_workers", [None, 4, 64])
@pytest.mark.parametrize("max_buffer_size", [None, 10])
def test_pick_performance_config_picks_what_grain_picks(
    floats: int, ram_budget_mb: int, max_workers: int | None, max_buffer_size: int | None
) -> None:
    logging.disable(logging.WARNING)  # the small-buffer warning of ReadOptions, from both
    try:
        kwargs = dict(
            ram_budget_mb=ram_budget_mb, max_workers=max_workers, max_buffer_size=max_buffer_size
        )
        ours = lite_experimental.pick_performance_config(_arrays(lite, floats), **kwargs)
        theirs = real_experimental.pick_performance_config(_arrays(real_grain, floats), **kwargs)
    finally:
        logging.disable(logging.NOTSET)
    assert _picked(ours) == _picked(theirs)
    assert isinstance(ours, lite_experimental.PerformanceConfig)


def test_pick_performance_config_without_a_budget_says_what_to_pass() -> None:
    with pytest.raises(TypeError, match="needs ram_budget_mb"):
        lite_experimental.pick_performance_config(
            _arrays(lite, 10), ram_budget_mb=None, max_workers=None, max_buffer_size=None
        )


def test_pick_performance_config_reads_only_the_samples_it_checks() -> None:
    seen: list[int] = []
    ds = lite.MapDataset.range(100).to_iter_dataset().map(lambda i: seen.append(i) or i)
    lite_experimental.pick_performance_config(
        ds, ram_budget_mb=1, max_workers=2, max_buffer_size=None, samples_to_check=3
    )
    assert seen == [0, 1, 2]


@pytest.mark.parametrize("op_seed", [0, 1, 7])
@pytest.mark.parametrize("index", [0, 5, 2**40])
def test_rng_pool_generators_are_grains(op_seed: int, index: int) -> None:
    ours, theirs = lite_experimental.RngPool(3), real_experimental.RngPool(3)
    a = ours.acquire_rng(index, op_seed=op_seed)
    b = theirs.acquire_rng(index, op_seed=op_seed)
    assert a.random(4).tolist() == b.random(4).tolist()
    ours.release_rng(a)
    theirs.release_rng(b)


def test_rng_pool_with_op_seed_zero_is_random_maps_generator() -> None:
    drawn = (
        lite.MapDataset.range(4).random_map(lambda i, rng: rng.random(), seed=11).to_iter_dataset()
    )
    pool = lite_experimental.RngPool(11)
    expected = []
    for i in range(4):
        rng = pool.acquire_rng(i)
        expected.append(rng.random())
        pool.release_rng(rng)
    assert list(drawn) == expected


def test_rng_pool_reuses_a_released_generator_reset_and_never_hands_out_a_held_one() -> None:
    pool = lite_experimental.RngPool(5)
    first = pool.acquire_rng(2)
    value = first.random()
    second = pool.acquire_rng(2)
    assert second is not first
    assert second.random() == value
    pool.release_rng(first)
    again = pool.acquire_rng(2)
    assert again is first
    assert again.random() == value


def test_rng_pool_refuses_a_generator_it_did_not_hand_out() -> None:
    pool = lite_experimental.RngPool(5)
    with pytest.raises(ValueError, match="did not hand out"):
        pool.release_rng(np.random.default_rng(0))
    rng = pool.acquire_rng(0)
    pool.release_rng(rng)
    with pytest.raises(ValueError, match="already released"):
        pool.release_rng(rng)


def test_rng_pool_refuses_a_negative_index_as_an_overflow() -> None:
    with pytest.raises(OverflowError, match="negative index"):
        lite_experimental.RngPool(5).acquire_rng(-1)
