"""The byte layout of one converted record: a small header and one payload per feature, no pickle.

Layout (all integers little endian)::

    b"GLR1"                      4 bytes, the layout's name and version
    n                            uint32, the number of features (as in the manifest)
    len_0 ... len_{n-1}          n x uint64, the byte length of each payload
    payload_0 ... payload_{n-1}  in the manifest's feature order

A payload is the value's bytes: ``image`` and ``bytes`` as they are, ``str`` as UTF-8, and an
``array`` as ``ndim`` (uint8), ``ndim`` x uint64 dimensions, then its elements in C order with the
manifest's (little-endian) dtype. Decoding reads only these numbers and ``np.frombuffer``: data
read from disk is never unpickled or evaluated.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert.features import Feature, check_array_value

MAGIC = b"GLR1"
_COUNT = struct.Struct("<I")


def encode(features: Sequence[Feature], example: Mapping[str, Any], where: str) -> bytes:
    """The record of ``example``, checked against ``features``; ``where`` names it in errors."""
    return Encoder(features)(example, where)


class Encoder:
    """Encodes records of one feature list; built once per shard, it keeps the per-record work
    to the checks and copies each value needs: a value of the exact expected type (bytes, str,
    a numpy scalar of the feature's dtype) takes a fast path, anything else the checked one."""

    def __init__(self, features: Sequence[Feature]) -> None:
        self.features = tuple(features)
        self.names = [feature.name for feature in self.features]
        self.header = struct.Struct(f"<4sI{len(self.features)}Q")
        self.count = len(self.features)
        # Per feature: the one type that needs no conversion, and its encoding.
        self.fast: list[tuple[type, Any]] = [_fast_path(feature) for feature in self.features]

    def __call__(self, example: Mapping[str, Any], where: str) -> bytes:
        """The record of ``example``; ``where`` names it in errors."""
        if len(example) != self.count:
            raise _fields_error(example, self.names, where)
        try:
            values = [example[name] for name in self.names]
        except KeyError:
            raise _fields_error(example, self.names, where) from None
        payloads = [
            fast(value) if type(value) is kind else _payload(feature, value, where)
            for value, (kind, fast), feature in zip(values, self.fast, self.features)
        ]
        header = self.header.pack(MAGIC, self.count, *map(len, payloads))
        return b"".join([header, *payloads])


class _Never:
    """A type no value has: features without a fast path."""


def _scalar_payload(value: np.generic) -> bytes:
    return b"\0" + value.tobytes()  # ndim 0, then the element


def _fast_path(feature: Feature) -> tuple[type, Any]:
    if feature.kind == "str":
        return str, str.encode
    if feature.kind in ("bytes", "image"):
        return bytes, bytes  # bytes(b) is b itself: no copy
    if feature.shape == ():
        return np.dtype(feature.dtype).type, _scalar_payload
    return _Never, None  # Arrays always take the checked path.


def _fields_error(example: Mapping[str, Any], names: list[str], where: str) -> Exception:
    return GrainliteValueError(
        f"{where}: holds the fields {sorted(example)} but earlier records hold {names}; every "
        f"record must have the same fields (mixed schemas): make the source consistent or "
        f"convert the parts separately."
    )


def _payload(feature: Feature, value: Any, where: str) -> bytes:
    kind = feature.kind
    if kind == "array":
        array = check_array_value(feature, value, where)
        if array.ndim == 0:
            return b"\0" + array.tobytes()
        dims = struct.pack(f"<B{array.ndim}Q", array.ndim, *array.shape)
        return dims + array.tobytes(order="C")
    if kind == "str" and isinstance(value, str):
        return value.encode("utf-8")
    if kind != "str" and isinstance(value, bytes):
        return value
    if kind != "str" and isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise GrainliteValueError(
        f"{where}: feature {feature.name!r} holds {type(value).__name__} {_short(value)} here but "
        f"is {feature.kind} in earlier records; every record must hold the same kind of value "
        f"under a name (mixed schemas): make the source consistent."
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def split(record: bytes, count: int) -> list[memoryview]:
    """The ``count`` payloads of ``record``, or an error saying the record is not of this layout."""
    view = memoryview(record)
    if view[:4] != MAGIC or len(view) < 8 or _COUNT.unpack_from(view, 4)[0] != count:
        raise GrainliteValueError(
            f"A record does not start with the GLR1 header for {count} features (it starts with "
            f"{bytes(view[:8])!r}); decode only files written by python -m grainlite convert, "
            f"with the manifest written beside them."
        )
    lengths = struct.unpack_from(f"<{count}Q", view, 8)
    payloads, offset = [], 8 + 8 * count
    for length in lengths:
        payloads.append(view[offset : offset + length])
        offset += length
    if offset != len(view):
        raise GrainliteValueError(
            f"A record's header announces {offset} bytes but it holds {len(view)}; the file is "
            f"damaged: run python -m grainlite inspect --verify on it."
        )
    return payloads


def decode_payload(feature: Feature, payload: memoryview) -> Any:
    """The value of one payload: bytes, str, or a numpy array (a numpy scalar for shape ``()``)."""
    if feature.kind == "array":
        ndim = payload[0]
        dims = struct.unpack_from(f"<{ndim}Q", payload, 1)
        array = np.frombuffer(payload, dtype=feature.dtype, offset=1 + 8 * ndim).reshape(dims)
        return array[()] if ndim == 0 else array
    if feature.kind == "str":
        return str(payload, "utf-8")
    return bytes(payload)
