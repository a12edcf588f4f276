"""s3:// paths for the Parquet and TFRecord datasets, convert's output and inspect, against a real
S3 server (SeaweedFS on 127.0.0.1, the ``s3_server`` fixture).

The promise: a bucket gives what the same files give from local disk (rows, records, states,
converted bytes, inspect's summary and verification), with credentials and the endpoint from the
standard environment variables or ``storage_options``, and a missing object is one
FileNotFoundError naming the URL.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid

import numpy as np
import pytest

import grainlite as grain
from grainlite.__main__ import main
from grainlite.errors import CorruptedDataError, RemoteObjectNotFoundError, RemoteReadError
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, to_plain
from grainlite_tests.support.convert_helpers import convert, folder_bytes
from grainlite_tests.support.tfrecord_frames import RECORDS, frame

pytestmark = pytest.mark.timeout(120)
pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


@pytest.fixture
def env(s3_server, monkeypatch):
    """The server's endpoint and credentials in the standard AWS_* variables."""
    for name, value in s3_server.environ().items():
        monkeypatch.setenv(name, value)
    return s3_server


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _parquet(tmp_path, name="rows.parquet", n=25, nulls=True):
    table = pa.table(
        {
            "id": list(range(n)),
            "text": [f"row {i}" for i in range(n)],
            "score": [None if nulls and i % 7 == 0 else i / 2 for i in range(n)],
            "vec": [[i, i + 1] for i in range(n)],
        }
    )
    path = tmp_path / name
    pq.write_table(table, path, row_group_size=10)  # three row groups
    return str(path)


def _rows(ds):
    """Every row, comparable (repr: a null score is nan, which equals nothing)."""
    with iter(ds) as iterator:
        return [repr(to_plain(row)) for row in iterator]


def test_a_parquet_file_in_a_bucket_reads_as_the_local_file_with_the_standard_variables(
    env, tmp_path
):
    local = _parquet(tmp_path)
    key = f"{_prefix()}/rows.parquet"
    env.put_file(local, key)
    url = env.url(key)
    assert _rows(grain.experimental.ParquetIterDataset(url)) == _rows(
        grain.experimental.ParquetIterDataset(local)
    )


def test_storage_options_reach_the_client_without_any_variable(s3_server, tmp_path):
    local = _parquet(tmp_path)
    key = f"{_prefix()}/rows.parquet"
    s3_server.put_file(local, key)
    options = s3_server.storage_options() | {"allow_http": "true"}
    ds = grain.experimental.ParquetIterDataset(s3_server.url(key), storage_options=options)
    assert _rows(ds) == _rows(grain.experimental.ParquetIterDataset(local))


def test_parquet_urls_resume_at_every_step_and_interleave_like_local_files(env, tmp_path):
    prefix = _prefix()
    # No nulls: the resume check compares rows with ==, and a null score is nan.
    locals_ = [_parquet(tmp_path, f"p{i}.parquet", n=12 + i, nulls=False) for i in range(2)]
    urls = []
    for i, local in enumerate(locals_):
        env.put_file(local, f"{prefix}/p{i}.parquet")
        urls.append(env.url(f"{prefix}/p{i}.parquet"))
    remote = grain.experimental.ParquetIterDataset(urls)
    assert _rows(remote) == _rows(grain.experimental.ParquetIterDataset(locals_))
    assert_dataset_resumes_at_every_step(
        lambda: iter(grain.experimental.ParquetIterDataset(urls[0])), steps=[0, 5, 10, 11, 12]
    )


def test_a_missing_parquet_object_is_one_file_not_found_error_naming_the_url(env):
    url = env.url(f"{_prefix()}/missing.parquet")
    with pytest.raises(RemoteObjectNotFoundError, match=re.escape(url)) as caught:
        next(iter(grain.experimental.ParquetIterDataset(url)))
    assert isinstance(caught.value, FileNotFoundError)


def _tfrecord(records=RECORDS) -> bytes:
    return b"".join(frame(record) for record in records)


def test_a_tfrecord_file_in_a_bucket_reads_and_resumes_as_the_local_file(env, tmp_path):
    records = [*RECORDS, os.urandom(3 << 20)]  # one record spans several ranged reads
    data = _tfrecord(records)
    key = f"{_prefix()}/data.tfrecord"
    env.put(key, data)
    (tmp_path / "data.tfrecord").write_bytes(data)
    remote = grain.experimental.TFRecordIterDataset(env.url(key))
    assert list(remote) == list(
        grain.experimental.TFRecordIterDataset(str(tmp_path / "data.tfrecord"))
    )
    assert list(remote) == records
    assert_dataset_resumes_at_every_step(lambda: iter(remote))


def test_a_damaged_tfrecord_object_is_corrupted_data_naming_the_url_and_offset(env):
    data = bytearray(_tfrecord())
    second = len(frame(RECORDS[0]))
    data[second] ^= 0xFF  # the second record's length (its CRC is always checked)
    key = f"{_prefix()}/bad.tfrecord"
    env.put(key, bytes(data))
    iterator = iter(grain.experimental.TFRecordIterDataset(env.url(key)))
    assert next(iterator) == RECORDS[0]
    with pytest.raises(CorruptedDataError, match=rf"bad\.tfrecord.*offset {second}\b"):
        next(iterator)


