"""usable_cpu_count: the affinity mask and the cgroup CPU quota bound worker_count=None."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grainlite.cpus import affinity_cpu_count, cgroup_cpu_limit, usable_cpu_count

pytestmark = pytest.mark.timeout(60)

V2_ONLY = "0::/job/step\n"
V1_CPU = "4:memory:/job\n3:cpu,cpuacct:/job/step\n0::/\n"


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.mark.parametrize(
    ("files", "membership", "expected"),
    [
        ({"job/step/cpu.max": "200000 100000"}, V2_ONLY, 2),
        ({"job/step/cpu.max": "150000 100000"}, V2_ONLY, 2),
        ({"job/step/cpu.max": "20000 100000"}, V2_ONLY, 1),
        ({"job/step/cpu.max": "max 100000"}, V2_ONLY, None),
        ({"job/step/cpu.max": "max 100000", "job/cpu.max": "300000 100000"}, V2_ONLY, 3),
        ({"job/step/cpu.max": "400000 100000", "cpu.max": "100000 100000"}, V2_ONLY, 1),
        ({"cpu.max": "300000 100000"}, "", 3),
        ({"cpu.max": "garbage"}, V2_ONLY, None),
        (
            {"cpu,cpuacct/job/step/cpu.cfs_quota_us": "250000",
             "cpu,cpuacct/job/step/cpu.cfs_period_us": "100000"},
            V1_CPU,
            3,
        ),
        (
            {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"},
            V1_CPU,
            None,
        ),
        (
            {"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "50000"},
            V1_CPU,
            2,
        ),
        ({}, V1_CPU, None),
    ],
    ids=[
        "v2-two-cpus",
        "v2-fraction-rounds-up",
        "v2-below-one-gives-one",
        "v2-no-quota",
        "v2-parent-quota-applies",
        "v2-smallest-on-the-path-wins",
        "v2-container-root-without-membership",
        "v2-unreadable-quota-ignored",
        "v1-own-cgroup",
        "v1-no-quota",
        "v1-container-sees-its-cgroup-at-the-mount",
        "no-cgroup-files",
    ],
)  # fmt: skip
def test_cgroup_quota_is_read_from_the_process_cgroup_and_its_parents(
    tmp_path, files, membership, expected
):
    for relative, text in files.items():
        _write(tmp_path, relative, text)
    assert cgroup_cpu_limit(tmp_path, membership) == expected


def test_the_usable_count_is_the_smaller_of_affinity_and_quota(tmp_path):
    affinity = affinity_cpu_count()
    assert usable_cpu_count(tmp_path, V2_ONLY) == affinity  # no quota: the affinity mask
    _write(tmp_path, "cpu.max", "100000 100000")
    assert usable_cpu_count(tmp_path, V2_ONLY) == 1
    _write(tmp_path, "cpu.max", f"{(affinity + 5) * 100000} 100000")
    assert usable_cpu_count(tmp_path, V2_ONLY) == affinity


def test_this_machine_gives_at_least_one_and_no_more_than_the_host_has():
    assert 1 <= usable_cpu_count() <= (os.cpu_count() or 1)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux affinity masks")
def test_worker_count_none_counts_only_the_cpus_in_the_affinity_mask():
    code = textwrap.dedent(
        """
        import os
        import grainlite as grain

        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        loader = grain.DataLoader(
            data_source=[1, 2, 3],
            sampler=grain.IndexSampler(3, grain.NoSharding(), num_epochs=1),
            worker_count=None,
        )
        print(os.cpu_count(), loader.multiprocessing_options.num_workers)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=50
    )
    host_cpus, workers = map(int, out.stdout.split())
    assert workers == 1
    assert host_cpus == os.cpu_count()
