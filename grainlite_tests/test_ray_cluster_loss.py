"""Losing the Ray cluster, or actors to Ray's out-of-memory killer, under a running loader: a
named error within seconds, never a hang.

A real, separate Ray cluster on 127.0.0.1 (Ray's ``ray.cluster_utils.Cluster`` in its own process
session): a head node and a CPU node that alone has the ``data_node`` resource. A separate driver
process connects to it by address and iterates two pipelines at once, an ``mp_prefetch`` and a
``DataLoader``, whose workers are actors on the CPU node. Then every process of the head node
(its GCS, raylet and helpers) is killed. Ray would end the driver only after
``gcs_rpc_server_reconnect_timeout_s`` (60 s); each loader must raise ``ClusterConnectionError``
well before, ``close()`` must return, and the actors they started must be gone while the driver
still runs.

No address: a driver with no Ray running (and its own ``RAY_TMPDIR``, so no other instance on
the machine is found) gives ``RayWorkers`` no address; the loader's ``ray.init()`` starts a local
instance, the elements are those of local workers, and killing that instance's GCS is the same
``ClusterConnectionError``.

Out of memory: a driver whose own local Ray instance (started by the loader) has its memory
monitor's threshold at 1% of the machine's memory (``RAY_memory_usage_threshold``), so Ray's
killer ends the actors as soon as they work; the loader names the worker and Ray's reason
(``WorkerDiedError``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from leak_check import alive

from grainlite_tests.support.ray_state import private_ray_tmpdir
from grainlite_tests.support.waiting import wait_until_gone

pytest.importorskip("ray", reason="the ray extra (pip install 'grainlite[ray]')")

pytestmark = pytest.mark.timeout(240)

HEAD = """
import json, sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=4, resources={"data_node": 4})
cluster.wait_for_nodes()
head = [p.process.pid for ps in cluster.head_node.all_processes.values() for p in ps]
print(json.dumps({"address": cluster.address, "head": head}), flush=True)
sys.stdin.readline()
"""

# Both APIs at once (two actors each, on the CPU node), so one cluster and one kill test both.
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
def backend():
    return RayWorkers(2, resources={"data_node": 1})
iterators = {
    "mp_prefetch": iter(ds.mp_prefetch(options, backend=backend())),
    "DataLoader": iter(rp.loader(sys.argv[2], backend=backend(), num_epochs=None)),
}
for it in iterators.values():
    next(it)
say(pids={name: it._stream.pids() for name, it in iterators.items()})
sys.stdin.readline()  # the head is gone
began = time.monotonic()
raised = {}
while len(raised) < len(iterators) and time.monotonic() - began < 120:
    for name, it in iterators.items():
        if name not in raised:
            try:
                next(it)
            except Exception as error:
                raised[name] = [type(error).__name__, str(error), time.monotonic() - began]
    time.sleep(0.01)
say(raised=raised)
closed = {}
for name, it in iterators.items():
    began = time.monotonic()
    it.close()
    closed[name] = time.monotonic() - began
say(closed=closed)
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


# No address and no Ray running: the loader's ray.init() starts a local instance (RAY_TMPDIR is the
# test's own, so no other Ray instance on this machine is found); then its head (GCS) is killed.
NO_ADDRESS_DRIVER = """
import json, os, signal, sys, time
import ray
import grainlite as grain
from grainlite.ray import RayWorkers
from grainlite_tests.support import ray_pipelines as rp

def say(**fields):
    print("REPORT " + json.dumps(fields), flush=True)

path = sys.argv[1]
with iter(rp.loader(path, worker_count=2, num_epochs=None)) as it:
    local = [next(it) for _ in range(6)]
running_before = ray.is_initialized()
it = iter(rp.loader(path, backend=RayWorkers(2), num_epochs=None))
same = all(rp.same(next(it), element) for element in local)
node = ray._private.worker._global_node
gcs = [info.process.pid for info in node.all_processes["gcs_server"]]
say(running_before=running_before, started=ray.is_initialized(), same=same,
    temp_dir=node.get_temp_dir_path(), actors=it._stream.pids(), gcs=gcs)
