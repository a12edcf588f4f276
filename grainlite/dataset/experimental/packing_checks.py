"""Shim for in-flight branches; remove after merge: see grainlite.transforms.packing.checks."""

from grainlite.transforms.packing.checks import (
    check_count,
    check_group_by,
    check_state,
    make_spec,
    sequence_lengths,
)

__all__ = ["check_count", "check_group_by", "check_state", "make_spec", "sequence_lengths"]
