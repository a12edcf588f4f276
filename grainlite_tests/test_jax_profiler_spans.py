"""A real ``jax.profiler.trace()`` around a loader with 2 worker processes (both APIs) holds the
loader's spans: ``grainlite next`` in the training process, one per element taken, and each
worker's read, transform, batch and transport spans on that worker's own track.

The profile is read back from the ``.xplane.pb`` the trace wrote, with
``jax.profiler.ProfileData``. Each loader runs with one element of buffer per worker; the test
lets the workers fill their buffers before the trace starts and after its last ``next()``, so in
the trace each worker makes exactly the elements taken from it (one refill per element taken).
"""

from __future__ import annotations

import glob
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite import config
from grainlite.stats import tracing
from grainlite_tests.support.sleepy import Sleep

jax_profiler = pytest.importorskip("jax.profiler")

pytestmark = pytest.mark.timeout(240)

BATCH = 2
TAKEN = 6  # elements taken inside the trace: 3 from each of the 2 workers
SETTLE_S = 2.0  # the workers fill their one-element buffers meanwhile (each element ~40 ms)


@pytest.fixture
def workers_in_profiles(monkeypatch):
    """``jax_profile_workers`` on for the test (the environment variable is restored after)."""
    monkeypatch.setenv(config.JAX_PROFILE_WORKERS_ENV, "0")
    config.update("jax_profile_workers", True)
    assert config.get_or_default("jax_profile_workers") is True


def loader_iterator() -> Any:
    loader = grain.DataLoader(
        data_source=np.arange(64),
        sampler=grain.IndexSampler(64, grain.NoSharding(), shuffle=False, num_epochs=1, seed=0),
        operations=[Sleep(), grain.Batch(BATCH)],
        worker_count=2,
        worker_buffer_size=1,
    )
    return iter(loader)


def dataset_iterator() -> Any:
    dataset = (
        grain.MapDataset.source(np.arange(64))
        .to_iter_dataset()
        .map(Sleep())
        .batch(BATCH)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=1))
    )
    return iter(dataset)


def traced_run(iterator: Any, log_dir: Path) -> Any:
    """Takes one element, then TAKEN elements inside a trace; returns the profile."""
    with iterator:
        next(iterator)  # the workers are registered at the first next()
        time.sleep(SETTLE_S)
        options = tracing.profile_options(python_tracer_level=0)
        with jax_profiler.trace(str(log_dir), profiler_options=options):
            for _ in range(TAKEN):
                next(iterator)
            time.sleep(SETTLE_S)
    (path,) = glob.glob(str(log_dir / "**" / "*.xplane.pb"), recursive=True)
    return jax_profiler.ProfileData.from_file(path)


def spans(line: Any) -> list[Any]:
    return [event for event in line.events if not event.name.startswith("$")]


def training_spans(profile: Any) -> list[Any]:
    (plane,) = [plane for plane in profile.planes if plane.name == "/host:CPU"]
    return [event for line in plane.lines for event in spans(line)]


def worker_tracks(profile: Any) -> dict[int, list[Any]]:
    """Each worker's spans by worker index (its track: the thread named ``grain... w<i>``)."""
    tracks: dict[int, list[Any]] = {}
    for plane in profile.planes:
        if not plane.name.startswith("/host:CPU ["):
            continue
        pid = plane.name.split("[")[1].rstrip("]")
        for line in plane.lines:
            words = line.name.split()
            if len(words) >= 2 and words[-2].startswith("w") and pid.startswith(words[-1]):
                tracks[int(words[-2][1:])] = spans(line)
    return tracks


def check_profile(profile: Any, read_name: str, batch_spans_per_element: int) -> None:
    nexts = [event for event in training_spans(profile) if event.name == "grainlite next"]
    assert len(nexts) == TAKEN
    assert all(dict(event.stats)["wait_ms"] >= 0 for event in nexts)
    assert sorted(dict(event.stats)["index"] for event in nexts) == list(range(1, TAKEN + 1))
    tracks = worker_tracks(profile)
    assert sorted(tracks) == [0, 1]
    made = TAKEN // 2  # elements each worker made in the trace
    for worker, events in tracks.items():
        counts = Counter(event.name for event in events)
        # A worker may be part-way through an element when the trace starts or stops (a loaded
        # machine outlasts SETTLE_S): the spans of at most one element at each edge are cut.
        assert abs(counts["Sleep"] - made * BATCH) <= BATCH, (worker, counts)
        assert abs(counts["Batch"] - made * batch_spans_per_element) <= batch_spans_per_element
        assert abs(counts["transport"] - made) <= 1, (worker, counts)
        assert counts["transport"] >= made - 1 >= 1, (worker, counts)
        assert counts[read_name] >= 1, (worker, counts)  # reads come in blocks of records
        sleeps = [event.duration_ns for event in events if event.name == "Sleep"]
        assert min(sleeps) >= 20e6


def test_a_dataloader_s_spans_are_in_the_trace_of_the_training_process_and_its_workers(
    workers_in_profiles, tmp_path
):
    profile = traced_run(loader_iterator(), tmp_path)
    # The DataLoader's Batch stage takes each record (a span per record pushed into it).
    check_profile(profile, "read (ndarray)", batch_spans_per_element=BATCH)


def test_a_dataset_pipeline_s_spans_are_in_the_trace_of_the_training_process_and_its_workers(
    workers_in_profiles, tmp_path
):
    profile = traced_run(dataset_iterator(), tmp_path)
    read = [name for name in Counter(e.name for t in worker_tracks(profile).values() for e in t)]
    (read_name,) = [name for name in read if name.startswith("read (")]
    check_profile(profile, read_name, batch_spans_per_element=1)


def test_without_the_switch_workers_are_not_in_the_trace(monkeypatch, tmp_path):
    monkeypatch.setenv(config.JAX_PROFILE_WORKERS_ENV, "0")
    profile = traced_run(loader_iterator(), tmp_path)
    assert worker_tracks(profile) == {}
    nexts = [event for event in training_spans(profile) if event.name == "grainlite next"]
    assert len(nexts) == TAKEN


def test_a_worker_that_cannot_import_jax_runs_as_before_and_says_why(
    workers_in_profiles, monkeypatch, tmp_path, capfd
):
    # Workers import what the parent's sys.path holds: a jax package first on it that fails.
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text("raise ImportError('no jax in this test')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with loader_iterator() as iterator:
        batches = [next(iterator).tolist() for _ in range(4)]
    assert batches == [[0, 2], [1, 3], [4, 6], [5, 7]]  # worker w reads every 2nd record
    lines = [line for line in capfd.readouterr().err.splitlines() if "no spans" in line]
    assert len(lines) == 2, lines  # one line per worker
    assert all("JAX cannot be imported here (no jax in this test)" in line for line in lines)


def test_with_no_trace_a_span_is_nothing():
    assert not tracing.active()
    assert tracing.span("Sleep") is tracing._NULL
