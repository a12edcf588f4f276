"""TorchDataLoader: grainlite's loader as an epoch-by-epoch iterable for PyTorch and Lightning.

Each ``iter()`` is one epoch of this rank's shard (see :mod:`grainlite.torch.epochs`), read by one
grainlite DataLoader whose worker processes live across epochs: a new epoch moves them with
``set_state`` instead of starting new ones. ``iter()`` itself starts nothing (Lightning calls it
once just to probe); the epoch is chosen at the first ``next()``: the epoch set by ``set_epoch`` or
``load_state_dict``, else the one after the previous iteration's.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from grainlite.checks import int_option
from grainlite.engine.producer import value_of
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.loader.arguments import (
    check_source,
    check_worker_buffer_size,
    resolve_worker_count,
)
from grainlite.options import ReadOptions
from grainlite.sampling.index_sampler import IndexSampler
from grainlite.sampling.sharding import NoSharding, ShardOptions
from grainlite.torch import state as state_dict_codec
from grainlite.torch.options import check_options, warn_if_cannot_pin
from grainlite.torch.plan import EpochsIterator, Plan, Settings, check_steps
from grainlite.torch.resources import Fetch, Resources, next_element
from grainlite.torch.sharding import ShardByTorchRank, gather_strings
from grainlite.torch.tensors import start_pinning, to_tensors


class EpochControl:
    """What Lightning and torch find at ``loader.sampler``: ``set_epoch(e)`` moves the loader."""

    def __init__(self, loader: TorchDataLoader) -> None:
        self._loader = weakref.ref(loader)

    def set_epoch(self, epoch: int) -> None:
        """Same as :meth:`TorchDataLoader.set_epoch`."""
        loader = self._loader()
        if loader is not None:
            loader.set_epoch(epoch)


class TorchDataLoader:
    """An iterable of batches for PyTorch and Lightning: one epoch of this rank per ``iter()``.

    Epoch ``e`` on rank ``r`` of ``R`` holds the records, order and per-record rngs of epoch ``e``
    of Grain's endless ``IndexSampler(len(data_source), ShardOptions(r, R), shuffle,
    num_epochs=None, seed)``; batches never straddle epochs. ``len(loader)`` is the batches per
    epoch, the same on every rank: each rank's extra batches are dropped, so DDP ranks stay in
    step. Numeric arrays arrive as ``torch.Tensor`` views of the workers' shared memory (no copy).
    ``state_dict()`` / ``load_state_dict()`` save and restore the position down to the batch, for
    every rank, as a plain JSON-able dict (what Lightning checkpoints).

    Args:
      data_source: a random-access source (``__len__`` and ``__getitem__``).
      operations: the transforms, usually ending with ``grain.Batch(batch_size)``.
      shuffle: reshuffle every epoch (with seed ``seed + epoch``, Grain's rule).
      seed: an int in ``[0, 2**32 - 1]``; needed for ``shuffle`` and RandomMap.
      shard_options: this process's shard; None reads the rank and world size from
        ``torch.distributed`` at first use (:class:`ShardByTorchRank`).
      worker_count: worker processes per rank (0: in this process; None: one per usable CPU).
      worker_buffer_size: finished batches each worker keeps ready.
      read_options: reader threads per process.
      batches_per_epoch: stop every epoch after this many batches. Needed under several ranks when
        a Filter or FlatMap makes the count depend on the data; at most the natural count else.
      to_torch: turn numeric numpy arrays into tensors (False: keep numpy).
      pin_memory: pin batches in a background thread, ready for ``.to(device,
        non_blocking=True)``; without an accelerator it warns and only prefetches.
    """

    def __init__(
        self,
        *,
        data_source: Any,
        operations: Sequence[Any] = (),
        shuffle: bool = False,
        seed: int | None = None,
        shard_options: ShardOptions | None = None,
        worker_count: int | None = 0,
        worker_buffer_size: int = 1,
        read_options: ReadOptions | None = None,
        batches_per_epoch: int | None = None,
        to_torch: bool = True,
        pin_memory: bool = False,
    ) -> None:
        check_source(data_source)
        IndexSampler(len(data_source), NoSharding(), shuffle, None, seed)  # checks seed, shuffle
        worker_count = resolve_worker_count(worker_count)
        worker_buffer_size = check_worker_buffer_size(worker_buffer_size)
        check_options(shard_options, batches_per_epoch, to_torch, pin_memory)
        operations = tuple(operations)
        self._settings = Settings(
            data_source=data_source,
            operations=operations,
            steps=check_steps(operations),
            shuffle=shuffle,
            seed=seed,
            worker_count=worker_count,
            worker_buffer_size=worker_buffer_size,
            read_options=read_options,
            batches_per_epoch=batches_per_epoch,
        )
        self._shard_options = shard_options
        self._to_torch = to_torch
        self._pin = pin_memory and warn_if_cannot_pin()
        self._thread_wanted = pin_memory
        self.sampler = EpochControl(self)
        self.batch_sampler = None  # Lightning looks for set_epoch here too
        self._plan: Plan | None = None
        self._resources = Resources()
        self._finalizer = weakref.finalize(self, self._resources.close)
        self._pending: tuple[int, int, bytes | None] | None = None  # (epoch, batch, state)
        self._cursor: list[int] | None = None  # [epoch, batches delivered] of the bound epoch
        self._bound = 0  # id of the bound iteration; older ones end
        self._last_epoch = -1
        self._rank_state: bytes | None = None  # data-dependent: the state after the last batch

    # Plan ------------------------------------------------------------------------------------
    def _get_plan(self) -> Plan:
        if self._plan is None:
            shard = self._shard_options or ShardByTorchRank()
            self._plan = Plan(self._settings, shard)
        return self._plan

    @property
    def rank(self) -> int:
        """This process's shard index (resolved from torch.distributed at first use)."""
        return self._get_plan().rank

    @property
    def world_size(self) -> int:
        """How many shards there are (resolved from torch.distributed at first use)."""
        return self._get_plan().world_size

    def __len__(self) -> int:
        """Batches per epoch, the same on every rank; TypeError when the data decides it."""
        count = self._get_plan().batches_per_epoch
        if count is None:
            raise GrainliteTypeError(
                "TorchDataLoader has no len(): with a Filter or FlatMap the number of batches "
                "per epoch depends on the data. Pass batches_per_epoch=N for a fixed count."
            )
        return count

    # Epochs ----------------------------------------------------------------------------------
    def _next_epoch(self) -> int:
        return self._pending[0] if self._pending is not None else self._last_epoch + 1

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch``; a no-op if it would be that epoch anyway."""
        message = (
            "set_epoch: epoch must be an int >= 0, got {value}; pass the epoch number (0 for "
            "the first)."
        )
        epoch = int_option(epoch, 0, message, message, wrong_type_error=GrainliteValueError)
        if epoch != self._next_epoch():
            self._pending = (epoch, 0, None)

    def __iter__(self) -> Iterator[Any]:
        """An iterator over one epoch; it starts nothing until its first ``next()``."""
        return _EpochIterator(self)

    def _bind(self) -> int:
        plan = self._get_plan()
        plan.check_iterable()
        self._resources.stop_thread()
        epoch, batch, state = self._pending or (self._last_epoch + 1, 0, None)
        self._pending = None
        if state is None:
            state = plan.state_at(epoch, batch)
        iterator = self._resources.iterator
        if iterator is None:
            iterator = self._resources.iterator = EpochsIterator(plan.loader)
        iterator.set_state(state)  # live workers move there; no new processes
        self._bound += 1
        self._cursor, self._last_epoch, self._rank_state = [epoch, batch], epoch, state
        if self._thread_wanted:
            limit = plan.batches_per_epoch
            left = None if limit is None else max(0, limit - batch)
            self._resources.thread = start_pinning(Fetch(iterator, left, plan), pin=self._pin)
        return self._bound

    def _next_batch(self, bound: int) -> Any:
        cursor, iterator = self._cursor, self._resources.iterator
        if bound != self._bound or cursor is None or iterator is None:
            raise StopIteration  # a newer iteration (or close) ended this one
        plan = self._get_plan()
        limit = plan.batches_per_epoch
        if limit is not None and cursor[1] >= limit:
            raise StopIteration
        thread = self._resources.thread
        if thread is not None:
            item = thread.get()
            element, state = value_of(item), item.state
        else:
            element = next_element(iterator, plan, limit is not None)
            state = iterator.get_state() if plan.settings.data_dependent else None
            if self._to_torch:
                element = to_tensors(element)
        cursor[1] += 1
        if state is not None:
            self._rank_state = state
        return element

    # State -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The position (next epoch and batch) and every rank's Grain state, JSON-able.

        Under several ranks with a Filter or FlatMap this gathers the ranks' states, so every
        rank must call it at the same point (Lightning does when it saves a checkpoint).
        """
        plan = self._get_plan()
        if self._pending is not None:
            epoch, batch, own = self._pending
        elif self._cursor is not None:
            (epoch, batch), own = self._cursor, self._rank_state
        else:
            epoch, batch, own = self._last_epoch + 1, 0, None
        if plan.settings.data_dependent:
            own_state = own or plan.state_at(epoch, 0)
            ranks = gather_strings(own_state.decode())
        else:
            ranks = [plan.state_at(epoch, batch, r).decode() for r in range(plan.world_size)]
        return state_dict_codec.LoaderState(
            epoch, batch, plan.world_size, self._settings.worker_count, tuple(ranks)
        ).to_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Makes the next batch the one after the saved position, on every rank."""
        saved = state_dict_codec.from_dict(state_dict)
        plan = self._get_plan()
        own: bytes | None = None
        if plan.settings.data_dependent:
            if (
                saved.world_size != plan.world_size
                or saved.worker_count != plan.settings.worker_count
            ):
                raise GrainliteValueError(
                    f"TorchDataLoader.load_state_dict: the state was saved by {saved.world_size} "
                    f"rank(s) with worker_count={saved.worker_count}, this loader runs on "
                    f"{plan.world_size} rank(s) with worker_count={plan.settings.worker_count}; "
                    f"with a Filter or FlatMap a mid-epoch position holds only for the same "
                    f"layout. Resume with the same world size and worker_count, or call "
                    f"loader.set_epoch({saved.epoch + (saved.batch > 0)}) to start at an epoch "
                    f"boundary instead."
                )
            own = saved.ranks[plan.rank].encode()
        self._pending = (saved.epoch, saved.batch, own)
        self._resources.stop_thread()
        self._bound += 1
        self._cursor = None

    # Lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stops the pinning thread and the worker processes now. Safe to call twice.

        ``state_dict()`` still reports where the loader stood. It can be iterated again afterwards
        (the next epoch; new workers start).
        """
        self._resources.close()
        self._bound += 1

    @property
    def _iterator(self) -> None:
        """Always None; see the setter."""
        return None

    @_iterator.setter
    def _iterator(self, value: object) -> None:
        # When a fit ends, Lightning's teardown sets `_iterator = None` on every training loader
        # (CombinedLoader.reset), where torch's DataLoader stops its workers: so do we. Nothing is
        # ever stored here.
        if value is None:
            self.close()

    def __enter__(self) -> TorchDataLoader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _EpochIterator(Iterator[Any]):
    """One epoch's batches; the epoch is chosen at the first ``next()``."""

    def __init__(self, loader: TorchDataLoader) -> None:
        self._loader = loader
        self._bound: int | None = None

    def __next__(self) -> Any:
        if self._bound is None:
            self._bound = self._loader._bind()
        return self._loader._next_batch(self._bound)
