"""``grainlite.device_put`` assembles global batches across 2 JAX processes on localhost.

Two processes (``device_multihost_job.py``) join one ``jax.distributed`` job, each with two CPU
devices; each reads its ``ShardByJaxProcess`` shard and places it with the batch axis split over
all four devices. Each global batch must be the two local batches one after the other, each
process's devices must hold exactly its own rows, and a jitted step over the global batch must
see both processes' rows.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")

from grainlite_tests.support import device_multihost_job as job
from grainlite_tests.support.multihost import free_port, run_processes

JOB = Path(__file__).parent / "support" / "device_multihost_job.py"
DEADLINE_S = 60.0


@pytest.mark.slow
@pytest.mark.timeout(70)
def test_two_processes_assemble_each_global_batch_from_their_local_batches(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    port = free_port()
    outs = [tmp_path / f"process-{i}.json" for i in range(2)]
    commands = [
        [sys.executable, str(JOB), str(i), str(port), str(out)] for i, out in enumerate(outs)
    ]
    run_processes(commands, time.monotonic() + DEADLINE_S)
    reports = [json.loads(out.read_text()) for out in outs]

    assert [r["process"] for r in reports] == [0, 1]
    assert all(r["devices"] == [4, 2] for r in reports)  # 4 devices in all, 2 of them local
    first, second = (r["batches"] for r in reports)
    assert len(first) == len(second) == job.BATCHES
    for step, (a, b) in enumerate(zip(first, second)):
        global_rows = a["local"] + b["local"]  # process 0's rows, then process 1's
        assert a["global_shape"] == b["global_shape"] == [2 * job.LOCAL_BATCH], step
        assert a["fully_addressable"] is b["fully_addressable"] is False
        for report in (a, b):
            for (start, stop), rows in report["shards"]:
                assert rows == global_rows[start:stop], (step, start, stop)
        # Each process's devices hold exactly its own rows.
        assert sorted(r for _, rows in a["shards"] for r in rows) == sorted(a["local"])
        assert sorted(r for _, rows in b["shards"] for r in rows) == sorted(b["local"])
        assert a["sum"] == b["sum"] == sum(global_rows), step
    # The two shards are disjoint: the loaders read their own records.
    assert not {r for s in first for r in s["local"]} & {r for s in second for r in s["local"]}
