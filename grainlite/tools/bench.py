"""The work of ``python -m grainlite bench`` (see :mod:`grainlite.tools.bench_command`)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grainlite.errors import GrainliteTypeError, GrainliteValueError

# A configuration within this share of the best rate counts as just as good: fewer workers win.
_WITHIN = 0.05
# Read threads are tried when the read takes more than this share of the work.
_READ_SHARE = 0.2


def load_factory(spec: str) -> Callable[..., Any]:
    """The function named by ``path/to/file.py:function`` or ``package.module:function``."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise GrainliteValueError(
            f"bench: FACTORY must be path/to/file.py:function or package.module:function (got "
            f"{spec!r}); e.g. python -m grainlite bench examples/bench_pipeline.py:make_loader"
        )
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise GrainliteValueError(
                f"bench: no such file {where!r}; give the path to a .py file."
            )
        module_spec = importlib.util.spec_from_file_location(f"_grainlite_bench_{path.stem}", path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, str(path.resolve().parent))
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise GrainliteValueError(
            f"bench: {where} has no function {name!r} (found {type(factory).__name__}); name a "
            "function that takes worker_count=... and returns a DataLoader or an IterDataset."
        )
    return factory  # type: ignore[no-any-return]


def accepts(factory: Callable[..., Any], keyword: str) -> bool:
    """True if ``factory`` takes ``keyword`` (or any ``**kwargs``)."""
    parameters = inspect.signature(factory).parameters.values()
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in parameters)


@dataclass
class Result:
    """One configuration's measurement."""

    settings: dict[str, Any]
    first: float = 0.0
    elements: int = 0
    records: int = 0
    seconds: float = 0.0
    stats: Any = None
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Records per second (elements per second where elements are not batches)."""
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def label(self) -> str:
        """``worker_count=2, worker_buffer_size=1``."""
        return ", ".join(f"{key}={value}" for key, value in self.settings.items())


def _batch_size(element: Any) -> int:
    """Records in one element: the leading dimension of a batch's first array, else 1."""
    leaf = element
    while isinstance(leaf, dict | list | tuple) and leaf:
        leaf = next(iter(leaf.values())) if isinstance(leaf, dict) else leaf[0]
    shape = getattr(leaf, "shape", ())
    return int(shape[0]) if shape else 1


def _is_batched(made: Any) -> bool:
    """True when the pipeline's last step is a batch (then records = leading dimension)."""
    steps = getattr(getattr(made, "_pipeline", None), "steps", None)
    if steps is not None:
        return bool(steps) and steps[-1][0] == "batch"
    return "Batch" in type(made).__name__


def measure(made: Any, seconds: float) -> Result:
    """Iterates ``made`` (a DataLoader or an IterDataset) for ``seconds`` after its first element
    (start-up is timed apart, as ``first``); counts the elements and records that came."""
    result = Result({})
    batched = _is_batched(made)
    start = time.perf_counter()
    iterator = iter(made)
    try:
        begin = None
        for element in iterator:
            if begin is None:  # the rate counts from the first element: start-up is apart
                begin = time.perf_counter()
                result.first = begin - start
                continue
            result.elements += 1
            result.records += _batch_size(element) if batched else 1
            if time.perf_counter() - begin >= seconds:
                break
        result.seconds = time.perf_counter() - begin if begin is not None else 0.0
        stats = getattr(iterator, "stats", None)
        result.stats = stats() if stats is not None else None
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
    return result


def _make(factory: Callable[..., Any], settings: dict[str, Any]) -> Any:
    made = factory(**settings)
    if not hasattr(made, "__iter__"):
        raise GrainliteTypeError(
            f"bench: the factory returned {type(made).__name__}, which cannot be iterated; return "
            "a grain.DataLoader or a Dataset API IterDataset."
        )
    return made


def _best(results: list[Result]) -> Result:
    top = max(result.rate for result in results)
    return next(result for result in results if result.rate >= top * (1 - _WITHIN))


def _read_share(result: Result) -> float:
    if result.stats is None:
        return 0.0
    return float(sum(s.share for s in result.stats.stages if s.kind == "read"))


def default_worker_counts() -> list[int]:
    """0, 1, 2, 4, ... up to the CPUs this process may use."""
    from grainlite.cpus import usable_cpu_count

    cpus = usable_cpu_count()
    counts, n = [0], 1
    while n < cpus:
        counts.append(n)
        n *= 2
    return [*counts, cpus] if cpus not in counts else counts


def _show(result: Result, quiet: bool) -> None:
    unit = "records/s"
    print(
        f"{result.label()}: {result.rate:,.0f} {unit} ({result.elements} elements in "
        f"{result.seconds:.2f} s after the first, which took {result.first:.2f} s)",
        flush=True,
    )
    if not quiet and result.stats is not None:
        print(result.stats, flush=True)
        print(flush=True)


def main(args: argparse.Namespace) -> int:
    """Runs every configuration, prints the results and the recommendation."""
    try:
        factory = load_factory(args.factory)
        workers = (
            [int(w) for w in args.workers.split(",")] if args.workers else default_worker_counts()
        )
    except (ValueError, ImportError, OSError) as error:
        print(error, file=sys.stderr)
        return 2
    results = []
    for count in workers:
        settings: dict[str, Any] = {"worker_count": count}
        result = measure(_make(factory, settings), args.seconds)
        result.settings = settings
        _show(result, args.quiet)
        results.append(result)
    best = _best(results)
    if accepts(factory, "worker_buffer_size") and best.settings["worker_count"] > 0:
        tried = [best]
        for size in (int(s) for s in args.buffer_sizes.split(",")):
            settings = {**best.settings, "worker_buffer_size": size}
            if size == 1:
                best.settings = settings
                continue
            result = measure(_make(factory, settings), args.seconds)
            result.settings = settings
            _show(result, args.quiet)
            tried.append(result)
        best = _best(tried)
    threads = "the default ReadOptions"
    if accepts(factory, "read_options") and _read_share(best) > _READ_SHARE:
        from grainlite.options import ReadOptions

        options = ReadOptions(num_threads=16, prefetch_buffer_size=500)
        settings = {**best.settings, "read_options": options}
        result = measure(_make(factory, settings), args.seconds)
        result.settings = settings
        _show(result, args.quiet)
        if result.rate > best.rate * (1 + _WITHIN):
            best, threads = result, "ReadOptions(num_threads=16, prefetch_buffer_size=500)"
    buffer = best.settings.get("worker_buffer_size", 1)
    print(
        f"recommendation: worker_count={best.settings['worker_count']}, worker_buffer_size="
        f"{buffer}, read threads: {threads} ({best.rate:,.0f} records/s)"
    )
    if best.stats is not None:
        print(f"diagnosis at that setting: {best.stats.diagnosis}")
    return 0
