"""TFRecord framing written by the tests themselves (no TensorFlow): records, CRC-32C, frames."""

from __future__ import annotations

import struct

RECORDS = [b"hello", b"", b"world!!", bytes(range(256)) * 5, b"\x00" * 3]


def crc32c(data: bytes) -> int:
    """CRC-32C bit by bit (the test's own, independent of the module's table)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    """The masked CRC that TFRecord stores after the length and after the data."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    """One record framed as a TFRecord file holds it."""
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked(length)) + record + struct.pack("<I", masked(record))
