"""The checks of the loader arguments that every loader shares (the DataLoader, and
``grainlite.torch.TorchDataLoader`` on top of it): one rule and one message per argument."""

from __future__ import annotations

from typing import Any

from grainlite.checks import int_option
from grainlite.cpus import usable_cpu_count
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.sharding import ShardOptions


def resolve_worker_count(worker_count: int | None) -> int:
    """``worker_count`` checked; None becomes one worker per usable CPU."""
    if worker_count is None:
        return usable_cpu_count()
    fix = (
        "pass 0 to run in this process, N >= 1 for N worker processes or None for one per "
        "usable CPU."
    )
    return int_option(
        worker_count,
        0,
        wrong_type=f"worker_count must be an int or None, got {{type}} {{value}}; {fix}",
        # Grain's words up to the value; users match on them.
        too_small="Worker count should be greater than or equal zero. Current worker_count is "
        f"{{value}}; {fix}",
    )


# What to pass for a bad worker_buffer_size: any N >= 0, as in Grain (0 works as 1).
_BUFFER_FIX = (
    "pass worker_buffer_size=N with N >= 0 to keep up to N finished elements ready per worker "
    "(0 works as 1)."
)


def check_worker_buffer_size(worker_buffer_size: object) -> int:
    """``worker_buffer_size`` if it is an int >= 0 (0 works as 1, as in Grain), else raises."""
    return int_option(
        worker_buffer_size,
        0,
        wrong_type=f"worker_buffer_size must be an int, got {{type}} {{value}}; {_BUFFER_FIX}",
        # Grain's words up to the value; users match on them.
        too_small="Worker buffer size must be greater than or equal zero. Current "
        f"worker_buffer_size is {{value}}; {_BUFFER_FIX}",
    )


def resolve_shard_options(shard_options: ShardOptions | None, sampler: Any) -> ShardOptions:
    """The loader's shard options: those given, else the sampler's; an error if neither."""
    if shard_options is not None:
        if not isinstance(shard_options, ShardOptions):
            raise GrainliteTypeError(
                f"shard_options must be a ShardOptions, got {type(shard_options).__name__} "
                f"{shard_options!r}; pass grain.ShardOptions(shard_index=i, shard_count=n), "
                f"grain.NoSharding() or grain.ShardByJaxProcess(), or None to use the sampler's."
            )
        return shard_options
    inherited = getattr(sampler, "_shard_options", None)
    if isinstance(inherited, ShardOptions):
        return inherited
    raise GrainliteValueError(
        "No shard options were provided to the DataLoader. Please pass shard options to the "
        f"DataLoader: the sampler ({type(sampler).__name__}) carries no sharding (it has no "
        "_shard_options attribute), so pass shard_options=grain.NoSharding() (one host) or "
        "grain.ShardByJaxProcess() (one shard per JAX process)."
    )


def check_source(data_source: Any) -> None:
    """Raises if ``data_source`` is not random access (``__len__`` and ``__getitem__``)."""
    if not (hasattr(data_source, "__len__") and hasattr(data_source, "__getitem__")):
        raise GrainliteTypeError(
            f"data_source must be random-access (define __len__ and __getitem__), got "
            f"{type(data_source).__name__}; wrap the data in a list, an ArrayRecordDataSource "
            f"or an InMemoryDataSource."
        )


def read_options_error(read_options: object) -> GrainliteTypeError:
    """The error for a ``read_options`` that is not a ReadOptions, with the exact fix."""
    if isinstance(read_options, dict) and all(
        isinstance(key, str) and key.isidentifier() for key in read_options
    ):
        arguments = ", ".join(f"{key}={value!r}" for key, value in read_options.items())
        fix = f"pass grain.ReadOptions(**read_options), here grain.ReadOptions({arguments})"
    else:
        fix = "pass grain.ReadOptions(num_threads=..., prefetch_buffer_size=...)"
    return GrainliteTypeError(
        f"read_options must be a ReadOptions or None, got {type(read_options).__name__} "
        f"{read_options!r}; {fix}, or None for the defaults."
    )
