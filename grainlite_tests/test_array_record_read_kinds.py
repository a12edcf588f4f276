"""Which of array_record's two reads an ArrayRecordDataSource uses for a block of shuffled keys.

array_record's index-list read hands every chunk it reads to the library's thread pool, whose
threads exist from the first open reader on. On a file of one record per chunk that costs more
CPU than a range read per key, and a worker's CPU is the pipeline's; where records share chunks
the list read decodes each chunk once for all its keys. The tests run the reads in a fresh
process and watch the pool's threads through their run time in ``/proc`` (nanoseconds, per
thread): a read that never wakes them took the range reads.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from array_record.python import array_record_module

pytestmark = pytest.mark.timeout(60)

_RECORDS = 3000

# Reads keys in a fresh process and prints the run time (ns) of its threads other than the
# main thread over the reads, and whether the records read were the ones written.
_PROBE = textwrap.dedent(
    """
    import json, os, sys, time
    import numpy as np
    from grainlite.sources.array_record import ArrayRecordDataSource

    path, how = sys.argv[1], sys.argv[2]
    source = ArrayRecordDataSource(path)
    keys = np.random.default_rng(5).permutation(len(source))[:600]
    source.__getitems__([0])  # the reader is open: its pool's threads exist

    def others():
        total = 0
        for tid in os.listdir("/proc/self/task"):
            if int(tid) != os.getpid():
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
        return total

    before = others()  # the pool's threads start with the reader: wait until they all wait
    for _ in range(100):
        time.sleep(0.05)
        before, settled = others(), before
        if before == settled:
            break
    for block in np.array_split(keys, 4):
        if how == "ahead":
            records = source.list_read(block)
        else:
            records = source.__getitems__(block.tolist())
    ran = others() - before
    expected = [int(k).to_bytes(4, "little") * 50 for k in block.tolist()]
    print(json.dumps({"ran_ns": ran, "same": records == expected}))
    """
)


def _file(tmp_path: pathlib.Path, group_size: int) -> str:
    path = tmp_path / f"group-{group_size}.array_record"
    writer = array_record_module.ArrayRecordWriter(str(path), f"group_size:{group_size}")
    for key in range(_RECORDS):
        writer.write(key.to_bytes(4, "little") * 50)
    writer.close()
    return str(path)


def _probe(path: str, how: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, path, how],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_shuffled_keys_of_a_file_of_one_record_per_chunk_are_read_without_the_pool(tmp_path):
    result = _probe(_file(tmp_path, 1), "direct")
    assert result["same"]
    assert result["ran_ns"] == 0


def test_shuffled_keys_of_a_file_of_shared_chunks_are_read_in_one_list_read(tmp_path):
    result = _probe(_file(tmp_path, 64), "direct")
    assert result["same"]
    assert result["ran_ns"] > 0


def test_a_read_ahead_in_its_own_thread_lists_its_keys_in_one_read(tmp_path):
    result = _probe(_file(tmp_path, 1), "ahead")
    assert result["same"]
    assert result["ran_ns"] > 0


def test_the_three_reads_give_the_records_written(tmp_path):
    from grainlite.sources.array_record import ArrayRecordDataSource

    keys = np.random.default_rng(2).permutation(_RECORDS)[:300]
    expected = [int(k).to_bytes(4, "little") * 50 for k in keys.tolist()]
    grouped = _file(tmp_path, 64)
    with pytest.warns(UserWarning):
        sources = [ArrayRecordDataSource(_file(tmp_path, 1)), ArrayRecordDataSource(grouped)]
    for source in sources:
        assert source.__getitems__(keys.tolist()) == expected
        assert source.list_read(keys.astype(np.int64)) == expected
