"""What every input kind provides to the converter: its records in a fixed order, and its schema.

An input source is small and picklable (paths and the schema, no open files), so the converter
can send it to worker processes, and each worker reads only the records of its own shards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from grainlite.tools.convert.features import Feature


@dataclass
class InputSource:
    """Base class of the input kinds; subclasses fill in the fields and implement :meth:`read`.

    Attributes:
      kind: the input kind's name (``images``, ``numpy``, ``jsonl``, ``parquet``, ``tfds``, ``hf``).
      path: the source as given (a file, a folder, or ``tfds:<name>``).
      features: every record's features, in record order.
      num_records: how many records the source has.
      size_bytes: about how many bytes the records hold (chooses the default shard count).
      extra: more facts for the manifest (e.g. an image folder's class names).
    """

    kind: str
    path: str
    features: tuple[Feature, ...] = ()
    num_records: int = 0
    size_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def read(self, start: int, stop: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """Records ``[start, stop)`` in order as ``(where, example)``; ``where`` names the record
        for error messages."""
        raise NotImplementedError

    def fingerprint_files(self) -> list[str]:
        """Files whose contents the source fingerprint covers (hashed once, by the converter);
        the fingerprint also covers every record the source gave."""
        return [self.path] if os.path.isfile(self.path) else []

    def close(self) -> None:
        """Releases what :meth:`read` opened in this process (nothing, unless overridden)."""
