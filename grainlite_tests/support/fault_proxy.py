"""A TCP proxy on 127.0.0.1 that adds what a network between a trainer and object storage adds.

The kernel here has no ``netem``, so latency and faults are added in user space. ``FaultProxy``
listens on a free loopback port and forwards each connection to ``target`` (an S3 server), adding
per request (an HTTP request on a keep-alive connection is client bytes that begin with a request
line after the previous response):

- ``latency_s`` +- ``jitter_s``: the request is held that long (uniform) before it is forwarded;
- ``bandwidth_bps``: a cap in bits per second on each direction, shared by all connections;
- ``reset_probability``: the request is forwarded, then the response is cut after part of its
  first bytes by a TCP reset (RST) to the client;
- ``stall_probability``: the response is held ``stall_s`` (past the client's timeout) and then
  delivered if the client is still there;
- ``slowdown_probability``: the request is not forwarded; the client gets ``503 SlowDown`` with
  an S3 XML error body and the connection is closed;
- ``refuse_status`` (a 4xx status; 0: off): every request is answered with that status and a
  JSON error body in Google Cloud Storage's shape, and the connection is closed: 401 or 403 as
  a server that refuses the credentials (the GCS emulator checks none), 400 as one that does not
  take the request, 429 as one that throttles.

At most one fault per request, drawn from one ``random.Random(seed)`` in the order requests
arrive (deterministic for a given order of requests). ``counts()`` says what was done; the knobs
can be changed while it runs (``configure``), and ``cut()`` drops the open connections mid-way.
``close()`` stops accepting, closes every connection and joins every thread it started.
``python -m grainlite_tests.support.fault_proxy`` runs one as a process (for benchmarks, so that
its CPU is not the measured process's); ``proxy_process()`` starts that and yields its URL.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http
import json
import random
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

CHUNK = 256 * 1024
# A request line: method, target, version (RFC 9112 §3).
REQUEST_LINE = re.compile(rb"^[A-Z]+ \S+ HTTP/1\.[01]\r?\n")

SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>grainlite-fault-proxy</RequestId></Error>"
)


@dataclasses.dataclass
class Faults:
    """What the proxy adds; every field may be changed while it runs (``FaultProxy.configure``)."""

    latency_s: float = 0.0
    jitter_s: float = 0.0
    bandwidth_bps: float = 0.0  # 0: no cap
    reset_probability: float = 0.0
    stall_probability: float = 0.0
    stall_s: float = 30.0
    slowdown_probability: float = 0.0
    refuse_status: int = 0  # a 4xx: every request answered with it (0: off)


class _Pacer:
    """A cap in bytes per second on one direction, shared by every connection (a virtual clock:
    each send takes its slot after the previous one's; bursts of up to ``burst_s`` pass at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free_at = 0.0

    def wait(
        self, nbytes: int, bits_per_s: float, stop: threading.Event, burst_s: float = 0.002
    ) -> None:
        if bits_per_s <= 0:
            return
        with self._lock:
            now = time.monotonic()
            start = max(self._free_at, now - burst_s)
            self._free_at = start + nbytes * 8 / bits_per_s
            until = self._free_at - burst_s
        delay = until - time.monotonic()
        if delay > 0:
            stop.wait(delay)


class FaultProxy:
    """A loopback TCP proxy in front of ``target`` that adds latency, a bandwidth cap and faults."""

    def __init__(
        self,
        target: tuple[str, int],
        faults: Faults | None = None,
        seed: int = 0,
        port: int = 0,
    ) -> None:
        self.target = target
        self.faults = faults or Faults()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._threads: set[threading.Thread] = set()
        self._sockets: set[socket.socket] = set()
        self._up = _Pacer()
        self._down = _Pacer()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(256)
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, name="fault-proxy-accept")
        self._acceptor.daemon = True
        self._acceptor.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configure(self, **changes: Any) -> None:
        """Changes knobs of ``Faults`` while the proxy runs (e.g. ``reset_probability=0``)."""
        with self._lock:
            self.faults = dataclasses.replace(self.faults, **changes)

    def cut(self) -> None:
        """Cuts every open connection now (the proxy's side shut down both ways): a response in
        flight ends early, as when a connection drops mid-transfer. New connections are served as
        before."""
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def counts(self) -> dict[str, int]:
        """What it did so far: connections, requests, delayed, resets, stalls, slowdowns,
        bytes_up (client to server), bytes_down."""
        with self._lock:
            keys = ("connections", "requests", "delayed", "resets", "stalls", "slowdowns")
            return {**dict.fromkeys(keys, 0), "bytes_up": 0, "bytes_down": 0, **self._counts}

    def close(self) -> None:
        """Stops accepting, closes every connection, joins every thread it started."""
        self._stop.set()
        self._acceptor.join()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join()
        self._listener.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside -----------------------------------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._counts["connections"] += 1
                name = f"fault-proxy-conn-{self._counts['connections']}"
                thread = threading.Thread(target=self._serve, args=(client,), name=name)
                thread.daemon = True
                self._threads.add(thread)
                self._sockets.add(client)
            thread.start()

    def _draw(self) -> tuple[float, str | None]:
        """(delay, fault) for a new request; fault is None, "reset", "stall" or "slowdown"."""
        with self._lock:
            f = self.faults
            self._counts["requests"] += 1
            delay = f.latency_s + (self._rng.uniform(-f.jitter_s, f.jitter_s) if f.jitter_s else 0)
            r = self._rng.random()
            fault = None
            for name, p in (
                ("reset", f.reset_probability),
                ("stall", f.stall_probability),
                ("slowdown", f.slowdown_probability),
            ):
                if r < p:
                    fault = name
                    break
                r -= p
            return max(0.0, delay), fault

    def _serve(self, client: socket.socket) -> None:
        server = None
        try:
            server = socket.create_connection(self.target, timeout=10)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets.add(server)
            self._pump(client, server)
        except OSError:
            pass
        finally:
            for s in (client, server):
                if s is None:
                    continue
                with contextlib.suppress(OSError):
                    s.close()
                with self._lock:
                    self._sockets.discard(s)
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Forwards both ways on this thread; a request waits for the previous response (HTTP/1.1
        without pipelining), so holding one direction while a request is delayed is faithful."""
        client.setblocking(True)
        server.setblocking(True)
        answered = True  # server bytes came since the last request began (or none began yet)
        fault: str | None = None
        held: list[bytes] = []  # a stalled response
        stall_until = 0.0
        with selectors.DefaultSelector() as sel:
            sel.register(client, selectors.EVENT_READ, "up")
            sel.register(server, selectors.EVENT_READ, "down")
            while not self._stop.is_set():
                timeout = 0.1
                if held:
                    timeout = max(0.0, min(timeout, stall_until - time.monotonic()))
                    if timeout == 0.0:
                        data = b"".join(held)
                        held.clear()
                        self._send(client, data, self._down, "bytes_down")
                        continue
                events = sel.select(timeout)
                for key, _ in events:
                    if key.data == "up":
                        data = client.recv(CHUNK)
                        if not data:
                            return
                        if answered and REQUEST_LINE.match(data):
                            answered = False
                            delay, fault = self._draw()
                            if delay > 0:
                                self._count("delayed")
                                if self._stop.wait(delay):
                                    return
                            if fault == "slowdown":
                                self._slowdown(client, data)
                                return
                            if self.faults.refuse_status:
                                self._refuse(client, data, self.faults.refuse_status)
                                return
                        self._send(server, data, self._up, "bytes_up")
                    else:
                        data = server.recv(CHUNK)
                        if not data:
                            if held:
                                continue  # deliver what is held first
                            return
                        answered = True
                        if fault == "reset":
                            self._count("resets")
                            self._send(client, data[: len(data) // 2], self._down, "bytes_down")
                            self._reset(client)
                            return
                        if fault == "stall":
                            fault = None
                            self._count("stalls")
                            stall_until = time.monotonic() + self.faults.stall_s
                            held.append(data)
                            continue
                        if held:
                            held.append(data)
                            continue
                        fault = None
                        self._send(client, data, self._down, "bytes_down")

    def _send(self, sock: socket.socket, data: bytes, pacer: _Pacer, counter: str) -> None:
        view = memoryview(data)
        while view and not self._stop.is_set():
            piece = view[:65536]
            pacer.wait(len(piece), self.faults.bandwidth_bps, self._stop)
            sent = sock.send(piece)
            view = view[sent:]
            self._count(counter, sent)

    def _slowdown(self, client: socket.socket, first: bytes) -> None:
        """Answers ``503 SlowDown`` without forwarding (see :meth:`_answer`)."""
        self._count("slowdowns")
        self._answer(client, first, b"503 Slow Down", b"application/xml", SLOWDOWN_BODY)

    def _refuse(self, client: socket.socket, first: bytes, status: int) -> None:
        """Answers ``status`` (a 4xx) with GCS's JSON error shape, without forwarding."""
        self._count("refusals")
        reason = http.HTTPStatus(status).phrase
        body = json.dumps(
            {"error": {"code": status, "message": f"{reason} (grainlite fault proxy)"}}
        ).encode()
        line = b"%d %s" % (status, reason.encode())
        self._answer(client, first, line, b"application/json", body)

    def _answer(
        self, client: socket.socket, first: bytes, status: bytes, kind: bytes, body: bytes
    ) -> None:
        """Answers ``status`` with ``body`` without forwarding, after reading the request's body
        (if its length is given and the client is not waiting for ``100 Continue``), then
        closes."""
        head, _, rest = first.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        expects = re.search(rb"(?im)^expect:\s*100-continue", head)
        if length and not expects:
            left = int(length.group(1)) - len(rest)
            client.settimeout(5)
            with contextlib.suppress(OSError):
                while left > 0:
                    data = client.recv(min(left, CHUNK))
                    if not data:
                        break
                    left -= len(data)
        response = (
            b"HTTP/1.1 %s\r\nContent-Type: %s\r\n"
            b"Content-Length: %d\r\nConnection: close\r\nRetry-After: 0\r\n\r\n"
            % (status, kind, len(body))
        ) + body
        with contextlib.suppress(OSError):
            client.sendall(response)
            client.shutdown(socket.SHUT_WR)

    @staticmethod
    def _reset(sock: socket.socket) -> None:
        """Closes with a TCP reset (SO_LINGER 0) rather than an orderly FIN."""
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


