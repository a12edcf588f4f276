"""Connecting to Ray for :class:`grainlite.ray.RayWorkers`, within a time bound.

``ray.init()`` waits without end for a cluster address that nothing answers: the address in the
``ray_current_cluster`` file that a ``ray start`` left behind when its head is gone, a stale
``RAY_ADDRESS``, a wrong ``address=``. A loader must not inherit that. Before ``ray.init`` this
module finds the address Ray would use and where it came from (Ray's own rules: the argument;
for ``None`` or ``"auto"``, ``RAY_ADDRESS``, then the ``ray_current_cluster`` file of Ray's temp
dir), and asks it the first question of every gRPC client: a TCP connection and the HTTP/2
preface, which Ray's head (GCS) and Ray Client server answer with their settings at once. It
asks again until ``timeout_s`` has passed, then raises
:class:`~grainlite.errors.ClusterConnectionError` naming the address, its source and the fix.
The probe is one socket, closed before returning: nothing is left behind, and ``ray.init`` is
called only with an address that answers. ``address="local"`` (a fresh local instance) and no
address at all (Ray starts one) need no probe.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Any

from grainlite.errors import ClusterConnectionError

_RETRY_S = 0.25  # a refused connection is asked again (a head may be starting)
# The client preface and an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS = 4  # HTTP/2 frame type of the server's first frame


def connect(ray: Any, address: str | None, timeout_s: float) -> None:
    """``ray.init(address=address)`` if this process is not connected, within ``timeout_s`` s.

    Raises ClusterConnectionError if the address Ray would use does not answer in time.
    """
    if ray.is_initialized():
        return
    target = resolve(address)
    if target is not None:
        where, source = target
        why = probe(where, timeout_s)
        if why is not None:
            raise unreachable(where, source, timeout_s, why)
    ray.init(address=address, log_to_driver=True)


def resolve(address: str | None) -> tuple[str, str] | None:
    """The address ``ray.init(address=address)`` connects to and where it comes from; None when
    Ray starts a new local instance (``"local"``, or nothing found)."""
    if address == "local":
        return None
    if address not in (None, "auto"):
        return str(address), "the address= argument of RayWorkers"
    from_env = os.environ.get("RAY_ADDRESS", "")
    if from_env == "local":
        return None
    if from_env and from_env != "auto":
        return from_env, "the RAY_ADDRESS environment variable"
    path = address_file()
    with contextlib.suppress(OSError):
        with open(path) as file:
            recorded = file.read().strip()
        if recorded:
            return recorded, (
                f"the file {path}, which `ray start` writes on this machine (the head it "
                f"names may be gone)"
            )
    return None  # "auto" with no file: Ray looks for a running head itself, and says so


def address_file() -> str:
    """Ray's ``ray_current_cluster`` file (its temp dir: RAY_TMPDIR, TMPDIR or /tmp, + ray)."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, "ray", "ray_current_cluster")


def probe(address: str, timeout_s: float) -> str | None:
    """None once ``address`` answers as a gRPC server within ``timeout_s``; else why not."""
    try:
        host, port = _host_port(address)
    except ValueError as error:
        return str(error)
    deadline = time.monotonic() + timeout_s
    why = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return why
        try:
            with socket.create_connection((host, port), timeout=left) as sock:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                sock.sendall(_HTTP2_PREFACE)
                reply = sock.recv(9)
            if len(reply) >= 4 and reply[3] == _SETTINGS:
                return None
            why = "something answered the connection, but not as a Ray cluster does"
        except TimeoutError:
            return "no answer"
        except OSError as error:
            why = error.strerror or str(error)
        time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))


def _host_port(address: str) -> tuple[str, int]:
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def unreachable(address: str, source: str, timeout_s: float, why: str) -> ClusterConnectionError:
    """The error for a cluster address that did not answer within ``timeout_s``."""
    return ClusterConnectionError(
        f"No Ray cluster answers at {address[:200]!r} (from {source}) within {timeout_s:g} s: "
        f"{why}. ray.init() would wait for it without end. If that cluster is gone, run "
        f"`ray stop` (it also removes the stale ray_current_cluster file), or give "
        f"RayWorkers(address='local') to start a fresh local Ray instance; otherwise start the "
        f"cluster, fix the address, or allow longer with RayWorkers(connect_timeout_s=...)."
    )
