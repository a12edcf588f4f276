"""Small ArrayRecord files written locally and uploaded to the test S3 server, for the tests of
remote sources and their cache."""

from __future__ import annotations

from pathlib import Path

from grainlite_tests.support.seaweed import S3Server

RECORDS = 300
"""Records per file."""


def record(file: int, index: int) -> bytes:
    """Record ``index`` of file ``file``: its name, then a byte that changes with the index (no
    NUL: batches of bytes strip them)."""
    return f"{file}:{index}:".encode() + bytes([1 + index % 250])


def write_and_upload(server: S3Server, folder: Path, keys: list[str]) -> list[str]:
    """File ``i`` of ``keys`` written into ``folder`` (:data:`RECORDS` records of
    ``record(i, ...)``, group_size:1) and uploaded under its key; returns the local paths."""
    from array_record.python.array_record_module import ArrayRecordWriter

    paths = []
    for file, key in enumerate(keys):
        path = folder / key.rsplit("/", 1)[-1]
        writer = ArrayRecordWriter(str(path), "group_size:1")
        for index in range(RECORDS):
            writer.write(record(file, index))
        writer.close()
        server.put_file(path, key)
        paths.append(str(path))
    return paths
