"""The record types that flow through the loader: a sampler's metadata and the data it selects.

A sampler turns a global index into :class:`RecordMetadata` (which record to read, and the random
generator for it); the reader pairs that metadata with the data source's element as a
:class:`Record`. Both are slotted dataclasses, as in Grain, because one is made for every record.
"""

from __future__ import annotations

import dataclasses
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


@dataclasses.dataclass(slots=True)
class RecordMetadata:
    """Where a record sits in the stream and how to randomize its transforms.

    Attributes:
      index: the global sampler index of the record: its position in the stream shared by all hosts.
        Checkpoints count in these indices and the per-record generator is seeded from it.
      record_key: the key to read from the data source (``source[record_key]``), or None once a
        transform made the key meaningless (for example a batch of several records).
      rng: the generator a RandomMap receives, ``Generator(Philox(key=seed + index))``, or None when
        the sampler has no seed.
    """

    index: int
    record_key: int | None = None
    rng: np.random.Generator | None = None

    def remove_record_key(self) -> RecordMetadata:
        """Returns a copy without the record key, for outputs built from several records."""
        return RecordMetadata(index=self.index, record_key=None, rng=self.rng)

    def __str__(self) -> str:
        """Like the repr, but names the generator without its memory address, as Grain does.

        ``RecordMetadata(index=0, record_key=0, rng=Generator(PCG64))``: stable text for logs.
        """
        return (
            f"RecordMetadata(index={self.index}, record_key={self.record_key}, "
            f"rng={_describe_rng(self.rng)})"
        )


def _describe_rng(rng: object) -> str:
    """``Generator(Philox)`` for a numpy generator, ``None`` for None, else the object's repr."""
    if rng is None:
        return "None"
    bit_generator = getattr(rng, "bit_generator", None)
    if bit_generator is None:
        return repr(rng)
    return f"{type(rng).__name__}({type(bit_generator).__name__})"


@dataclasses.dataclass(slots=True)
class Record(Generic[T]):
    """One element in flight: its sampler metadata and its (possibly transformed) data.

    Attributes:
      metadata: the sampler's metadata for this element.
      data: the element itself, as read from the source or produced by the transforms so far.
    """

    metadata: RecordMetadata
    data: T