# -- as a process ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True, help="host:port of the server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    for f in dataclasses.fields(Faults):
        parser.add_argument("--" + f.name.replace("_", "-"), type=float, default=f.default)
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    faults = Faults(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Faults)})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with FaultProxy((host, int(port)), faults, seed=args.seed, port=args.port) as proxy:
        print(json.dumps({"port": proxy.port}), flush=True)
        stop.wait()
        print(json.dumps(proxy.counts()), flush=True)


@contextlib.contextmanager
def proxy_process(
    target: tuple[str, int], faults: Faults, seed: int = 0, python: str = sys.executable
) -> Iterator[tuple[str, dict[str, int]]]:
    """Runs a ``FaultProxy`` in a process of its own; yields (endpoint URL, counts) where counts is
    filled with what it did once the block ends (the process is stopped and reaped)."""
    argv = [
        python,
        "-m",
        "grainlite_tests.support.fault_proxy",
        f"--target={target[0]}:{target[1]}",
    ]
    argv += [f"--seed={seed}"]
    argv += [
        f"--{f.name.replace('_', '-')}={getattr(faults, f.name)}"
        for f in dataclasses.fields(faults)
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    counts: dict[str, int] = {}
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fault proxy process ended at start: {argv}")
        port = json.loads(line)["port"]
        yield f"http://127.0.0.1:{port}", counts
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            out, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        with contextlib.suppress(ValueError, IndexError):
            counts.update(json.loads(out.strip().splitlines()[-1]))


if __name__ == "__main__":
    main()