def _jsonl(tmp_path, n=40):
    path = tmp_path / "data.jsonl"
    with open(path, "w") as file:
        for i in range(n):
            file.write(json.dumps({"id": i, "name": f"n{i}", "v": [0.25 * i] * 3}) + "\n")
    return path


def _staging_folders() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("grainlite-convert-")}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_convert_writes_into_a_bucket_the_bytes_it_writes_into_a_folder(env, tmp_path, workers):
    source = _jsonl(tmp_path)
    assert convert(source, tmp_path / "local", "--num-shards", "3") == 0
    prefix = _prefix()
    staging_before = _staging_folders()
    assert convert(source, env.url(prefix), "--num-shards", "3", "--workers", workers) == 0
    assert _staging_folders() == staging_before  # the local staging folder is gone
    expected = folder_bytes(tmp_path / "local")
    keys = env.keys(prefix + "/")
    assert sorted(k.rsplit("/", 1)[1] for k in keys) == sorted(expected)
    for name, data in expected.items():
        assert env.get(f"{prefix}/{name}") == data, name


def test_convert_refuses_a_prefix_that_holds_objects_even_with_overwrite(env, tmp_path, capsys):
    prefix = _prefix()
    env.put(f"{prefix}/keep.txt", b"not ours")
    for extra in ([], ["--overwrite"]):
        assert convert(_jsonl(tmp_path), env.url(prefix), *extra) == 2
        assert "already holds 1 object(s) (['keep.txt'])" in capsys.readouterr().err
    assert env.keys(prefix + "/") == [f"{prefix}/keep.txt"]


def test_a_failed_conversion_leaves_no_manifest_in_the_bucket(env, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n{"id": "x"}\n')  # the second row breaks the inferred schema
    prefix = _prefix()
    assert convert(bad, env.url(prefix), "--num-shards", "1") != 0
    assert not [k for k in env.keys(prefix + "/") if k.endswith(".manifest.json")]


def test_inspect_verifies_a_conversion_in_a_bucket_and_catches_a_changed_shard(
    env, tmp_path, capsys
):
    prefix = _prefix()
    assert convert(_jsonl(tmp_path), env.url(prefix), "--num-shards", "2") == 0
    capsys.readouterr()
    assert main(["inspect", env.url(prefix), "--verify", "--records", "0"]) == 0
    out = capsys.readouterr().out
    assert f"manifest: {env.url(prefix)}/data-train.manifest.json\n" in out
    assert "dataset: data split train: 40 records in 2 shard(s)" in out
    assert "verify: OK, 40 records match the manifest\n" in out
    shard = f"{prefix}/data-train.array_record-00001-of-00002"
    data = bytearray(env.get(shard))
    data[len(data) // 2] ^= 0xFF  # same size, changed content
    env.put(shard, bytes(data))
    assert main(["inspect", env.url(prefix), "--verify", "--records", "0"]) == 1
    assert "verify: FAILED" in capsys.readouterr().out


def test_inspect_shows_the_first_records_of_a_conversion_in_a_bucket_as_of_a_folder(
    env, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("GRAINLITE_CACHE_DIR", str(tmp_path / "cache"))
    prefix = _prefix()
    source = _jsonl(tmp_path)
    assert convert(source, env.url(prefix), "--num-shards", "2") == 0
    assert convert(source, tmp_path / "local", "--num-shards", "2") == 0
    capsys.readouterr()
    assert main(["inspect", env.url(prefix), "--records", "3"]) == 0
    remote = capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "local"), "--records", "3"]) == 0
    local = capsys.readouterr().out
    assert "  [2] id: int64 2; name: str 'n2'" in remote
    assert remote.split("features:")[1] == local.split("features:")[1]


def test_inspect_of_an_empty_prefix_says_there_is_no_manifest(env, capsys):
    assert main(["inspect", env.url(_prefix())]) == 2
    assert "holds 0 manifests" in capsys.readouterr().err


def test_an_unreachable_bucket_is_an_error_not_a_hang(env, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    ds = grain.experimental.ParquetIterDataset(
        env.url("x/rows.parquet"), storage_options={"max_retries": 1, "timeout": 2.0}
    )
    with pytest.raises(RemoteReadError, match=re.escape(f"HEAD of {env.url('x/rows.parquet')!r}")):
        next(iter(ds))


def test_numbers_survive_the_trip(env, tmp_path):
    local = _parquet(tmp_path)
    key = f"{_prefix()}/rows.parquet"
    env.put_file(local, key)
    rows = list(grain.experimental.ParquetIterDataset(env.url(key)))
    assert [int(r["id"]) for r in rows] == list(range(25))
    assert np.isnan(rows[7]["score"]) and rows[8]["score"] == 4.0
