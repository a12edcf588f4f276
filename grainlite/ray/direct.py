"""A socket of grainlite's own between the training process and its actors on the same host.

Through Ray, every element costs an actor call (its credit and the request for the next reply)
and the reply: about 0.6 ms of the training process's CPU and 1 ms of the actor's per element,
which on small elements is a third of the rate of local workers. An actor that shares the
training process's shared memory (:func:`grainlite.shm.memory_key`) is on its host, so it can
speak the engine's protocol to it as a local worker does, over a stream socket
(:class:`~grainlite.engine.channel.Channel`); Ray keeps the actor's placement, its lifetime and
the reports of its death.

The training process listens on a Unix socket in the abstract namespace (Linux: no file to leave
behind, gone with the process), named at random. Each actor connects as it starts and sends a
secret of 32 random bytes the parent gave it (through Ray) and its worker number; the parent
admits only connections that present the secret. An actor that cannot connect (another network
namespace, a platform without abstract sockets) says so, and the parent talks to it through Ray
calls as before: the choice is made per actor and costs nothing when it fails.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import select
import socket
import struct
import time

from grainlite.engine.channel import Channel

_SECRET_BYTES = 32
_WORKER = struct.Struct("!I")
HANDSHAKE_BYTES = _SECRET_BYTES + _WORKER.size
HANDSHAKE_WAIT_S = 5.0  # a connection that has not sent its handshake by then is dropped

Address = tuple[str, bytes, int]
"""What an actor needs to connect: the socket's name, the secret and its worker number."""


class DirectListener:
    """The training process's end: accepts each actor's connection and hands out its channel."""

    def __init__(self, count: int) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.name = f"\0grainlite-{os.getpid()}-{secrets.token_hex(12)}"
            self._socket.bind(self.name)
            self._socket.listen(max(count, 8))
        except BaseException:
            self._socket.close()
            raise
        self._secret = secrets.token_bytes(_SECRET_BYTES)
        self._admitted: dict[int, socket.socket] = {}

    @classmethod
    def open(cls, count: int) -> DirectListener | None:
        """A listener for ``count`` actors, or None where this platform has no abstract socket."""
        if not hasattr(socket, "AF_UNIX"):
            return None
        try:
            return cls(count)
        except OSError:
            return None

    def address(self, worker: int) -> Address:
        """What actor ``worker`` is given to connect with."""
        return self.name, self._secret, worker

    def channel(self, worker: int, wait_s: float = HANDSHAKE_WAIT_S) -> Channel | None:
        """The channel of actor ``worker``, which said it connected; None if it does not show up
        within ``wait_s`` seconds. Connections of other actors met meanwhile are kept."""
        deadline = time.monotonic() + wait_s
        while worker not in self._admitted:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([self._socket], [], [], left)
            if readable:
                self._admit(*self._socket.accept())
        return Channel(self._admitted.pop(worker).detach())

    def _admit(self, conn: socket.socket, _: object) -> None:
        """Keeps ``conn`` under its worker number if it presents the secret; else closes it."""
        try:
            conn.settimeout(HANDSHAKE_WAIT_S)
            handshake = _read_exactly(conn, HANDSHAKE_BYTES)
            conn.setblocking(True)
        except OSError:
            conn.close()
            return
        if handshake is None or not hmac.compare_digest(handshake[:_SECRET_BYTES], self._secret):
            conn.close()
            return
        (worker,) = _WORKER.unpack(handshake[_SECRET_BYTES:])
        old = self._admitted.pop(worker, None)
        if old is not None:
            old.close()
        self._admitted[worker] = conn

    def close(self) -> None:
        """Stops listening and closes connections not handed out. Idempotent."""
        self._socket.close()
        for conn in self._admitted.values():
            conn.close()
        self._admitted.clear()


def connect(address: Address) -> Channel | None:
    """The actor's end: connects to the training process's listener and sends the handshake.

    None when it cannot (the actor then speaks through Ray calls)."""
    name, secret, worker = address
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(HANDSHAKE_WAIT_S)
        conn.connect(name)
        conn.sendall(secret + _WORKER.pack(worker))
        conn.setblocking(True)
    except OSError:
        conn.close()
        return None
    return Channel(conn.detach())


def _read_exactly(conn: socket.socket, size: int) -> bytes | None:
    """``size`` bytes from ``conn``, or None if it closes first."""
    data = b""
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            return None
        data += part
    return data


def close_all(channels: list[Channel | None]) -> None:
    """Closes the channels of a group (its actors then see the end of their channel)."""
    for channel in channels:
        if channel is not None:
            with contextlib.suppress(OSError):
                channel.close()
