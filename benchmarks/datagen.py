"""Builds the workload files once per (workload, size, seed) into a cache folder.

A file is written under a temporary name and renamed when complete, next to a small JSON
manifest, so an interrupted generation is never mistaken for a finished one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks.workloads import Workload, image_record, small_record

DEFAULT_DATA_DIR = Path(__file__).resolve().parent / ".data"
FORMAT_VERSION = 1  # Bump when the record format changes, so caches rebuild.


def data_path(data_dir: Path, workload: Workload, records: int, seed: int) -> Path:
    """Where the records of ``workload`` live (in-memory workloads share the small file)."""
    kind = "images" if workload.name == "images" else "small"
    return data_dir / f"{kind}-n{records}-seed{seed}-v{FORMAT_VERSION}.array_record"


def ensure_data(data_dir: Path, workload: Workload, records: int, seed: int) -> Path:
    """The workload's ArrayRecord file, generated first if the cache does not have it."""
    path = data_path(data_dir, workload, records, seed)
    manifest = path.with_suffix(".json")
    if path.exists() and manifest.exists():
        return path
    from array_record.python.array_record_module import ArrayRecordWriter

    data_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + f".partial-{os.getpid()}")
    images = workload.name == "images"
    # Images: one record per chunk, so a random read decodes nothing it does not need. Small
    # records: the writer's defaults (measured as fast as group_size:1 for single reads).
    writer = ArrayRecordWriter(str(partial), "group_size:1" if images else "")
    try:
        make = image_record if images else small_record
        for index in range(records):
            writer.write(make(index, seed))
    finally:
        writer.close()
    os.replace(partial, path)
    manifest.write_text(json.dumps({"records": records, "seed": seed, "images": images}))
    return path


def load_records(path: Path) -> list[bytes]:
    """Every record of ``path``, in order, as a list of bytes (for in-memory workloads)."""
    from array_record.python.array_record_module import ArrayRecordReader

    reader = ArrayRecordReader(str(path), "readahead_buffer_size:0")
    try:
        return list(reader.read(0, reader.num_records()))
    finally:
        reader.close()
