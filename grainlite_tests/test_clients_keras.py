"""Keras 3, unchanged, on grainlite through ``install_as_grain()``: Keras's own ``import grain``
gets grainlite, and ``model.fit``/``evaluate``/``predict`` on a MapDataset, an IterDataset under
``mp_prefetch(2)`` and a DataLoader train on exactly the batches the dataset yields, give the real
Grain's numbers bit for bit, and a run restored from a saved iterator state trains on the same
batches. Each program runs in a fresh interpreter
(grainlite_tests/support/keras_client_job.py), where ``grain`` is not imported yet."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grain as real_grain
import numpy as np
import pytest

import grainlite

# Keras (the optional `keras` test extra) is imported only in the jobs, each with its backend.
needs_keras = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="keras is not installed (the keras extra)"
)

JOB = Path(__file__).parent / "support" / "keras_client_job.py"
ROOT = Path(__file__).resolve().parents[1]
KINDS = ("map", "iter", "loader")


def _start(library: str, backend: str, *kinds: str) -> subprocess.Popen[str]:
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("GRAINLITE_AS_GRAIN", None)
    return subprocess.Popen(
        [sys.executable, str(JOB), library, *kinds],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _results(process: subprocess.Popen[str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    try:
        out, err = process.communicate(timeout=540)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err[-3000:]
    lines = [json.loads(line) for line in out.splitlines()]
    return lines[0], {line["kind"]: line for line in lines[1:]}


def _check_keras_used_the_datasets_batches(result: dict[str, Any], backend: str) -> None:
    assert len(result["batches"]) == 8
    assert np.asarray(result["batches"][0][0]).shape == (8, 4)
    assert result["predict"] == result["predict_by_hand"]
    if backend == "jax":
        assert result["fit_weights"] == result["by_hand_weights"]
        resume = result["resume"]
        assert resume["same_batches_after_restore"]
        assert resume["resumed_weights"] == resume["full_weights"]


@needs_keras
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["jax", "numpy"])
@pytest.mark.parametrize("kind", KINDS)
def test_keras_fits_evaluates_and_predicts_on_each_grain_input_kind_as_under_grain(kind, backend):
    ours_process = _start("grainlite", backend, kind)
    grain_process = _start("grain", backend, kind)
    header, ours = _results(ours_process)
    grain_header, theirs = _results(grain_process)
    assert header["active"].startswith("grainlite ") and header["backend"] == backend
    assert grain_header["active"] == "grain 0.2.18"
    _check_keras_used_the_datasets_batches(ours[kind], backend)
    assert ours[kind] == theirs[kind]  # batches, losses, weights, predictions, states


class TimesTen(grainlite.transforms.Map):
    def map(self, element: Any) -> Any:
        return element * 10


def test_the_data_loaders_private_attributes_that_keras_reads_mean_what_they_mean_in_grain():
    source = list(range(20))
    operations = [grainlite.transforms.Batch(4)]
    kwargs = dict(worker_count=0, worker_buffer_size=3)
    ours_sampler = grainlite.IndexSampler(20, grainlite.NoSharding(), num_epochs=1)
    ours = grainlite.DataLoader(
        data_source=source,
        sampler=ours_sampler,
        operations=operations,
        enable_profiling=False,
        **kwargs,
    )
    theirs = real_grain.DataLoader(
        data_source=source,
        sampler=real_grain.samplers.IndexSampler(
            20, real_grain.sharding.NoSharding(), num_epochs=1
        ),
        operations=[real_grain.transforms.Batch(4)],
        enable_profiling=False,
        **kwargs,
    )
    assert ours._data_source is source and theirs._data_source is source
    assert ours._operations == operations and ours._operations is not operations
    assert type(ours._operations) is type(theirs._operations) is list
    for name in ("num_workers", "per_worker_buffer_size", "enable_profiling"):
        assert getattr(ours._multiprocessing_options, name) == getattr(
            theirs._multiprocessing_options, name
        )
    assert ours._shard_options.shard_count == theirs._shard_options.shard_count == 1
    assert ours._read_options.num_threads == theirs._read_options.num_threads
    assert ours._sampler is ours_sampler
    # Keras's rebuild: the same arguments read back give a loader that yields the same batches.
    rebuilt = grainlite.DataLoader(
        data_source=ours._data_source,
        sampler=ours._sampler,
        operations=[*ours._operations, TimesTen()],
        worker_count=ours._multiprocessing_options.num_workers,
        worker_buffer_size=ours._multiprocessing_options.per_worker_buffer_size,
        shard_options=ours._shard_options,
        read_options=ours._read_options,
        enable_profiling=ours._multiprocessing_options.enable_profiling,
    )
    assert [b.tolist() for b in rebuilt] == [
        [10 * i for i in range(j, j + 4)] for j in (0, 4, 8, 12, 16)
    ]
