"""Input kind ``jsonl``: JSON Lines, one JSON object per non-empty line, one record per object.

The schema comes from the whole file: every object must have the same keys, and each key one kind
of value: integers (int64), numbers with a fraction or exponent (float64), booleans, strings, or
nested lists of numbers (arrays; a dimension whose length differs between lines is ``None``).
A line that breaks this gets an error naming the file, the line and the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert.features import Feature, array_feature, merge_shapes
from grainlite.tools.convert.source import InputSource


@dataclass
class JsonLinesSource(InputSource):
    """The objects of a JSON Lines file; ``offsets`` and ``lines`` locate each one."""

    offsets: list[int] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)

    def read(self, start: int, stop: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """Objects ``[start, stop)``, as typed by the schema."""
        with open(self.path, "rb") as file:
            file.seek(self.offsets[start])
            for index in range(start, stop):
                where = f"{self.path} line {self.lines[index]}"
                line = file.readline()
                while not line.strip():  # Blank lines are skipped, as when scanning.
                    line = file.readline()
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise GrainliteValueError(
                        f"{where} is not JSON any more: {self.path} changed after convert "
                        f"scanned it; convert it again once nothing writes to it."
                    ) from None
                yield where, _typed(self.features, row, where)


def _typed(features: tuple[Feature, ...], row: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for feature in features:
        value = row.get(feature.name)
        out[feature.name] = (
            np.asarray(value, dtype=feature.dtype) if feature.kind == "array" else value
        )
    return out


def _kind(value: Any, where: str, key: str) -> tuple[str, str, tuple[int, ...]]:
    """(kind, dtype, shape) of one JSON value."""
    if isinstance(value, str):
        return "str", "", ()
    if isinstance(value, bool):
        return "array", "|b1", ()
    if isinstance(value, int):
        return "array", "<i8", ()
    if isinstance(value, float):
        return "array", "<f8", ()
    if isinstance(value, list):
        array = np.asarray(value) if _regular(value) else None
        if array is not None and array.size == 0:
            return "array", "", array.shape  # Empty: its dtype comes from the other lines.
        if array is not None and array.dtype.kind in "biuf":
            dtype = (
                "<f8" if array.dtype.kind == "f" else "|b1" if array.dtype.kind == "b" else "<i8"
            )
            return "array", dtype, array.shape
    raise GrainliteValueError(
        f"{where}: key {key!r} holds {json.dumps(value)[:60]}; convert stores strings, numbers, "
        f"booleans and (nested) lists of numbers of regular shape: change the value, "
        f"or leave the key out of every line."
    )


def _regular(value: list[Any]) -> bool:
    try:
        return np.asarray(value).dtype != object
    except ValueError:  # Ragged nested lists.
        return False


def open_jsonl(path: str) -> JsonLinesSource:
    """Scans ``path`` once: the offset of every object, and the schema they share."""
    offsets: list[int] = []
    lines: list[int] = []
    schema: dict[str, tuple[str, str, tuple[int | None, ...]]] = {}
    keys: list[str] = []
    with open(path, "rb") as file:
        offset = 0
        for number, line in enumerate(file, start=1):
            where = f"{path} line {number}"
            if line.strip():
                try:
                    row = json.loads(line.rstrip(b"\r\n"))
                except json.JSONDecodeError as error:
                    raise GrainliteValueError(
                        f"{where} is not JSON ({error.msg} at column {error.colno}); write one "
                        f"JSON object per line."
                    ) from None
                if not isinstance(row, dict):
                    raise GrainliteValueError(
                        f"{where} holds a JSON {type(row).__name__}, not an object; write one "
                        f'JSON object ({{"key": value, ...}}) per line.'
                    )
                if not offsets:
                    keys = list(row)
                elif sorted(row) != sorted(keys):
                    raise GrainliteValueError(
                        f"{where} has the keys {sorted(row)} but line {lines[0]} has "
                        f"{sorted(keys)}; every line must have the same keys (mixed schemas): "
                        f"add the missing keys or convert the kinds of lines separately."
                    )
                for key in keys:
                    _merge(schema, key, _kind(row[key], where, key), where)
                offsets.append(offset)
                lines.append(number)
            offset += len(line)
    if not offsets:
        raise GrainliteValueError(f"{path} holds no JSON objects; write one object per line.")
    features = tuple(
        array_feature(key, schema[key][1] or "<f8", schema[key][2])
        if schema[key][0] == "array"
        else Feature(key, schema[key][0])
        for key in keys
    )
    return JsonLinesSource(
        "jsonl", path, features, len(offsets), offset, offsets=offsets, lines=lines
    )


def _merge(
    schema: dict[str, tuple[str, str, tuple[int | None, ...]]],
    key: str,
    seen: tuple[str, str, tuple[int, ...]],
    where: str,
) -> None:
    known = schema.get(key)
    if known is None:
        schema[key] = seen
        return
    shape = merge_shapes(known[2], seen[2])
    dtype = known[1] or seen[1]
    if known[0] != seen[0] or (known[1] and seen[1] and known[1] != seen[1]) or shape is None:
        raise GrainliteValueError(
            f"{where}: key {key!r} holds {_name(seen)} but earlier lines hold {_name(known)}; "
            f"a key must hold one kind of value on every line (mixed schemas): write e.g. 1.0 "
            f"instead of 1 where a key holds floats, and lists of one depth."
        )
    schema[key] = (known[0], dtype, shape)


def _name(kind: tuple[str, str, tuple[Any, ...]]) -> str:
    names = {"<i8": "integers", "<f8": "floats", "|b1": "booleans", "": "nothing"}
    if kind[0] != "array":
        return "strings"
    return names[kind[1]] if not kind[2] else f"{len(kind[2])}-deep lists of {names[kind[1]]}"
