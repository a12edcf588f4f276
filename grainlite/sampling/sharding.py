"""How a dataset is split between hosts: shard options and the contiguous split they imply.

Each host (JAX process) of a multi-host job reads a disjoint part of the data. Which part is given
by :class:`ShardOptions` (``shard_index`` of ``shard_count``), usually built by
:class:`ShardByJaxProcess`; single-host jobs use :class:`NoSharding`. The reprs of these classes go
into checkpoints (inside the sampler's repr), so they are plain dataclass reprs, as in Grain.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import sys
import warnings

from grainlite.errors import GrainliteTypeError, GrainliteValueError

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """Which shard of the data this host reads.

    Attributes:
      shard_index: this host's shard, in ``[0, shard_count - 1]``.
      shard_count: how many shards the data is split into (usually the number of hosts).
      drop_remainder: if True every shard gets ``num_records // shard_count`` records and the rest
        is dropped, so all hosts read equally many; if False (Grain's default) the first
        ``num_records % shard_count`` shards get one record more.
    """

    shard_index: int
    shard_count: int
    drop_remainder: bool = False

    def __post_init__(self) -> None:
        for name in ("shard_index", "shard_count"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral):
                raise GrainliteTypeError(
                    f"ShardOptions.{name} must be an int, got {type(value).__name__} {value!r}; "
                    f"pass {name}=int(...)."
                )
        if self.shard_count <= 0:
            raise GrainliteValueError(
                f"Number of shards must be a positive integer but got {self.shard_count}. "
                "Pass shard_count >= 1 (the number of hosts reading the data)."
            )
        if self.shard_index < 0 or self.shard_index >= self.shard_count:
            raise GrainliteValueError(
                "Shard shard_index must be in [0, shard_count - 1], shard_count was "
                f"{self.shard_count} and shard_index was {self.shard_index}. Pass a "
                f"shard_index from 0 to {self.shard_count - 1}: shard indices count from 0, as "
                "jax.process_index() does."
            )


class NoSharding(ShardOptions):
    """The whole dataset on one host: ``shard_index=0, shard_count=1``.

    The repr names this class (``NoSharding(shard_index=0, ...)``), as Grain's does, because it is
    part of the sampler repr stored in checkpoints.
    """

    def __init__(self) -> None:
        super().__init__(shard_index=0, shard_count=1, drop_remainder=False)


class ShardByJaxProcess(ShardOptions):
    """One shard per JAX process: ``(jax.process_index(), jax.process_count())``.

    JAX is imported here, when the options are made, never when grainlite is imported. Without JAX
    the options describe a single host, ``(0, 1)``, as in Grain.

    Args:
      drop_remainder: see :class:`ShardOptions`.
    """

    def __init__(self, drop_remainder: bool = False) -> None:
        try:
            import jax
        except ImportError:
            shard_index, shard_count = 0, 1
        else:
            shard_index, shard_count = jax.process_index(), jax.process_count()
        if shard_count == 1:
            _warn_if_torch_ranks()
        super().__init__(
            shard_index=shard_index, shard_count=shard_count, drop_remainder=drop_remainder
        )


_warned_torch_ranks = False


def _warn_if_torch_ranks() -> None:
    """Warns once if torch.distributed runs several ranks: each would read every record.

    Looks at torch only if the program imported it; never imports it.
    """
    global _warned_torch_ranks
    torch = sys.modules.get("torch")
    distributed = getattr(torch, "distributed", None)
    if _warned_torch_ranks or distributed is None or not distributed.is_available():
        return
    if distributed.is_initialized() and distributed.get_world_size() > 1:
        _warned_torch_ranks = True
        warnings.warn(
            f"ShardByJaxProcess() is (0, 1) because JAX runs one process, but torch.distributed "
            f"runs {distributed.get_world_size()} ranks: every rank reads every record. Pass "
            f"shard_options=grainlite.torch.ShardByTorchRank() to give each rank its own shard.",
            UserWarning,
            stacklevel=3,
        )


def block_length(
    num_examples: int, shard_index: int, shard_count: int, drop_remainder: bool
) -> int:
    """How many examples the block of :func:`even_split` holds for this shard (without its
    warning): ``num_examples // shard_count``, plus one for the first ``num_examples %
    shard_count`` shards unless ``drop_remainder``."""
    per_shard, remainder = divmod(num_examples, shard_count)
    return per_shard + int(not drop_remainder and shard_index < remainder)


def even_split(num_examples: int, options: ShardOptions) -> tuple[int, int]:
    """The contiguous block ``[start, end)`` of ``range(num_examples)`` that a shard reads.

    Blocks differ in size by at most one, the first ``num_examples % shard_count`` shards taking
    the extra records; with ``options.drop_remainder`` every block has ``num_examples //
    shard_count`` records and the rest are dropped (a warning says how many).

    Args:
      num_examples: how many examples are split.
      options: the shard to return the block of.

    Returns:
      ``(start, end)``, e.g. ``(5, 9)`` for shard 1 of 2 over 9 examples.
    """
    index, count = options.shard_index, options.shard_count
    per_shard, remainder = divmod(num_examples, count)
    start, end = per_shard * index, per_shard * (index + 1)
    if remainder and options.drop_remainder:
        _LOG.warning(
            "Dropping %d of %d examples so that each of the %d shards reads %d "
            "(drop_remainder=True); pass drop_remainder=False to read them all.",
            remainder,
            num_examples,
            count,
            per_shard,
        )
        return start, end
    return start + min(index, remainder), end + min(index + 1, remainder)
