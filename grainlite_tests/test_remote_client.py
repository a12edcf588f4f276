"""grainlite.sources.remote: objects read, listed and written on a real S3 server (127.0.0.1)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grainlite.errors import (
    GrainliteValueError,
    RemoteAccessDeniedError,
    RemoteObjectNotFoundError,
    RemoteReadError,
)
from grainlite.sources import remote
from grainlite_tests.support.fault_proxy import FaultProxy, Faults
from grainlite_tests.support.seaweed import S3Server, free_ports


@pytest.fixture(scope="module")
def server(s3_server: S3Server) -> S3Server:
    pytest.importorskip("obstore")
    return s3_server


def test_is_remote_names_s3_and_gs_urls_only():
    assert remote.is_remote("s3://b/k") and remote.is_remote("gs://b/k")
    assert remote.is_remote("GCS://b/k") and remote.is_remote(Path("s3:/b")) is False
    assert not remote.is_remote("/tmp/x") and not remote.is_remote("file:///x")
    assert not remote.is_remote(3)


def test_objects_written_read_back_whole_in_ranges_and_by_seeking(server: S3Server):
    options = server.storage_options()
    url = f"s3://{server.bucket}/client/a.bin"
    data = bytes(range(256)) * 5000
    remote.write_bytes(url, data, options)
    assert remote.object_size(url, options) == len(data)
    assert remote.object_info(url, options).etag
    assert bytes(remote.read_range(url, 1000, 1010, options)) == data[1000:1010]
    with remote.open_read(url, options) as file:
        assert file.seekable()
        file.seek(-7, io.SEEK_END)
        assert file.read() == data[-7:]
        file.seek(12345)
        buffer = bytearray(3)
        assert file.readinto(buffer) == 3 and bytes(buffer) == data[12345:12348]
        file.seek(0)
        assert file.read() == data
    with remote.open_write(f"s3://{server.bucket}/client/w.bin", options) as writer:
        writer.write(b"abc")
        writer.write(memoryview(b"def"))
    assert bytes(remote.read_range(f"s3://{server.bucket}/client/w.bin", 0, 6, options)) == (
        b"abcdef"
    )


def test_list_glob_matches_within_one_path_segment_sorted(server: S3Server):
    options = server.storage_options()
    base = f"s3://{server.bucket}/glob"
    for name in ["b-2.ar", "a-1.ar", "b-10.ar", "sub/c-1.ar", "x.txt"]:
        remote.write_bytes(f"{base}/{name}", b"x", options)
    assert remote.list_glob(f"{base}/*.ar", options) == [
        f"{base}/a-1.ar",
        f"{base}/b-10.ar",
        f"{base}/b-2.ar",
    ]
    assert remote.list_glob(f"{base}/*/c-?.ar", options) == [f"{base}/sub/c-1.ar"]
    assert remote.list_glob(f"{base}/x.txt", options) == [f"{base}/x.txt"]
    assert remote.list_glob(f"{base}/none-*", options) == []


def test_missing_object_is_one_file_not_found_error_naming_the_url(server: S3Server):
    url = f"s3://{server.bucket}/client/missing.bin"
    with pytest.raises(RemoteObjectNotFoundError, match=r"missing\.bin") as caught:
        remote.open_read(url, server.storage_options())
    assert isinstance(caught.value, FileNotFoundError)
    with pytest.raises(FileNotFoundError, match="no-such-bucket"):
        remote.object_size("s3://no-such-bucket/x", server.storage_options())


def test_refused_credentials_are_one_permission_error_naming_the_fix(server: S3Server):
    url = f"s3://{server.bucket}/client/a.bin"
    options = server.storage_options() | {"secret": "wrong"}
    with pytest.raises(RemoteAccessDeniedError, match="AWS_SECRET_ACCESS_KEY") as caught:
        remote.object_size(url, options)
    assert isinstance(caught.value, PermissionError)


def test_unreachable_store_fails_after_the_bounded_retries(server: S3Server):
    (port,) = free_ports(1)
    options = server.storage_options(f"http://127.0.0.1:{port}") | {
        "max_retries": 2,
        "backoff": 0.01,
    }
    with pytest.raises(RemoteReadError, match="failed 3 times"):
        remote.object_size(f"s3://{server.bucket}/x", options)


def test_a_request_the_store_rejects_is_one_error_naming_the_status_not_retried(
    server: S3Server,
):
    # A 400 (a request this store does not take: fake-gcs-server answers obstore's uploads so)
    # comes back the same however often it is asked: one request, one error saying so.
    server.put("client/rejected.bin", b"x" * 10)
    url = f"s3://{server.bucket}/client/rejected.bin"
    with FaultProxy((server.host, server.port), Faults(refuse_status=400)) as proxy:
        options = server.storage_options(proxy.endpoint_url) | {"max_retries": 3, "backoff": 0}
        with pytest.raises(GrainliteValueError) as caught:
            remote.write_bytes(url, b"new", options)
        assert proxy.counts()["refusals"] == 1
    message = str(caught.value)
    assert message.startswith(
        f"object storage refused the PUT of {url!r} with 400 Bad Request ("
    ), message
    assert message.endswith(
        "); asking again would be refused again, so it was not retried: check the URL, the "
        "storage options and that this store supports the request."
    ), message
    assert server.get("client/rejected.bin") == b"x" * 10


def test_throttling_answers_are_retried_up_to_the_bound(server: S3Server):
    # 429 Too Many Requests, like 503 SlowDown, may pass: it is asked again, max_retries times.
    server.put("client/throttled.bin", b"y" * 10)
    url = f"s3://{server.bucket}/client/throttled.bin"
    with FaultProxy((server.host, server.port), Faults(refuse_status=429)) as proxy:
        options = server.storage_options(proxy.endpoint_url) | {"max_retries": 2, "backoff": 0}
        with pytest.raises(RemoteReadError, match="failed 3 times"):
            remote.object_size(url, options)
        assert proxy.counts()["refusals"] == 3


def test_credentials_and_endpoint_come_from_the_environment(server: S3Server):
    # Its own object: with xdist, the tests of this file may run on two workers, two servers.
    server.put("client/env.bin", bytes(range(256)) * 5000)
    code = (
        "from grainlite.sources import remote; "
        f"print(remote.object_size('s3://{server.bucket}/client/env.bin'))"
    )
    env = dict(os.environ, **server.environ())
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == str(256 * 5000)


def test_read_edges_gives_the_size_etag_head_and_tail_in_one_round(server: S3Server):
    from grainlite.sources.remote.objects import read_edges

    options = server.storage_options()
    data = bytes(range(256)) * 1000
    for key, body in [("edges/big", data), ("edges/small", data[:10]), ("edges/empty", b"")]:
        server.put(key, body)
        url = f"s3://{server.bucket}/{key}"
        info, head, tail = read_edges(url, 300, 700, options)
        assert (info.size, info.etag) == (len(body), remote.object_info(url, options).etag)
        assert (bytes(head), bytes(tail)) == (body[:300], body[-700:] if body else b"")


def test_a_streamed_range_cut_midway_is_asked_again_and_consumed_from_its_first_byte(
    server: S3Server,
):
    # The cache writes a part as its chunks arrive: a transfer that drops after some chunks
    # is asked again, and the consumer (a write at offsets and a checksum) starts over.
    from grainlite.sources.remote.objects import STREAM_CHUNK_BYTES, stream_range

    data = os.urandom(4 * STREAM_CHUNK_BYTES + 5)
    server.put("client/streamed.bin", data)
    url = f"s3://{server.bucket}/client/streamed.bin"
    # 8 MB/s: the object takes about half a second, so it is still in flight when it is cut
    with FaultProxy((server.host, server.port), Faults(bandwidth_bps=64e6)) as proxy:
        options = server.storage_options(proxy.endpoint_url) | {"backoff": 0}
        calls: list[list[int]] = []

        def consume(chunks: Iterator[memoryview]) -> bytes:
            sizes: list[int] = []
            calls.append(sizes)
            received = bytearray()
            for chunk in chunks:
                received += chunk
                sizes.append(chunk.nbytes)
                if len(calls) == 1 and len(sizes) == 1:
                    proxy.cut()
            return bytes(received)

        assert stream_range(url, 3, len(data), consume, options) == data[3:]
        assert len(calls) == 2 and calls[0][0] >= STREAM_CHUNK_BYTES
        assert sum(calls[1]) == len(data) - 3
        assert proxy.counts()["requests"] == 2


def test_an_error_of_a_streamed_range_s_consumer_is_raised_once_never_retried(
    server: S3Server,
):
    from grainlite.sources.remote.objects import stream_range

    server.put("client/consumed.bin", b"z" * 100_000)
    url = f"s3://{server.bucket}/client/consumed.bin"
    with FaultProxy((server.host, server.port)) as proxy:
        options = server.storage_options(proxy.endpoint_url) | {"backoff": 0}

        def consume(chunks: Iterator[memoryview]) -> None:
            for _ in chunks:
                raise OSError(28, "No space left on device")  # a write into the cache failed

        with pytest.raises(OSError, match="No space left") as raised:
            stream_range(url, 0, 100_000, consume, options)
        assert type(raised.value) is OSError  # not wrapped as a store failure
        assert proxy.counts()["requests"] == 1
