"""Losing the Ray cluster, or actors to Ray's out-of-memory killer, under a running loader: a
named error within seconds, never a hang.

A real, separate Ray cluster on 127.0.0.1 (Ray's ``ray.cluster_utils.Cluster`` in its own process
session): a head node and a CPU node that alone has the ``data_node`` resource. A separate driver
process connects to it by address and iterates a pipeline whose workers are actors on the CPU
node. Then every process of the head node (its GCS, raylet and helpers) is killed. Ray would end
the driver only after ``gcs_rpc_server_reconnect_timeout_s`` (60 s); the loader must raise
``ClusterConnectionError`` well before, ``close()`` must return, and the actors it started must
be gone while the driver still runs.

Out of memory: a driver whose own local Ray instance (started by the loader) has its memory
monitor's threshold at 1% of the machine's memory (``RAY_memory_usage_threshold``), so Ray's
killer ends the actors as soon as they work; the loader names the worker and Ray's reason
(``WorkerDiedError``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grainlite_tests.test_ray_workers import alive, wait_until_gone

pytest.importorskip("ray", reason="the ray extra (pip install 'grainlite[ray]')")

pytestmark = pytest.mark.timeout(240)

HEAD = """
import json, sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=2, resources={"data_node": 2})
cluster.wait_for_nodes()
head = [p.process.pid for ps in cluster.head_node.all_processes.values() for p in ps]
print(json.dumps({"address": cluster.address, "head": head}), flush=True)
sys.stdin.readline()
"""

DRIVER = """
import json, sys, time
import ray
import grainlite as grain
from grainlite.ray import RayWorkers
from grainlite_tests.support import ray_pipelines as rp

def say(**fields):
    print("REPORT " + json.dumps(fields), flush=True)

ray.init(address=sys.argv[1], log_to_driver=False)
options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
ds = grain.MapDataset.range(200).repeat(10_000).map(rp.with_image).to_iter_dataset().batch(2)
backend = RayWorkers(2, resources={"data_node": 1})
it = iter(ds.mp_prefetch(options, backend=backend))
next(it)
say(pids=it._stream.pids())
sys.stdin.readline()  # the head is gone
began = time.monotonic()
try:
    while True:
        next(it)
        time.sleep(0.01)
except Exception as error:
    say(raised=type(error).__name__, message=str(error), after=time.monotonic() - began)
began = time.monotonic()
it.close()
say(closed=time.monotonic() - began)
sys.stdin.readline()  # the test has looked for the actors
"""


OUT_OF_MEMORY_DRIVER = """
import json, time
import ray
import grainlite as grain
from grainlite.ray import RayWorkers
from grainlite_tests.support import ray_pipelines as rp

options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
ds = grain.MapDataset.range(200).repeat(1000).map(rp.large_array).to_iter_dataset()
began = time.monotonic()
outcome = {"raised": None}
try:
    backend = RayWorkers(2, address="local")  # the loader starts this local Ray instance
    with iter(ds.mp_prefetch(options, backend=backend)) as it:
        for _ in it:
            if time.monotonic() - began > 90:
                break
except Exception as error:
    outcome = {"raised": type(error).__name__, "message": str(error)}
outcome["after"] = time.monotonic() - began
outcome["ray_started"] = ray.is_initialized()
print("REPORT " + json.dumps(outcome), flush=True)
"""


def report(process: subprocess.Popen[str]) -> dict:
    """The driver's next REPORT line (its other output is Ray's log)."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("REPORT "):
            return dict(json.loads(line[len("REPORT ") :]))
    raise AssertionError(f"the driver ended (exit status {process.wait()}) without a report")


def session_members(session: int) -> list[int]:
    """Every live process of process session ``session`` (what the cluster process started)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[3]) == session and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def end_session(session: int) -> None:
    for pid in session_members(session):
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_killing_the_clusters_head_mid_epoch_is_a_connection_error_and_close_ends_the_actors():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "RAY_DEDUP_LOGS": "0"}
    cluster = subprocess.Popen(
        [sys.executable, "-c", HEAD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    driver = None
    try:
        assert cluster.stdout is not None
        started = json.loads(cluster.stdout.readline())
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, started["address"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        assert driver.stdin is not None
        actors = report(driver)["pids"]
        assert len(actors) == 2 and all(alive(pid) for pid in actors)

        for pid in started["head"]:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        driver.stdin.write("\n")
        driver.stdin.flush()

        raised = report(driver)
        assert raised["raised"] == "ClusterConnectionError", raised
        assert "connection to the Ray cluster" in raised["message"]
        assert time.monotonic() - killed < 30  # Ray alone would end the driver at 60 s
        assert report(driver)["closed"] < 10
        assert wait_until_gone(actors, 15) == []  # ended by close(), while the driver runs
        assert driver.poll() is None
        driver.stdin.write("\n")
        driver.stdin.flush()
        assert driver.wait(timeout=60) == 0
    finally:
        if driver is not None:
            if driver.poll() is None:
                driver.kill()
            driver.communicate()  # closes its pipes
        end_session(cluster.pid)
        cluster.communicate()


def test_an_actor_killed_by_rays_out_of_memory_killer_is_a_named_worker_death():
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "RAY_memory_usage_threshold": "0.01",  # any machine is "out of memory" at once
        "RAY_memory_monitor_refresh_ms": "100",
    }
    driver = subprocess.Popen(
        [sys.executable, "-c", OUT_OF_MEMORY_DRIVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        outcome = report(driver)
        assert outcome["raised"] == "WorkerDiedError", outcome
        assert "Ray worker actor" in outcome["message"] and "memory" in outcome["message"]
        assert outcome["after"] < 60 and outcome["ray_started"]
        assert driver.wait(timeout=60) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.communicate()
