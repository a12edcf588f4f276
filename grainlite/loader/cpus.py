"""Shim for in-flight branches; remove after merge: the CPU count lives in :mod:`grainlite.cpus`."""

from grainlite.cpus import affinity_cpu_count, cgroup_cpu_limit, usable_cpu_count

__all__ = ["affinity_cpu_count", "cgroup_cpu_limit", "usable_cpu_count"]
