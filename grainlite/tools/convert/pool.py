"""Writing shards in worker processes, one task per shard.

Workers are forked where this process runs no other thread and the input's scan started none
(fork starts in milliseconds), and spawned otherwise (a fresh interpreter, about a second, but
safe with the threads pyarrow, TFDS or the caller run). Each worker gets the input source once,
at start, and then only shard numbers and paths, so a source listing many files is not pickled
with every task. Workers end when this process ends, even by SIGKILL
(:mod:`grainlite.parent_death`): a killed conversion leaves no writer behind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grainlite.tools.convert.shards import ShardTask
from grainlite.tools.convert.source import InputSource

# Kinds whose scan in this process starts no threads: workers may be forked.
FORK_SAFE_KINDS = ("images", "numpy", "jsonl")


def write_in_processes(
    tasks: list[ShardTask],
    workers: int,
    on_shard: Callable[[dict[str, Any]], None] | None,
    fork: bool = True,
) -> list[dict[str, Any]]:
    """Writes every shard with up to ``workers`` processes; returns their entries in shard order
    and reports each to ``on_shard`` as it finishes. A worker's error is raised here. ``fork``
    False spawns the workers whatever the input (this process runs threads fork must not copy)."""
    import multiprocessing
    import os
    import threading
    from concurrent.futures import ProcessPoolExecutor, as_completed

    source = tasks[0].source
    forkable = (
        fork
        and source.kind in FORK_SAFE_KINDS
        and threading.active_count() == 1  # A thread's held lock would be copied held.
        and "fork" in multiprocessing.get_all_start_methods()
    )
    context = multiprocessing.get_context("fork" if forkable else "spawn")
    # The source (e.g. a list of every image) goes to each worker once, not with every task.
    with ProcessPoolExecutor(
        min(workers, len(tasks)),
        mp_context=context,
        initializer=_start_worker,
        initargs=(source, os.getpid()),
    ) as pool:
        futures = {
            pool.submit(
                _write_shard_in_worker,
                task.index,
                task.start,
                task.stop,
                task.path,
                task.writer_options,
            ): task
            for task in tasks
        }
        try:
            for future in as_completed(futures):
                entry = future.result()  # Raises a worker's error here, in this process.
                if on_shard:
                    on_shard(entry)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return [future.result() for future in futures]


_WORKER_SOURCE: list[InputSource] = []  # The source of this worker process (set once).


def _start_worker(source: InputSource, parent_pid: int) -> None:
    """A worker's first act: end with the parent (a pool worker is started by the thread that
    submits the tasks and then waits for them, see parent_death's note), then keep the source."""
    from grainlite.parent_death import exit_when_parent_dies

    exit_when_parent_dies(parent_pid)
    _WORKER_SOURCE[:] = [source]


def _write_shard_in_worker(
    index: int, start: int, stop: int, path: str, writer_options: str
) -> dict[str, Any]:
    from grainlite.tools.convert.shards import write_shard

    return write_shard(ShardTask(_WORKER_SOURCE[0], index, start, stop, path, writer_options))
