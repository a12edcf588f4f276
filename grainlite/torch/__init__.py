"""grainlite for PyTorch and Lightning: :class:`TorchDataLoader` and :class:`ShardByTorchRank`.

A TorchDataLoader drops into a Lightning ``DataModule`` or a plain torch loop: it shards by
``torch.distributed`` rank, reshuffles every epoch, has a ``len()``, yields tensors without
copying, and saves its position down to the batch in ``state_dict()``.

torch (``pip install 'grainlite[torch]'``) is imported when one of these names is first used, not
by ``import grainlite`` and not by the worker processes, which unpickle only the torch-free parts
(:mod:`grainlite.torch.epochs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grainlite._optional import require

if TYPE_CHECKING:
    from grainlite.torch.loader import TorchDataLoader
    from grainlite.torch.sharding import ShardByTorchRank

__all__ = ["ShardByTorchRank", "TorchDataLoader"]


def __getattr__(name: str) -> Any:
    if name == "TorchDataLoader":
        require("torch", "torch", "grainlite.torch.TorchDataLoader")
        from grainlite.torch.loader import TorchDataLoader

        return TorchDataLoader
    if name == "ShardByTorchRank":
        require("torch", "torch", "grainlite.torch.ShardByTorchRank")
        from grainlite.torch.sharding import ShardByTorchRank

        return ShardByTorchRank
    raise AttributeError(f"module 'grainlite.torch' has no attribute {name!r}")
