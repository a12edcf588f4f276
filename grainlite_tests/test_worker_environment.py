"""Worker processes never see an accelerator unless ``hide_accelerators_in_workers`` is False,
and run numpy's BLAS on one thread unless the environment sets a thread count.

Each test reads the environment of a real worker process: a transform returns the variables it
sees in ``os.environ``.
"""

from __future__ import annotations

import os

import pytest

import grainlite as grain
from grainlite import config
from grainlite.engine.process_group import BLAS_THREAD_VARIABLES, HIDDEN_ACCELERATORS

pytestmark = pytest.mark.timeout(60)

PARENT_VALUES = {
    "CUDA_VISIBLE_DEVICES": "0,1",
    "HIP_VISIBLE_DEVICES": "1",
    "ROCR_VISIBLE_DEVICES": "0",
    "JAX_PLATFORMS": "cuda",
    "PJRT_DEVICE": "TPU",
}


class ReadEnvironment(grain.MapTransform):
    """Any record -> the variables ``names`` in the process that runs the transform."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def map(self, record: int) -> dict[str, str | None]:
        return {name: os.environ.get(name) for name in self.names}


def worker_sees(names: tuple[str, ...] = tuple(sorted(PARENT_VALUES))) -> dict[str, str | None]:
    """The variables ``names`` (the accelerator ones by default) as a real worker sees them."""
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 1, 1),
        sampler=grain.IndexSampler(1, grain.NoSharding(), num_epochs=1),
        operations=[ReadEnvironment(names)],
        worker_count=1,
    )
    with iter(loader) as iterator:
        return next(iterator)


@pytest.fixture
def parent_sees_accelerators(monkeypatch):
    """The parent's environment names accelerators; the option starts at its default."""
    for name, value in PARENT_VALUES.items():
        monkeypatch.setenv(name, value)
    # Set, then removed: monkeypatch then removes what config.update sets in the test.
    monkeypatch.setenv(config.HIDE_ACCELERATORS_ENV, "1")
    monkeypatch.delenv(config.HIDE_ACCELERATORS_ENV)


def test_a_worker_sees_no_accelerator_by_default(parent_sees_accelerators):
    assert config.get_or_default("hide_accelerators_in_workers") is True
    assert worker_sees() == {
        "CUDA_VISIBLE_DEVICES": "-1",
        "HIP_VISIBLE_DEVICES": "-1",
        "JAX_PLATFORMS": "cpu",
        "PJRT_DEVICE": "CPU",
        "ROCR_VISIBLE_DEVICES": "-1",
    }
    assert set(HIDDEN_ACCELERATORS) == set(PARENT_VALUES)


def test_opting_out_gives_workers_the_parents_accelerators(parent_sees_accelerators):
    config.update("hide_accelerators_in_workers", False)
    assert os.environ[config.HIDE_ACCELERATORS_ENV] == "0"
    assert config.get_or_default("hide_accelerators_in_workers") is False
    assert grain.config.hide_accelerators_in_workers is False
    assert worker_sees() == PARENT_VALUES
    config.update("hide_accelerators_in_workers", True)
    assert worker_sees()["CUDA_VISIBLE_DEVICES"] == "-1"


def test_the_environment_variable_opts_out_too(parent_sees_accelerators, monkeypatch):
    monkeypatch.setenv(config.HIDE_ACCELERATORS_ENV, "0")
    assert worker_sees()["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_the_option_takes_only_a_bool(parent_sees_accelerators):
    with pytest.raises(grain.GrainliteTypeError) as caught:
        config.update("hide_accelerators_in_workers", "no")
    assert str(caught.value) == (
        "grain.config option hide_accelerators_in_workers must be a bool (got 'no' of type str); "
        "pass False to let worker processes see accelerators."
    )
    assert isinstance(caught.value, TypeError)


@pytest.fixture
def no_blas_threads_chosen(monkeypatch):
    for name in BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_worker_runs_blas_on_one_thread_by_default(no_blas_threads_chosen):
    assert worker_sees(BLAS_THREAD_VARIABLES) == {
        "OPENBLAS_NUM_THREADS": "1", "GOTO_NUM_THREADS": None, "OMP_NUM_THREADS": None,
    }  # fmt: skip
    assert "OPENBLAS_NUM_THREADS" not in os.environ


@pytest.mark.parametrize("chosen", BLAS_THREAD_VARIABLES)
def test_a_blas_thread_count_set_in_the_environment_is_kept(
    no_blas_threads_chosen, monkeypatch, chosen
):
    monkeypatch.setenv(chosen, "3")
    expected = dict.fromkeys(BLAS_THREAD_VARIABLES, None) | {chosen: "3"}
    assert worker_sees(BLAS_THREAD_VARIABLES) == expected
