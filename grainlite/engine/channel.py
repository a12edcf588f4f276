"""A message channel over one end of a socket pair: length-prefixed bytes, both ways.

The worker side needs nothing more, and ``multiprocessing.connection`` costs a worker about 25 ms
of imports at start-up (time to first batch); this uses only ``os``, ``select`` and ``struct``.
"""

from __future__ import annotations

import os
import select
import struct

_HEADER = struct.Struct("!Q")


class Channel:
    """Sends and receives whole messages on file descriptor ``fd`` (a connected stream socket).

    ``recv_bytes`` raises EOFError when the other end has closed; ``send_bytes`` raises
    BrokenPipeError (an OSError) when it is gone.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def send_bytes(self, data: bytes) -> None:
        """Sends one message (its length, then ``data`` itself: a large pipeline is not copied)."""
        parts = [memoryview(_HEADER.pack(len(data))), memoryview(data)]
        while parts:
            written = os.writev(self._fd, parts)
            while parts and written >= len(parts[0]):
                written -= len(parts.pop(0))
            if parts:
                parts[0] = parts[0][written:]

    def recv_bytes(self) -> bytearray:
        """Blocks until one whole message has arrived, and returns it (the buffer it was read
        into: every reader unpickles it, and a copy into ``bytes`` would cost a large
        pipeline's size once more)."""
        (size,) = _HEADER.unpack(self._read_exactly(_HEADER.size))
        return self._read_exactly(size)

    def _read_exactly(self, size: int) -> bytearray:
        buffer = bytearray(size)
        view, done = memoryview(buffer), 0
        while done < size:
            count = os.readv(self._fd, [view[done:]])
            if count == 0:
                raise EOFError("the other end of the channel has closed")
            done += count
        return buffer

    def poll(self) -> bool:
        """True if a message (or the end of the channel) is waiting to be read."""
        readable, _, _ = select.select([self._fd], [], [], 0)
        return bool(readable)

    def close(self) -> None:
        """Closes this end. Idempotent."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