for pid in gcs:
    os.kill(pid, signal.SIGKILL)
began = time.monotonic()
outcome = {"raised": None}
try:
    while time.monotonic() - began < 120:
        next(it)
        time.sleep(0.01)
except Exception as error:
    outcome = {"raised": type(error).__name__, "message": str(error)}
outcome["after"] = time.monotonic() - began
began = time.monotonic()
it.close()
outcome["closed"] = time.monotonic() - began
say(**outcome)
sys.stdin.readline()  # the test has looked for the actors
"""


@pytest.fixture(autouse=True)
def private_ray_files():
    """Each test's clusters and drivers (which inherit RAY_TMPDIR) keep Ray's files in a temp dir
    of the test's own, removed after it (a killed head leaves its ray_current_cluster file)."""
    with private_ray_tmpdir():
        yield


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


RAY_AGENTS = {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}


def session_commands(session: int) -> list[str]:
    """The command lines of the live processes of process session ``session``."""
    commands = []
    for pid in session_members(session):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            commands.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip())
    return commands


def end_session(session: int) -> None:
    for pid in session_members(session):
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_killing_the_head_mid_epoch_is_a_connection_error_in_both_apis_and_close_ends_actors(
    tmp_path,
):
    from stand_in_data import write_classification_records

    records = write_classification_records(tmp_path / "r.array_record", 48)
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
            [sys.executable, "-c", DRIVER, started["address"], str(records)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        assert driver.stdin is not None
        pids = report(driver)["pids"]
        actors = [pid for group in pids.values() for pid in group]
        assert sorted(pids) == ["DataLoader", "mp_prefetch"]
        assert len(set(actors)) == 4 and all(alive(pid) for pid in actors)

        for pid in started["head"]:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        driver.stdin.write("\n")
        driver.stdin.flush()

        raised = report(driver)["raised"]
        assert sorted(raised) == ["DataLoader", "mp_prefetch"], raised
        for kind, message, _ in raised.values():
            assert kind == "ClusterConnectionError", raised
            assert "connection to the Ray cluster" in message
        assert time.monotonic() - killed < 30  # Ray alone would end the driver at 60 s
        assert all(seconds < 10 for seconds in report(driver)["closed"].values())
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


def test_with_no_address_the_loader_starts_a_local_ray_and_losing_its_head_is_a_connection_error(
    tmp_path,
):
    from stand_in_data import write_classification_records

    records = write_classification_records(tmp_path / "r.array_record", 48)
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths live here
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "RAY_TMPDIR": temp_dir}
    env.pop("RAY_ADDRESS", None)
    driver = subprocess.Popen(
        [sys.executable, "-c", NO_ADDRESS_DRIVER, str(records)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert driver.stdin is not None
        started = report(driver)
        assert not started["running_before"] and started["started"]
        # A new local instance (under RAY_TMPDIR), not another one found on this machine.
        assert started["temp_dir"].startswith(temp_dir + os.sep)
        assert started["same"]  # the elements of local workers
        assert len(started["actors"]) == 2 and started["gcs"]
        outcome = report(driver)
        assert outcome["raised"] == "ClusterConnectionError", outcome
        assert "connection to the Ray cluster" in outcome["message"]
        assert outcome["after"] < 30 and outcome["closed"] < 10
        assert wait_until_gone(started["actors"], 15) == []
        driver.stdin.write("\n")
        driver.stdin.flush()
        assert driver.wait(timeout=90) == 0
        # The instance went with the driver: its raylet, object store and GCS, and every worker
        # process. Only Ray's two node agents outlive it, until Ray's own GCS reconnection
        # timeout (60 s) ends them; they run no code of the loader.
        deadline = time.monotonic() + 30
        while set(session_commands(driver.pid)) - RAY_AGENTS and time.monotonic() < deadline:
            time.sleep(0.2)
        assert set(session_commands(driver.pid)) <= RAY_AGENTS
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.communicate()
        end_session(driver.pid)
        shutil.rmtree(temp_dir, ignore_errors=True)
