"""Shared-memory segments: create, attach, unlink; grainlite imports where POSIX shm is missing."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from grainlite import shm

pytestmark = pytest.mark.timeout(60)


def test_a_created_segment_is_ours_and_another_process_attaches_to_the_same_memory():
    segment = shm.Segment.create(64, "unit")
    try:
        assert shm.owner_pid(segment.name) == os.getpid()
        assert segment.name in shm.list_segments()
        segment.buf[:3] = b"abc"
        code = (
            "import sys; from grainlite import shm; "
            f"s = shm.Segment.attach({segment.name!r}); "
            "sys.stdout.write(bytes(s.buf[:3]).decode()); s.buf[3:5] = b'de'; s.close()"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        )
        assert out.stdout == "abc"
        assert bytes(segment.buf[:5]) == b"abcde"
    finally:
        segment.unlink()
        segment.close()


def test_a_segment_created_for_another_owner_carries_that_owners_pid():
    segment = shm.Segment.create(8, "unit", 48213)
    try:
        assert shm.owner_pid(segment.name) == 48213
    finally:
        segment.unlink()
        segment.close()


def test_an_unlinked_segment_stays_readable_through_existing_arrays():
    segment = shm.Segment.create(64, "unit")
    array = np.frombuffer(segment.buf, np.uint8)
    array[:4] = [1, 2, 3, 4]
    segment.unlink()
    assert segment.name not in shm.list_segments()
    assert array[:4].tolist() == [1, 2, 3, 4]
    segment.close()  # arrays still point in: the mapping goes when they go
    assert array[:4].tolist() == [1, 2, 3, 4]


def test_unlinking_a_name_that_is_gone_is_not_an_error():
    segment = shm.Segment.create(8, "unit")
    segment.unlink()
    segment.unlink()
    shm.unlink(segment.name)
    segment.close()


def test_attaching_a_name_that_does_not_exist_raises_file_not_found():
    with pytest.raises(FileNotFoundError):
        shm.Segment.attach(shm.segment_name("unit"))


# Python without POSIX shared memory (Windows, or a build without _posixshmem): ``None`` in
# sys.modules makes ``import _posixshmem`` raise ImportError, as it does there.
WITHOUT_POSIX_SHM = "import sys; sys.modules['_posixshmem'] = None\n"


def _run_without_posix_shm(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_POSIX_SHM + code],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_grainlite_imports_and_loads_in_process_without_posix_shared_memory():
    code = (
        "import grainlite as grain\n"
        "for source in (grain.RangeDataSource(0, 5, 1), [10, 11, 12]):\n"
        "    loader = grain.DataLoader(data_source=source, worker_count=0,\n"
        "        sampler=grain.SequentialSampler(len(source), grain.NoSharding()))\n"
        "    print([int(x) for x in loader])\n"
    )
    result = _run_without_posix_shm(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[0, 1, 2, 3, 4]", "[10, 11, 12]"]


def test_using_shared_memory_where_there_is_none_says_what_to_use_instead():
    code = (
        "import grainlite\n"
        "from grainlite import shm\n"
        "try:\n"
        "    shm.Segment.create(8, 'unit')\n"
        "except grainlite.GrainliteRuntimeError as error:\n"
        "    print(error)\n"
    )
    result = _run_without_posix_shm(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"POSIX shared memory is not available on this platform (sys.platform is "
        f"{sys.platform!r} and Python's _posixshmem module cannot be imported: import of "
        f"_posixshmem halted; None in sys.modules); worker processes and InMemoryDataSource "
        f"need it. Use worker_count=0 and a source that is not InMemoryDataSource (for example "
        f"a list or RangeDataSource)."
    )
