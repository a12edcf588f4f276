"""Multi-host checkpointing with real JAX processes on localhost, and the multi-process traps.

Two processes join one ``jax.distributed`` job on 127.0.0.1 and read their ``ShardByJaxProcess``
shards; they save with one ``CheckpointManager`` into a shared folder, and with one manager per
process (``primary_host=None``) into a folder per host; two fresh processes restore from each and
finish the run. The job script is ``multihost_job.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("orbax.checkpoint")

from grainlite_tests.support import multihost_job
from grainlite_tests.support.multihost import environment, free_port, run_processes

JOB = Path(__file__).parent / "support" / "multihost_job.py"
DEADLINE_S = 60.0
REPO = Path(__file__).resolve().parents[1]


WORKER_COUNTS = (0, 1)


def run_pair(phase: str, directory: Path, deadline: float) -> list[dict]:
    """Runs both processes of one phase of the job; returns their reports."""
    port, counts = free_port(), ",".join(str(w) for w in WORKER_COUNTS)
    outs = [directory.parent / f"{phase}-{i}.json" for i in range(2)]
    commands = [
        [sys.executable, str(JOB), phase, str(i), str(port), str(directory), counts, str(out)]
        for i, out in enumerate(outs)
    ]
    run_processes(commands, deadline)
    return [json.loads(out.read_text()) for out in outs]


@pytest.fixture(scope="module")
def two_host_job(tmp_path_factory):
    """Two processes save after SAVE_AFTER elements (in a shared folder and in a folder per host)
    and read on; two fresh processes restore from each.

    One launch covers every worker count (JAX and Orbax take seconds to import on a busy machine),
    and everything, both pairs included, must finish within DEADLINE_S.
    """
    deadline = time.monotonic() + DEADLINE_S
    directory = tmp_path_factory.mktemp("multihost") / "checkpoints"
    saved = run_pair("save", directory, deadline)
    restored = run_pair("restore", directory, deadline)
    return directory, saved, restored


@pytest.mark.slow
@pytest.mark.timeout(70)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS, ids=["workers=0", "workers=1"])
def test_two_jax_processes_read_disjoint_shards_that_cover_the_data(two_host_job, worker_count):
    _, saved, _ = two_host_job
    reports = [by_count[str(worker_count)] for by_count in saved]
    assert [r["shard"] for r in reports] == [[0, 2], [1, 2]]
    shards = [sorted(x for batch in r["elements"] for x in batch) for r in reports]
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(multihost_job.NUM_RECORDS))


@pytest.mark.slow
@pytest.mark.timeout(70)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS, ids=["workers=0", "workers=1"])
@pytest.mark.parametrize("layout", multihost_job.LAYOUTS, ids=["shared-folder", "folder-per-host"])
def test_each_process_saves_its_own_file_and_fresh_processes_resume_exactly(
    two_host_job, layout, worker_count
):
    directory, saved, restored = two_host_job
    step = multihost_job.SAVE_AFTER
    for i in range(2):
        folder = Path(multihost_job.layout_folder(str(directory), layout, i))
        item = folder / str(step) / multihost_job.item_name(worker_count)
        expected_files = ["process_0-of-2.json", "process_1-of-2.json"]
        if layout == "per_host":
            expected_files = [f"process_{i}-of-2.json"]
        assert sorted(p.name for p in item.glob("process_*")) == expected_files
        before, after = saved[i][str(worker_count)], restored[i][f"{layout}/{worker_count}"]
        assert (item / f"process_{i}-of-2.json").read_text() == before["saved_state"]
        assert after["same_object"] is True
        assert after["restored_state"] == before["saved_state"]
        assert after["elements"] == before["elements"][step:]


@pytest.mark.timeout(70)
def test_shard_by_jax_process_before_distributed_initialize_makes_initialize_fail(tmp_path):
    """The trap of building ShardByJaxProcess first is loud, not silent: asking JAX for the
    process index starts its backend, and jax.distributed.initialize() then refuses to run."""
    script = tmp_path / "too_early.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import jax
            import grainlite as grain

            options = grain.ShardByJaxProcess()
            print(options)
            try:
                jax.distributed.initialize(
                    coordinator_address="127.0.0.1:{free_port()}",
                    num_processes=2,
                    process_id=0,
                    initialization_timeout=5,
                )
            except RuntimeError as error:
                print("RuntimeError:", error)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "ShardByJaxProcess(shard_index=0, shard_count=1, drop_remainder=False)",
        "RuntimeError: jax.distributed.initialize() must be called before any JAX calls that "
        "might initialise the XLA backend. This includes any computation, but also calls to "
        "jax.devices, jax.device_put, and others.",
    ]


@pytest.mark.timeout(70)
def test_a_script_without_a_main_guard_runs_once_with_a_worker_process(tmp_path):
    """grainlite's workers are fresh interpreters that never import ``__main__``."""
    runs = tmp_path / "runs.txt"
    script = tmp_path / "no_guard.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os
            import grainlite as grain

            with open({str(runs)!r}, "a") as log:
                log.write(f"top level ran in {{os.getpid()}}\\n")

            class Double(grain.MapTransform):
                def map(self, x):
                    return 2 * x

            loader = grain.DataLoader(
                data_source=grain.RangeDataSource(0, 6, 1),
                sampler=grain.SequentialSampler(6, grain.NoSharding()),
                operations=[Double()],
                worker_count=1,
            )
            with iter(loader) as iterator:
                print(list(iterator))
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[0, 2, 4, 6, 8, 10]"]
    assert len(runs.read_text().splitlines()) == 1
