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


_CONCRETE_ON_REAL_GRAIN = textwrap.dedent(
    """
    import sys
    import unittest

    from absl import flags

    from grain._src.python.dataset.transformations import interleave_test
    from grainlite_tests.support import grain_unit_adapter

    if __name__ == "__main__":
        flags.FLAGS(sys.argv[:1])
        (concrete,) = grain_unit_adapter.add_concrete_classes(interleave_test)
        assert interleave_test.InterleaveIterDatasetTest is concrete
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(concrete)
        result = unittest.TextTestRunner(stream=sys.stdout).run(suite)
        print("ran", result.testsRun, "failed", len(result.failures) + len(result.errors),
              "skipped", len(result.skipped))
    """
)


@pytest.mark.timeout(300)  # 42 tests of the real Grain, one with 3 worker processes
def test_the_concrete_interleave_class_the_runner_makes_passes_on_the_real_grain(tmp_path):
    """The subclass made for Grain's abstract interleave test class is the one Grain runs: on
    the real Grain 0.2.18 (no adapter) every one of its tests passes."""
    script = tmp_path / "concrete_on_grain.py"
    script.write_text(_CONCRETE_ON_REAL_GRAIN)
    env = {k: v for k, v in os.environ.items() if k != "GRAINLITE_GRAIN_UNIT_ADAPTER"}
    env.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ran 42 failed 0 skipped 0" in result.stdout, result.stdout[-3000:]
