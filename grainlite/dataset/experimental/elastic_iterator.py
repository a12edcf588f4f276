"""``ElasticIterator``: global batches over a ``MapDataset``, resumable on any number of shards.

Grain 0.2.18's semantics, learned by running it: the whole job reads the dataset in order, a
global batch of ``global_batch_size`` elements at a time, and shard ``k`` of ``n`` takes every
``n``-th element of each global batch: it yields batches of ``global_batch_size // n`` elements
``ds[g + k], ds[g + k + n], ...`` for ``g`` the global index of the batch. The state is one
number shared by every shard, ``{"global_next_index": g}`` (``g`` grows by ``global_batch_size``
per batch), so a checkpoint taken on ``n`` shards restores on ``m`` shards with another global
batch size: every shard moves to ``g`` and the elements from ``g`` on are read exactly once.

The rules kept from Grain: each shard drops its last short batch (the dataset's tail of fewer than
``global_batch_size`` elements is not delivered), ``global_batch_size`` must divide by the shard
count, and the dataset may not hold a ``filter`` (a shard could not know which global indices its
batch covers). Where those limits matter, the DataLoader's elastic restore
(``docs/how-to/checkpointing.md``) resumes pipelines with filters on another host or worker count.

``multiprocessing_options`` runs each shard's reads in ``mp_prefetch`` workers; the elements and
states do not change with the worker count.
"""

from __future__ import annotations

from typing import Any

from grainlite.checks import int_option
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.map_dataset import MapDataset, first_hole_maker
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.options import ReadOptions
from grainlite.transforms.batch import validate_batch_size


def _holds_filter(ds: MapDataset) -> bool:
    """A filter or flat map (a node that leaves ``None`` holes) at or above ``ds``."""
    return first_hole_maker(ds, count_unknown=False) is not None


class ElasticIterator(DatasetIterator):
    """This shard's batches of the global batches of ``ds``; state ``{"global_next_index": g}``.

    Args:
      ds: the ``MapDataset`` to read (no filter in it).
      global_batch_size: elements per global batch, divisible by the shard count.
      shard_options: this process's ``shard_index`` and the ``shard_count``
        (``grain.sharding.ShardOptions``).
      read_options: the reader threads of each shard (Grain's defaults).
      multiprocessing_options: run the reads in ``mp_prefetch`` workers (None: in this process).

    Raises:
      ValueError: a filter in ``ds``, a global batch size the shard count does not divide, or a
        batch size below 1.
      TypeError: ``ds`` is not a ``MapDataset``.
    """

    def __init__(
        self,
        ds: MapDataset,
        global_batch_size: int,
        shard_options: Any,
        *,
        read_options: Any = None,
        multiprocessing_options: Any = None,
    ) -> None:
        super().__init__()
        if not isinstance(ds, MapDataset):
            raise GrainliteTypeError(
                f"ElasticIterator ds must be a MapDataset (got {type(ds).__name__}); elastic "
                "restore needs random access: pass the MapDataset before to_iter_dataset()."
            )
        if _holds_filter(ds):
            raise GrainliteValueError(
                "ElasticIterator does not support `filter` transformation. A filtered element "
                "would leave a hole in a global batch; filter in the training step, or use the "
                "DataLoader, whose elastic restore resumes filtered pipelines."
            )
        count, index = int(shard_options.shard_count), int(shard_options.shard_index)
        if global_batch_size % count:
            raise GrainliteValueError(
                f"Global batch size {global_batch_size} is not divisible by shard count {count}. "
                "Pass a global_batch_size that is a multiple of the shard count."
            )
        self._batch_size = validate_batch_size(global_batch_size // count)
        self._ds = ds
        self._global_batch_size = int(global_batch_size)
        self._shard_index, self._shard_count = index, count
        self._read_options = ReadOptions() if read_options is None else read_options
        self._mp_options = multiprocessing_options
        self._global_next_index = 0
        self._iterator: DatasetIterator | None = None

    def _start(self) -> DatasetIterator:
        start = self._global_next_index + self._shard_index
        stream: Any = self._ds[start :: self._shard_count].to_iter_dataset(self._read_options)
        stream = stream.batch(self._batch_size, drop_remainder=True)
        if self._mp_options is not None:
            stream = stream.mp_prefetch(self._mp_options)
        return iter(stream)  # type: ignore[no-any-return]

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._start()
        batch = next(self._iterator)
        self._global_next_index += self._global_batch_size
        return batch

    def get_state(self) -> dict[str, Any]:
        """``{"global_next_index": g}``: the global index of the next global batch."""
        return {"global_next_index": self._global_next_index}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to ``state["global_next_index"]`` (saved with any shard count or batch size)."""
        next_index = int_option(  # a numpy integer too, as in Grain; a TypeError as Grain's
            state["global_next_index"],
            0,
            wrong_type="ElasticIterator state global_next_index must be an int (got {type} "
            "{value}); pass a state from ElasticIterator.get_state().",
            too_small="ElasticIterator state global_next_index must be an int >= 0 (got {value}); "
            "pass a state from ElasticIterator.get_state().",
        )
        self._stop()
        self._global_next_index = next_index

    def _stop(self) -> None:
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None

    def close(self) -> None:
        """Stops the shard's readers (and worker processes). Idempotent."""
        self._stop()
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_iterator"] = None  # the copy starts again at global_next_index
        return state

    def __str__(self) -> str:
        return (
            f"ElasticIterator(global_batch_size={self._global_batch_size}, "
            f"shard={self._shard_index}/{self._shard_count})"
        )
