"""The remote benchmark's data: one workload's records, written once in every library's format.

From the workload's ArrayRecord file (:mod:`benchmarks.datagen`) it makes, under
``<data-dir>/remote/<name>/``:

- ``records.bin`` + ``offsets.npy``: every record back to back and where each starts (a reader
  with numpy alone: the peers' environments convert from it, and the verifier reads raw records
  from it, trusting no loader);
- ``arrayrecord/shard-SSSSS-of-NNNNN.array_record``: the records split into ``shards`` contiguous
  ranges (shard s holds records ``[s * per, (s + 1) * per)``), written as the workload writes
  them (group_size:1 for images, the writer's defaults for small records);
- ``flat/shard-SSSSS-of-NNNNN.bin``: the same ranges as raw bytes, for the per-record ranged
  reads of Grain through fsspec (the cheapest per-record read there is: no chunk to decode);
- ``litdata/`` and ``mds/``: written by ``benchmarks.remote_convert`` in the LitData and
  MosaicML Streaming environments, one chunk or shard per range as far as each writer allows.

A finished folder has a ``manifest.json``; an interrupted one is made again.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.workloads import Workload


@dataclass(frozen=True)
class RemoteData:
    """Where a workload's remote-benchmark data lives, locally, and how it is split."""

    root: Path
    records: int
    shards: int

    @property
    def per_shard(self) -> int:
        return -(-self.records // self.shards)

    def shard_range(self, shard: int) -> tuple[int, int]:
        return shard * self.per_shard, min(self.records, (shard + 1) * self.per_shard)

    def shard_name(self, shard: int, suffix: str) -> str:
        return f"shard-{shard:05d}-of-{self.shards:05d}{suffix}"

    def array_record_paths(self) -> list[Path]:
        return [
            self.root / "arrayrecord" / self.shard_name(s, ".array_record")
            for s in range(self.shards)
        ]

    def flat_paths(self) -> list[Path]:
        return [self.root / "flat" / self.shard_name(s, ".bin") for s in range(self.shards)]


class RawRecords:
    """Random access to ``records.bin`` with numpy alone (memory-mapped)."""

    def __init__(self, root: Path) -> None:
        self.offsets = np.load(root / "offsets.npy")
        self.data = np.memmap(root / "records.bin", dtype=np.uint8, mode="r")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> bytes:
        return self.data[self.offsets[index] : self.offsets[index + 1]].tobytes()


def ensure_remote_data(
    data_dir: Path, source: Path, workload: Workload, records: int, seed: int, shards: int
) -> RemoteData:
    """The shards, flat copies and raw records of ``source`` (made first if missing)."""
    root = data_dir / "remote" / f"{workload.name}-n{records}-seed{seed}-s{shards}"
    data = RemoteData(root, records, shards)
    manifest = root / "manifest.json"
    if manifest.exists():
        return data
    from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

    shutil.rmtree(root, ignore_errors=True)
    (root / "arrayrecord").mkdir(parents=True)
    (root / "flat").mkdir()
    reader = ArrayRecordReader(str(source), "readahead_buffer_size:0")
    try:
        every = list(reader.read(0, reader.num_records()))
    finally:
        reader.close()
    if len(every) != records:
        raise RuntimeError(f"{source} has {len(every)} records, expected {records}")
    sizes = np.fromiter((len(r) for r in every), dtype=np.int64, count=records)
    offsets = np.zeros(records + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    np.save(root / "offsets.npy", offsets)
    with open(root / "records.bin", "wb") as out:
        for record in every:
            out.write(record)
    options = "group_size:1" if workload.name == "images" else ""
    for shard, (path, flat) in enumerate(zip(data.array_record_paths(), data.flat_paths())):
        start, end = data.shard_range(shard)
        writer = ArrayRecordWriter(str(path), options)
        try:
            for record in every[start:end]:
                writer.write(record)
        finally:
            writer.close()
        with open(flat, "wb") as out:
            for record in every[start:end]:
                out.write(record)
    manifest.write_text(json.dumps({"records": records, "seed": seed, "shards": shards}))
    return data
