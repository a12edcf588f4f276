"""Rank sharding from ``torch.distributed``: one shard of the data per training process.

:class:`ShardByTorchRank` is the twin of :class:`~grainlite.ShardByJaxProcess`: it reads this
process's rank and the world size when it is made, so it must be made after the process group is
initialised (a ``TorchDataLoader`` with ``shard_options=None`` makes one at its first use, which is
inside ``Trainer.fit`` under Lightning). Without an initialised process group it is ``(0, 1)``.
"""

from __future__ import annotations

import torch.distributed

from grainlite.sampling.sharding import ShardOptions


def torch_rank() -> tuple[int, int]:
    """``(rank, world_size)`` of this process, or ``(0, 1)`` if torch.distributed is not running."""
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return distributed.get_rank(), distributed.get_world_size()
    return 0, 1


class ShardByTorchRank(ShardOptions):
    """One shard per ``torch.distributed`` rank: ``(get_rank(), get_world_size())``.

    The rank is read when the options are made. Like every :class:`~grainlite.ShardOptions`, the
    repr goes into checkpoints (inside the sampler's repr).

    Args:
      drop_remainder: see :class:`~grainlite.ShardOptions`.
    """

    def __init__(self, drop_remainder: bool = False) -> None:
        shard_index, shard_count = torch_rank()
        super().__init__(
            shard_index=shard_index, shard_count=shard_count, drop_remainder=drop_remainder
        )


def gather_strings(own: str) -> list[str]:
    """Every rank's ``own`` string, in rank order (just ``[own]`` without torch.distributed).

    A collective: under several ranks every rank must call it at the same point, as Lightning
    does with ``state_dict()`` when it saves a checkpoint.
    """
    world_size = torch_rank()[1]
    if world_size == 1:
        return [own]
    gathered: list[object] = [None] * world_size
    torch.distributed.all_gather_object(gathered, own)
    return [str(item) for item in gathered]
