"""Shim for in-flight branches; remove after merge: see :mod:`grainlite.engine.failures`."""

from grainlite.engine.failures import FailedElement, describe_operation, fail, hide_internal_frames

__all__ = ["FailedElement", "describe_operation", "fail", "hide_internal_frames"]
