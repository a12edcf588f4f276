"""How many CPUs this process may use: the number behind ``worker_count=None``.

``os.cpu_count()`` counts the host's CPUs. A process may be allowed fewer: its affinity mask
(``taskset``, Slurm, ``docker --cpuset-cpus``) names the CPUs it may run on, and a cgroup CPU quota
(``docker --cpus``, Kubernetes CPU limits) caps how much CPU time it gets. One worker per host CPU
then means many workers sharing few CPUs. :func:`usable_cpu_count` takes the smallest of these.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 mounts the cpu controller under one of these names (often one links to another).
_V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def usable_cpu_count(cgroup_root: Path = CGROUP_ROOT, membership: str | None = None) -> int:
    """The number of CPUs this process may use, at least 1.

    The smallest of the CPUs in the affinity mask (:func:`affinity_cpu_count`) and the cgroup CPU
    quota rounded up (:func:`cgroup_cpu_limit`).

    Args:
      cgroup_root: where the cgroup file systems are mounted.
      membership: the text of ``/proc/self/cgroup`` (read from there when None).
    """
    counts = [affinity_cpu_count()]
    limit = cgroup_cpu_limit(cgroup_root, membership)
    if limit is not None:
        counts.append(limit)
    return max(1, min(counts))


def affinity_cpu_count() -> int:
    """The CPUs this process may run on: its affinity mask, or the host's count where the platform
    has no mask (macOS, Windows before Python 3.13)."""
    process_cpu_count = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if process_cpu_count is not None:
        return process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def cgroup_cpu_limit(cgroup_root: Path = CGROUP_ROOT, membership: str | None = None) -> int | None:
    """The cgroup CPU quota of this process in CPUs, rounded up, or None without a quota.

    cgroup v2 writes ``"<quota> <period>"`` (or ``"max <period>"``: no quota) to ``cpu.max``;
    cgroup v1 writes ``cpu.cfs_quota_us`` (-1: no quota) and ``cpu.cfs_period_us``. A quota set on
    any cgroup from the process's own up to the root applies, so the smallest one counts. A
    quota of 1.5 CPUs gives 2: two workers can use it all.

    Args:
      cgroup_root: where the cgroup file systems are mounted.
      membership: the text of ``/proc/self/cgroup`` (read from there when None; missing: only the
        cgroups at the mount points are read).
    """
    if membership is None:
        membership = _read(Path("/proc/self/cgroup")) or ""
    v2_path, v1_path = _own_cgroups(membership)
    limits = [
        limit for folder in _up_to(cgroup_root, v2_path) if (limit := _v2_limit(folder)) is not None
    ]
    seen: set[Path] = set()
    for name in _V1_CPU_DIRS:
        mount = cgroup_root / name
        if not mount.is_dir() or mount.resolve() in seen:
            continue
        seen.add(mount.resolve())
        for folder in _up_to(mount, v1_path):
            limit = _v1_limit(folder)
            if limit is not None:
                limits.append(limit)
    return max(1, math.ceil(min(limits))) if limits else None


def _own_cgroups(membership: str) -> tuple[str, str]:
    """The process's cgroup v2 path and its cgroup v1 ``cpu`` path (``"/"`` where not listed)."""
    v2_path = v1_path = "/"
    for line in membership.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            v2_path = path or "/"
        elif "cpu" in controllers.split(","):
            v1_path = path or "/"
    return v2_path, v1_path


def _up_to(mount: Path, path: str) -> Iterator[Path]:
    """``mount/path`` and each of its parents up to ``mount``.

    Inside a container the mount is often the container's own cgroup while ``path`` names it from
    the host's root; the folders that do not exist are then simply not read.
    """
    parts = PurePosixPath(path).parts[1:]
    for depth in range(len(parts), -1, -1):
        yield mount.joinpath(*parts[:depth])


def _v2_limit(folder: Path) -> float | None:
    fields = (_read(folder / "cpu.max") or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_limit(folder: Path) -> float | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    return _ratio(quota, period)


def cpu_wait_s() -> float:
    """Seconds the calling thread has spent runnable but waiting for a CPU (Linux's
    ``/proc/thread-self/schedstat``); 0.0 where the kernel does not say. The readers subtract it
    from a read's wall time: preemption by other processes is not a read that waits."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _ratio(quota: str, period: str) -> float | None:
    """``quota / period`` in CPUs, or None if either is not a positive integer (-1: no quota)."""
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:
        return None
    return quota_us / period_us


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
