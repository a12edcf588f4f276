"""What Ray leaves on a machine, and where the tests keep it: the Ray half of the leak fixture.

A Ray instance writes a temp dir (``$RAY_TMPDIR/ray``: its ``session_*`` dirs, and the
``ray_current_cluster`` file a head started by ``ray start`` or ``ray.cluster_utils.Cluster``
writes, which a later ``ray.init()`` on the machine connects to) and runs daemons (``gcs_server``,
``raylet``, agents, worker processes). Tests that start Ray keep its files in a private temp dir
(:func:`private_ray_tmpdir`) and remove it; the test session points ``RAY_TMPDIR`` at a dir of its
own, so a test that forgets still writes nothing to the machine's ``/tmp/ray``, and the leak
fixture fails it (:func:`ray_files`).

Ray's processes are found by the variable ``TAG`` in their environment: the session sets it, and
every process it starts inherits it (Ray's daemons and workers too, whoever is their parent now),
so the Ray processes of other users of the machine are never counted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

TAG = "GRAINLITE_TEST_RUN"
_RAY_MARKERS = ("raylet", "gcs_server", "ray::", "/site-packages/ray/", "/ray/core/", "ray start")


def tag_this_run() -> None:
    """Marks this process's environment, inherited by every process the tests start."""
    os.environ[TAG] = str(os.getpid())


def ray_processes() -> set[int]:
    """Live Ray processes (daemons, workers, agents) started by this test run."""
    mark = f"{TAG}={os.environ.get(TAG, '')}".encode()
    found: set[int] = set()
    if TAG not in os.environ or not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if not any(marker in command for marker in _RAY_MARKERS):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and mark in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.add(int(entry))
        except (OSError, IndexError):
            continue  # ended while we looked, or not ours to read
    return found


def ray_files(base: str | None) -> list[str]:
    """What Ray wrote in the temp dir ``base`` (``RAY_TMPDIR``): its ``ray`` dir's sessions and
    address file."""
    if not base:
        return []
    with contextlib.suppress(FileNotFoundError):
        return sorted(str(path) for path in (Path(base) / "ray").iterdir())
    return []


def describe(pid: int) -> str:
    with contextlib.suppress(OSError):
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        return f"{pid} ({command.strip()[:80]})"
    return str(pid)


def make_short_dir(prefix: str) -> str:
    """A new dir under /tmp with a short path (Ray's socket paths live under it: <= 107 bytes)."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


@contextlib.contextmanager
def private_ray_tmpdir() -> Iterator[str]:
    """``RAY_TMPDIR`` set to a new private dir for the block (its Ray instances write there), the
    dir removed after it, and the variable restored."""
    path = make_short_dir("glray")
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
        shutil.rmtree(path, ignore_errors=True)
