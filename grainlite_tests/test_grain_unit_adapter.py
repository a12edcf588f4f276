"""The adapter that runs Grain's own unit tests against grainlite (grain_unit_adapter).

Its mapping of ``grain.*`` imports must hold in the worker processes too: they import the Grain
test modules whose classes they unpickle. It runs in a child interpreter here, so this test
process keeps its real ``grain`` (the reference other tests compare with).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("grain")

ROOT = Path(__file__).resolve().parent.parent

_SCRIPT = textwrap.dedent(
    """
    import grainlite
    from grainlite_tests.support import grain_unit_adapter

    grain_unit_adapter.install()
    grain_unit_adapter.share_with_subprocesses()


    def seen_in_worker(x):
        import grain._src.python.dataset.dataset as grain_dataset
        import grainlite

        return grain_dataset.DatasetIterator is grainlite.DatasetIterator


    ds = grainlite.MapDataset.range(2).to_iter_dataset().map(seen_in_worker)
    ds = ds.mp_prefetch(grainlite.MultiprocessingOptions(num_workers=1))
    print("worker maps grain to grainlite:", list(ds))
    """
)


def test_worker_processes_see_grain_imports_mapped_to_grainlite():
    env = {k: v for k, v in os.environ.items() if k != "GRAINLITE_GRAIN_UNIT_ADAPTER"}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "worker maps grain to grainlite: [True, True]" in result.stdout
