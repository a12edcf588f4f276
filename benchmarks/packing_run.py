"""Packing benchmark: grainlite's packers against Grain 0.2.18's on the same synthetic token stream.

The stream is ``--sequences`` token sequences (``{"inputs", "targets"}``, int32) whose lengths are
drawn from a lognormal distribution (long-tailed, as tokenized documents are) and clipped to
``[1, --length]``. Each packer (first fit, best fit, concat-then-split) packs it into rows of
``--length`` tokens with ``--bins`` bins; the rows of both libraries are checked equal (values,
dtypes, keys), then timed in interleaved repeats (grain, grainlite, grain, ...) and the medians
reported, with the speed-up. Run: ``python -m benchmarks.packing_run`` (``--quick --sequences
500`` for a smoke run).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np


def token_stream(count: int, length: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` sequences with lognormal lengths in ``[1, length]`` (median about length / 8)."""
    rng = np.random.default_rng(seed)
    sizes = np.clip(rng.lognormal(np.log(length / 8), 1.0, size=count), 1, length).astype(int)
    tokens = rng.integers(0, 32_000, size=int(sizes.sum()), dtype=np.int32)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [
        {"inputs": tokens[a:b], "targets": tokens[a:b] + 1}
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())
    ]


def packer(name: str, library: ModuleType, length: int, bins: int) -> Callable[[Any], Any]:
    """A function from an ``IterDataset`` to the named packer of ``library`` over it."""
    experimental = library.experimental
    lengths = {"inputs": length, "targets": length}
    if name == "concat_then_split":
        return lambda ds: experimental.ConcatThenSplitIterDataset(ds, length_struct=lengths)
    cls = getattr(
        experimental,
        {"first_fit": "FirstFitPackIterDataset", "best_fit": "BestFitPackIterDataset"}[name],
    )
    return lambda ds: cls(ds, length_struct=lengths, num_packing_bins=bins, seed=0)


def list_dataset(library: ModuleType, items: list[Any]) -> Any:
    """A minimal ``IterDataset`` of ``library`` over ``items`` (state ``{"next_index": i}``).

    Both libraries' packers read the same trivial parent, so the time measured is the packer's:
    Grain's own ``MapDataset.source(...).to_iter_dataset()`` costs more than its packer does.
    """

    class ListIterator(library.DatasetIterator):
        def __init__(self) -> None:
            super().__init__()
            self.position = 0

        def __next__(self) -> Any:
            if self.position >= len(items):
                raise StopIteration
            self.position += 1
            return items[self.position - 1]

        def get_state(self) -> dict[str, int]:
            return {"next_index": self.position}

        def set_state(self, state: dict[str, int]) -> None:
            self.position = state["next_index"]

    class ListIterDataset(library.IterDataset):
        def __iter__(self) -> Any:
            return ListIterator()

    return ListIterDataset()


def run_once(
    library: ModuleType, make: Callable[[Any], Any], stream: list[Any], source: str
) -> tuple[float, list[Any]]:
    """Seconds to pack the whole stream, and the rows."""
    start = time.perf_counter()
    if source == "list":
        parent = list_dataset(library, stream)
    else:
        parent = library.MapDataset.source(stream).to_iter_dataset()
    rows = list(make(parent))
    return time.perf_counter() - start, rows


def same_rows(a: list[Any], b: list[Any]) -> bool:
    """Equal rows: the same keys in the same order, equal arrays of equal dtypes."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if list(x) != list(y):
            return False
        for key in x:
            u, v = np.asarray(x[key]), np.asarray(y[key])
            if u.dtype != v.dtype or u.shape != v.shape or not np.array_equal(u, v):
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints one line per packer: medians and the speed-up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=20_000)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--bins", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--packers", default="first_fit,best_fit,concat_then_split")
    parser.add_argument(
        "--source",
        choices=("list", "dataset"),
        default="list",
        help="list: a trivial parent (the packer alone); dataset: MapDataset.source(...)"
        ".to_iter_dataset() of each library (the pipeline as users write it)",
    )
    parser.add_argument("--quick", action="store_true", help="one repeat (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    import grain

    import grainlite

    stream = token_stream(args.sequences, args.length)
    tokens = sum(len(s["inputs"]) for s in stream)
    print(
        f"{args.sequences} sequences, {tokens} tokens per feature, rows of {args.length}, "
        f"{args.bins} bins, {args.repeats} interleaved repeats (medians), parent: {args.source}"
    )
    for name in args.packers.split(","):
        makers = {
            "grain": packer(name, grain, args.length, args.bins),
            "grainlite": packer(name, grainlite, args.length, args.bins),
        }
        times: dict[str, list[float]] = {"grain": [], "grainlite": []}
        reference: list[Any] | None = None
        for _ in range(args.repeats):
            for label, library in (("grain", grain), ("grainlite", grainlite)):
                seconds, rows = run_once(library, makers[label], stream, args.source)
                times[label].append(seconds)
                if reference is None:
                    reference = rows
                elif not same_rows(rows, reference):
                    raise SystemExit(f"{name}: {label}'s rows differ from grain's")
                del rows
        g, m = statistics.median(times["grain"]), statistics.median(times["grainlite"])
        print(
            f"{name:18s} grain {g:7.3f} s ({tokens / g / 1e6:6.2f} M tok/s)  grainlite {m:7.3f} s "
            f"({tokens / m / 1e6:6.2f} M tok/s)  speed-up {g / m:5.1f}x  rows equal: yes"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
