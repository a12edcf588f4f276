"""Checks of TorchDataLoader arguments that the grainlite DataLoader does not check itself."""

from __future__ import annotations

import warnings

from grainlite.checks import int_option
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.sharding import ShardOptions
from grainlite.torch.tensors import can_pin


def check_options(
    shard_options: object, batches_per_epoch: object, to_torch: object, pin_memory: object
) -> None:
    """Raises, naming the fix, for a bad ``shard_options``, ``batches_per_epoch`` or pin request."""
    if shard_options is not None and not isinstance(shard_options, ShardOptions):
        raise GrainliteTypeError(
            f"shard_options must be a ShardOptions or None, got {type(shard_options).__name__} "
            f"{shard_options!r}; pass None to shard by torch.distributed rank, or "
            f"grain.ShardOptions(shard_index=i, shard_count=n)."
        )
    if batches_per_epoch is not None:
        message = (
            "batches_per_epoch must be an int >= 1 or None, got {value}; pass N to stop every "
            "epoch after N batches, or None for the full epoch."
        )
        try:
            int_option(batches_per_epoch, 1, wrong_type=message, too_small=message)
        except GrainliteTypeError as error:  # a ValueError, as this check has always raised
            raise GrainliteValueError(str(error)) from None
    if pin_memory and not to_torch:
        raise GrainliteValueError(
            "pin_memory=True needs to_torch=True: only torch tensors can be pinned. Pass "
            "to_torch=True, or pin_memory=False to keep numpy arrays."
        )


_warned_no_accelerator = False


def warn_if_cannot_pin() -> bool:
    """True if pinning is possible; else warns (once per process) and returns False."""
    global _warned_no_accelerator
    if can_pin():
        return True
    if not _warned_no_accelerator:
        _warned_no_accelerator = True
        warnings.warn(
            "TorchDataLoader(pin_memory=True): no accelerator is available, so batches are not "
            "pinned (the background thread still reads ahead). Pass pin_memory=False on "
            "CPU-only machines.",
            UserWarning,
            stacklevel=3,
        )
    return False
