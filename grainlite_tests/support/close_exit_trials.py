"""Support for test_dataset_close_joins_threads: run as a script, it forks ``trials`` children one
after another; each reads 50 elements of a ``MapDataset`` over a real ``ArrayRecordDataSource``
with 16 read threads, closes the iterator and ends through normal interpreter exit (the script
falls off its end). It prints the children's exit statuses as JSON (``-6`` is a SIGABRT, the
"terminate called without an active exception" of a read thread left inside array_record's C++
code at exit; ``3``: the reads never moved to threads, so the trial proves nothing).

Forking (the parent has imported everything and started no thread) makes each trial cost a
fraction of a fresh interpreter, and three run at once, so enough of them run to catch a
1-in-20 event in well under a minute.

Usage: ``python -m grainlite_tests.support.close_exit_trials PATH TRIALS``
"""

from __future__ import annotations

import json
import os
import sys
import time

import grainlite as lite

# Children running at once (their reads wait, so they overlap; one more source of load).
_AT_ONCE = 3


def _waits(record: bytes) -> int:
    time.sleep(0.0005)  # a wait: the reads move to all 16 threads, not one per spare CPU
    return len(record)


def trial(path: str) -> None:
    """One trial's reads; exits with status 3 if no read thread was started."""
    source = lite.sources.ArrayRecordDataSource(path)
    ds = lite.MapDataset.source(source).map(_waits)
    options = lite.ReadOptions(num_threads=16, prefetch_buffer_size=500)
    iterator = iter(ds.to_iter_dataset(read_options=options))
    for _ in range(50):
        next(iterator)
    threaded = bool(iterator.read_threads)
    iterator.close()
    if not threaded:
        sys.exit(3)


def main(path: str, trials: int) -> None:
    # Loaded once here (it starts no thread), not in every child.
    from array_record.python import array_record_module  # noqa: F401

    statuses: list[int] = []
    running: set[int] = set()
    for _ in range(trials):
        if len(running) >= _AT_ONCE:
            pid, status = os.wait()
            running.discard(pid)
            statuses.append(os.waitstatus_to_exitcode(status))
        pid = os.fork()
        if pid == 0:
            trial(path)
            return  # the child leaves main and exits through interpreter shutdown
        running.add(pid)
    for pid in running:
        statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    print(json.dumps(statuses))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
