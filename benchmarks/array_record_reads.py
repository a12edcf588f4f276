"""How fast small records can come out of an ArrayRecord file in one process, read several ways.

``python -m benchmarks.array_record_reads [--records 300000] [--repeats 3] [--data-dir DIR]
[--file-records 1000000]`` reads the ``small`` workload's file (1,000,000 16-byte records,
writer defaults) in one shuffled order, and parses and stacks every record as the benchmark's
``small`` workload does (``np.frombuffer``, batches of 1024), in one process with no loader:

- **from memory**: the same records from a list (the ``small-mem`` rate of this loop);
- **range read per key**: ``read(k, k + 1)`` per record in the consuming thread (what both
  grainlite APIs do at W=0);
- **index-list read, read only**: ``read([k, ...])`` for blocks of keys, nothing parsed, with
  array_record's ``max_parallelism`` at 1 or 2 (the most the reads alone can give);
- **index-list read in a thread**: the same blocks read in one background thread (array_record
  releases the interpreter lock for the whole call) while the consuming thread parses and stacks.

It prints records/s per way, medians over ``--repeats`` interleaved rounds, and each way's ratio
to the memory rate: the question is how close a read path can come to 0.5 of it.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data, load_records
from benchmarks.workloads import WORKLOADS

_BATCH = 1024


def _consume(records: list[bytes]) -> None:
    """The small workload's work: each record parsed, each batch of 1024 stacked."""
    for i in range(0, len(records), _BATCH):
        np.stack([np.frombuffer(r, dtype=np.int64) for r in records[i : i + _BATCH]])


def _reader(path: Path, options: str = "") -> object:
    from array_record.python.array_record_module import ArrayRecordReader

    return ArrayRecordReader(str(path), f"readahead_buffer_size:0{options}")


def ways(path: Path, keys: np.ndarray, memory: list[bytes]) -> dict[str, Callable[[], None]]:
    """Each way of reading ``keys``: a function that reads (and parses) them all once."""

    def from_memory() -> None:
        for i in range(0, keys.size, _BATCH):
            _consume([memory[k] for k in keys[i : i + _BATCH].tolist()])

    def range_reads() -> None:
        read = _reader(path).read  # type: ignore[attr-defined]
        for i in range(0, keys.size, _BATCH):
            _consume([read(k, k + 1)[0] for k in keys[i : i + _BATCH].tolist()])

    def list_reads_only(block: int, parallelism: int) -> Callable[[], None]:
        def run() -> None:
            read = _reader(path, f",max_parallelism:{parallelism}").read  # type: ignore[attr-defined]
            for i in range(0, keys.size, block):
                read(keys[i : i + block].tolist())

        return run

    def list_reads_in_a_thread(block: int) -> Callable[[], None]:
        def run() -> None:
            read = _reader(path, ",max_parallelism:1").read  # type: ignore[attr-defined]
            blocks: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=2)

            def produce() -> None:
                for i in range(0, keys.size, block):
                    blocks.put(read(keys[i : i + block].tolist()))
                blocks.put(None)

            thread = threading.Thread(target=produce)
            thread.start()
            while (records := blocks.get()) is not None:
                _consume(records)
            thread.join()

        return run

    return {
        "from memory": from_memory,
        "range read per key": range_reads,
        "index-list read of 16,384 keys, read only": list_reads_only(16384, 1),
        "index-list read of 65,536 keys, max_parallelism 2, read only": list_reads_only(65536, 2),
        "index-list read of 16,384 keys in a thread": list_reads_in_a_thread(16384),
        "index-list read of 65,536 keys in a thread": list_reads_in_a_thread(65536),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000, help="records read per way")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--file-records", type=int, default=WORKLOADS["small"].records, help="records in the file"
    )
    args = parser.parse_args(argv)
    path = ensure_data(args.data_dir, WORKLOADS["small"], args.file_records, 0)
    memory = load_records(path)
    keys = np.random.default_rng(0).permutation(len(memory))[: args.records]
    rates: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, run in ways(path, keys, memory).items():
            begin = time.perf_counter()
            run()
            rates.setdefault(name, []).append(keys.size / (time.perf_counter() - begin))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(
        f"| way ({keys.size:,} shuffled keys, medians of {args.repeats}) | records/s | vs memory |"
    )
    print("|---|--:|--:|")
    for name, rate in medians.items():
        print(f"| {name} | {rate:,.0f} | {rate / medians['from memory']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
