"""What ``python -m grainlite inspect`` shows, and what ``--verify`` checks.

``--verify`` checks every shard the manifest lists: the file exists and has the manifest's size;
ArrayRecord opens it and counts the manifest's number of records; every record reads
back, has the GLR1 layout for the manifest's features, and together they give the manifest's
record checksum. Every failure is a line naming the shard and what differs. A shard in a bucket
(``s3://``, ``gs://``) is downloaded into a temporary file, checked there and removed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from grainlite.sources import locations
from grainlite.tools.convert import manifest as manifest_module
from grainlite.tools.convert import records
from grainlite.tools.convert.shards import RecordChecksum

_READ_BLOCK = 1024  # Records per read while verifying.


def describe_value(value: Any) -> str:
    """A short description of one decoded feature value."""
    if isinstance(value, np.ndarray | np.generic):
        if value.ndim == 0:
            return f"{value.dtype} {value.item()!r}"
        return f"{value.dtype} array {value.shape}"
    if isinstance(value, bytes):
        return f"{len(value)} bytes {value[:8]!r}..."
    text = repr(value)
    return f"str {text if len(text) < 50 else text[:47] + '...'}"


def summary(manifest: manifest_module.Manifest) -> list[str]:
    """The manifest's facts, one line each."""
    data = manifest.data
    source = data["source"]
    lines = [
        f"dataset: {data['name']} split {data['split']}: {data['num_records']} records in "
        f"{len(data['shards'])} shard(s), manifest version {data['version']}",
        f"source: {source['kind']} {source['path']} (fingerprint {source['fingerprint'][:16]})",
        f"writer options: {data['writer_options']}; spread: {data['spread']}",
        "features:",
    ]
    lines += [f"  {feature.name}: {feature.describe()}" for feature in manifest.features]
    lines.append("shards:")
    for shard in data["shards"]:
        lines.append(f"  {shard['file']}: {shard['records']} records, {shard['bytes']} bytes")
    for key, value in data.get("extra", {}).items():
        text = repr(value)
        lines.append(f"{key}: {text if len(text) < 200 else text[:197] + '...'}")
    return lines


def verify(manifest: manifest_module.Manifest) -> list[str]:
    """Every way the shards differ from the manifest; empty when they match exactly."""
    from array_record.python import array_record_module

    problems: list[str] = []
    features = manifest.features
    total = 0
    for shard, where in zip(manifest.data["shards"], manifest.shard_paths):
        name = shard["file"]
        try:
            size = locations.size(where)
        except FileNotFoundError:
            problems.append(f"{name}: missing (the manifest lists it)")
            continue
        if size != shard["bytes"]:
            problems.append(
                f"{name}: {size} bytes, the manifest says {shard['bytes']} (truncated or changed)"
            )
            continue
        with _local_copy(where) as path:
            total += _check_shard(array_record_module, path, shard, len(features), problems)
    if not problems and total != manifest.num_records:
        problems.append(
            f"the shards hold {total} records, the manifest says {manifest.num_records}"
        )
    return problems


@contextlib.contextmanager
def _local_copy(where: str) -> Iterator[str]:
    """A local path of the shard at ``where``: itself, or a temporary download of the object."""
    if not locations.is_remote(where):
        yield where
        return
    with tempfile.TemporaryDirectory(prefix="grainlite-verify-") as folder:
        path = os.path.join(folder, locations.basename(where))
        locations.download(where, path)
        yield path


def _check_shard(
    array_record_module: Any, path: str, shard: dict[str, Any], features: int, problems: list[str]
) -> int:
    """Checks one local shard file against its manifest entry; returns its record count (0 on a
    problem, which is added to ``problems``)."""
    name = shard["file"]
    try:
        reader = array_record_module.ArrayRecordReader(path, "readahead_buffer_size:0")
    except RuntimeError as error:  # Releases that check the file when the reader is made.
        problems.append(f"{name}: not a readable ArrayRecord file ({error})")
        return 0
    try:
        count = reader.num_records() if reader.ok() else None
        if count != shard["records"]:
            problems.append(f"{name}: holds {count} records, the manifest says {shard['records']}")
            return 0
        checksum = RecordChecksum()
        try:
            for start in range(0, count, _READ_BLOCK):
                for record in reader.read(start, min(count, start + _READ_BLOCK)):
                    checksum.add(record)
                    records.split(record, features)
        except (RuntimeError, ValueError) as error:
            problems.append(f"{name}: a record does not read back: {error}")
            return 0
        if checksum.hexdigest() != shard["records_crc32"]:
            problems.append(f"{name}: record checksum differs from the manifest's (changed)")
            return 0
        return int(count)
    finally:
        try:
            reader.close()
        except RuntimeError as error:  # array_record checks the file's end when it closes
            if not any(problem.startswith(f"{name}: ") for problem in problems):
                problems.append(f"{name}: not a readable ArrayRecord file ({error})")
