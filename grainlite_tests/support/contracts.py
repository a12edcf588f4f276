"""Behaviour contracts written once and checked by every test file that builds a pipeline."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

import grainlite as grain


def to_plain(tree: Any) -> Any:
    """A comparable form of an element: arrays become (dtype, shape, values) triples."""
    if isinstance(tree, np.ndarray | np.generic):
        array = np.asarray(tree)
        return ("array", array.dtype.str, array.shape, array.tolist())
    if isinstance(tree, dict):
        return {"dict": [(k, to_plain(v)) for k, v in tree.items()]}
    if isinstance(tree, list | tuple):
        return (type(tree).__name__, [to_plain(v) for v in tree])
    return tree


def assert_same_elements(actual: Iterable[Any], expected: Iterable[Any]) -> None:
    """Equal values, dtypes, shapes and container structure, in the same order."""
    actual_plain = [to_plain(e) for e in actual]
    expected_plain = [to_plain(e) for e in expected]
    assert len(actual_plain) == len(expected_plain), (len(actual_plain), len(expected_plain))
    for position, (a, e) in enumerate(zip(actual_plain, expected_plain)):
        assert a == e, f"element {position} differs:\n{a}\n!=\n{e}"


def run_with_states(iterator: Any, limit: int | None = None) -> tuple[list[Any], list[bytes]]:
    """Iterates to the end (or ``limit`` elements), recording the state before each element and
    after the last: ``states[k]`` is the position after ``k`` elements."""
    elements, states = [], [iterator.get_state()]
    for element in iterator:
        elements.append(to_plain(element))
        states.append(iterator.get_state())
        if limit is not None and len(elements) >= limit:
            break
    return elements, states


def assert_resumes_at_every_step(
    make_loader: Callable[[], Any], new_loader_steps: Iterable[int] | None = None
) -> None:
    """Checkpoint before every element, restore at each: the rest equals the uninterrupted run.

    Restores go into the *same* iterator at every step (no drift from repeated get/set either)
    and into a *new* loader at ``new_loader_steps`` (every step when None).
    """
    with iter(make_loader()) as reference:
        elements, states = run_with_states(reference)
    steps = range(len(states)) if new_loader_steps is None else new_loader_steps
    for k in steps:
        with iter(make_loader()) as restored:
            restored.set_state(states[k])
            assert restored.get_state() == states[k]
            rest = [to_plain(e) for e in restored]
        assert rest == elements[k:], f"a new loader restored after {k} elements differs"
    with iter(make_loader()) as same:
        for k in range(len(states)):
            same.set_state(states[k])
            same.set_state(same.get_state())  # repeated get/set must not drift
            assert same.get_state() == states[k]
            if k < len(elements):
                assert to_plain(next(same)) == elements[k], f"same iterator differs at {k}"
                assert same.get_state() == states[k + 1]
        same.set_state(states[-1])
        assert list(same) == []


class SlowReads:
    """A data source of ``key * 3`` whose reads take about 100 µs, like a read from a network
    file system, and which records the threads that read it.

    Fast sources (a range, a list) never leave the consuming thread, so a check that the output is
    the same for any ReadOptions needs reads this slow to reach the reader threads at all. The sleep
    stands for I/O latency (it releases the interpreter as a real read does); it synchronises
    nothing.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.readers: set[int] = set()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        self.readers.add(threading.get_ident())
        time.sleep(100e-6)
        return int(key) * 3

    def __repr__(self) -> str:
        return f"SlowReads(size={self.size})"


READ_OPTIONS_CASES = {
    "no-threads": grain.ReadOptions(num_threads=0, prefetch_buffer_size=500),
    "no-buffer": grain.ReadOptions(num_threads=4, prefetch_buffer_size=0),
    "one-thread": grain.ReadOptions(num_threads=1, prefetch_buffer_size=1),
    "odd-sizes": grain.ReadOptions(num_threads=3, prefetch_buffer_size=7),
    "defaults": grain.ReadOptions(),
}


def assert_same_output_for_any_read_options(
    make_loader: Callable[[SlowReads, Any], Any], num_records: int = 1500
) -> None:
    """The same elements for any ReadOptions, with the threaded reads really exercised.

    ``make_loader(source, read_options)`` builds the pipeline under test, in this process
    (``worker_count=0``), over ``source``. Each case reads a fresh :class:`SlowReads` of
    ``num_records`` records (enough for the reader to time its reads and move to threads), and
    every case whose options allow reader threads must have read in a thread other than this one;
    without threads, only this thread reads.
    """
    consumer = threading.get_ident()
    reference_source = SlowReads(num_records)
    with iter(make_loader(reference_source, grain.ReadOptions(num_threads=0))) as iterator:
        expected = [to_plain(e) for e in iterator]
    assert reference_source.readers == {consumer}
    assert expected, "the pipeline under test yields nothing: nothing would be compared"
    for name, options in READ_OPTIONS_CASES.items():
        source = SlowReads(num_records)
        with iter(make_loader(source, options)) as iterator:
            got = [to_plain(e) for e in iterator]
        assert got == expected, f"ReadOptions case {name!r} ({options}) changed the output"
        if options.num_threads == 0 or options.prefetch_buffer_size == 0:
            assert source.readers == {consumer}, f"case {name!r} read outside this thread"
        else:
            assert source.readers - {consumer}, f"case {name!r} never read in a reader thread"


def assert_dataset_resumes_at_every_step(
    make_iterator: Callable[[], Any], steps: Iterable[int] | None = None, limit: int = 500
) -> None:
    """Dataset iterators: checkpoint before every element, restore into a fresh iterator, and the
    rest equals the uninterrupted run.

    ``make_iterator()`` returns a new ``DatasetIterator`` at the start of the stream. Every state
    must survive a JSON round trip unchanged (it is what a checkpoint stores); a fresh iterator
    restored from the round-tripped state reports that state back and yields exactly the elements
    that followed it. ``steps`` limits the fresh restores to those positions (every position when
    None; pipelines with worker processes pass a few). The same iterator is also moved back to
    every position in turn, so that repeated ``set_state`` calls do not drift.
    """
    reference = make_iterator()
    try:
        elements, states = run_with_states(reference, limit)
    finally:
        reference.close()
    assert len(elements) < limit, f"the stream has {limit} elements or more: pass a larger limit"
    for k, state in enumerate(states):
        assert json.loads(json.dumps(state)) == state, f"state {k} is not plain JSON: {state!r}"
    for k in range(len(states)) if steps is None else steps:
        restored = make_iterator()
        try:
            restored.set_state(json.loads(json.dumps(states[k])))
            assert restored.get_state() == states[k], f"get_state after set_state at {k}"
            rest = [to_plain(e) for e in restored]
        finally:
            restored.close()
        assert rest == elements[k:], f"a fresh iterator restored after {k} elements differs"
    same = make_iterator()
    try:
        for k in reversed(range(len(states))):
            same.set_state(states[k])
            if k < len(elements):
                assert to_plain(next(same)) == elements[k], f"the same iterator differs at {k}"
                assert same.get_state() == states[k + 1]
    finally:
        same.close()
