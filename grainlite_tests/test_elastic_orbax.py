"""Elastic restore through Orbax with real JAX processes on localhost.

Two processes save one checkpoint (``process_0-of-2.json`` and ``process_1-of-2.json`` in a shared
folder) after reading different amounts; a job of one process and a job of three processes (with
another worker count) each restore it. Each job's processes together, plus what the savers read,
deliver every record-level element of the uninterrupted run exactly once. The job script is
``elastic_multihost_job.py``.
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("orbax.checkpoint")

from grainlite_tests.support import elastic_multihost_job as job
from grainlite_tests.support.elastic_helpers import uninterrupted
from grainlite_tests.support.multihost import free_port, run_processes

JOB = Path(__file__).parent / "support" / "elastic_multihost_job.py"
DEADLINE_S = 60.0


def _commands(phase: str, count: int, folder: Path, outs: list[Path]) -> list[list[str]]:
    port = str(free_port())
    return [
        [sys.executable, str(JOB), phase, str(i), str(count), port, str(folder), str(out)]
        for i, out in enumerate(outs)
    ]


@pytest.fixture(scope="module")
def elastic_job(tmp_path_factory):
    """Saves with 2 processes, then restores with 1 and with 3 processes (both jobs at once)."""
    deadline = time.monotonic() + DEADLINE_S
    root = tmp_path_factory.mktemp("elastic")
    folder = root / "checkpoints"
    saved = [root / f"save-{i}.json" for i in range(2)]
    run_processes(_commands("save", 2, folder, saved), deadline)
    one, three = [root / "one-0.json"], [root / f"three-{i}.json" for i in range(3)]
    run_processes(
        _commands("restore", 1, folder, one) + _commands("restore", 3, folder, three), deadline
    )

    def read(paths):
        return [json.loads(p.read_text())["elements"] for p in paths]

    return folder, read(saved), {1: read(one), 3: read(three)}


@pytest.mark.slow
@pytest.mark.timeout(70)
@pytest.mark.parametrize("processes", [1, 3], ids=["onto-1-process", "onto-3-processes"])
def test_a_checkpoint_of_two_processes_restores_onto_another_count_exactly_once(
    elastic_job, processes
):
    folder, saved, restored = elastic_job
    item = folder / str(job.STEP) / "data"
    assert sorted(p.name for p in item.glob("process_*")) == [
        "process_0-of-2.json",
        "process_1-of-2.json",
    ]
    parts = saved + restored[processes]
    delivered = collections.Counter(e for part in parts for e in part)
    assert delivered == uninterrupted(job.SPEC)
    assert all(restored[processes])  # every process got a part


def _write_two_process_checkpoint(folder: Path) -> list[int]:
    """The files two saving processes write (hosts simulated); returns what they delivered."""
    from grainlite_tests.support.elastic_helpers import flatten, operations, save

    delivered, states = save(operations(job.SPEC, job.BATCH), 2, 0, list(job.SAVE_AFTER))
    folder.mkdir(parents=True)
    for i, state in enumerate(states):
        (folder / f"process_{i}-of-2.json").write_bytes(state)
    return flatten(delivered)


def test_the_handler_restores_a_checkpoint_of_two_processes_in_one(tmp_path):
    import grainlite as grain
    from grainlite_tests.support.elastic_helpers import flatten, loader, operations

    before = _write_two_process_checkpoint(tmp_path / "item")
    iterator = iter(loader(operations(job.SPEC, job.BATCH), 0, 1, 0))
    handler = grain.GrainCheckpointHandler()
    assert (
        handler.restore(tmp_path / "item", args=grain.GrainCheckpointRestore(iterator)) is iterator
    )
    after = flatten(list(iterator))
    assert collections.Counter(before + after) == uninterrupted(job.SPEC)


def test_a_state_file_larger_than_the_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    import grainlite as grain
    from grainlite.checkpoint import orbax as handler_module
    from grainlite_tests.support.elastic_helpers import loader, operations

    _write_two_process_checkpoint(tmp_path / "item")
    monkeypatch.setattr(handler_module, "MAX_STATE_BYTES", 64)
    iterator = iter(loader(operations(job.SPEC, job.BATCH), 0, 1, 0))
    with pytest.raises(ValueError) as caught:
        grain.GrainCheckpointHandler().restore(
            tmp_path / "item", args=grain.GrainCheckpointRestore(iterator)
        )
    assert str(caught.value) == (
        f"{tmp_path / 'item' / 'process_0-of-2.json'} is larger than 64 bytes, so it is not an "
        f"iterator state (those are a few hundred bytes); restore a folder written by "
        f"CheckpointSave."
    )
