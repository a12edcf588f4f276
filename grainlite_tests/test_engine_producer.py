"""The one background producer thread (``grainlite.engine.producer``) that the device iterators,
the thread prefetch and the torch pinning thread run on: its stop, error, end and collection rules.
"""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from grainlite.engine.producer import End, Failed, Item, Producer, value_of
from grainlite_tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

TRIALS = 60


@pytest.fixture
def busy_core() -> Iterator[None]:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


class _Counting:
    """An endless source of ``(n, {"next": n + 1})`` that counts its steps."""

    def __init__(self) -> None:
        self.steps = 0

    def __call__(self) -> tuple[int, dict[str, int]]:
        n = self.steps
        self.steps += 1
        return n, {"next": n + 1}


def _blocked_on_a_full_queue(depth: int) -> tuple[Producer, _Counting]:
    """A producer whose thread made one item more than its queue holds: it waits for room."""
    step = _Counting()
    producer = Producer(step, depth, "grainlite-test-producer")
    wait_for(lambda: step.steps > depth and producer.queued() == depth, "a full queue")
    return producer, step


def test_stop_while_the_thread_waits_for_room_in_a_full_queue_ends_it_within_a_second(busy_core):
    for trial in range(TRIALS):
        producer, _ = _blocked_on_a_full_queue(depth=1 + trial % 3)
        stopper = threading.Thread(target=producer.stop)
        started = time.monotonic()
        stopper.start()
        stopper.join(1.0)
        assert not stopper.is_alive(), f"trial {trial}: stop() did not return within a second"
        assert not producer.thread.is_alive(), f"trial {trial}: the thread outlived stop()"
        assert time.monotonic() - started < 1.0
        assert producer.queued() == 0  # what it had queued is dropped


class _FailsOnce:
    """Yields 0, 1, 2, ...; the step that would give ``bad`` raises instead, once, and the
    source has moved past it (as a DataLoader iterator does after a failed record)."""

    def __init__(self, bad: int, stop: int) -> None:
        self.next, self.bad, self.stop = 0, bad, stop

    def __call__(self) -> tuple[int, dict[str, int]]:
        n = self.next
        if n >= self.stop:
            raise StopIteration
        self.next += 1
        if n == self.bad:
            raise ValueError(f"record {n} is broken")
        return n, self.state()

    def state(self) -> dict[str, int]:
        return {"next": self.next}


def _drain(producer: Producer) -> list[Any]:
    seen: list[Any] = []
    while True:
        item = producer.get(timeout=5)
        try:
            seen.append(value_of(item))
        except StopIteration:
            return seen
        except ValueError as error:
            seen.append(str(error))
            return seen


def test_an_error_is_raised_once_at_its_place_and_the_next_producer_goes_on_after_it(busy_core):
    for trial in range(TRIALS):
        source = _FailsOnce(bad=3, stop=6)
        first = Producer(source, 1 + trial % 4, "grainlite-test-producer", error_state=source.state)
        assert _drain(first) == [0, 1, 2, "record 3 is broken"]
        first.thread.join(1.0)
        assert not first.thread.is_alive(), "the thread goes on after a Failed"
        ended = first.get(timeout=0)  # sticky: no wait, whatever is asked after
        assert ended == first.get(timeout=0) == End({"next": 4})
        second = Producer(source, 2, "grainlite-test-producer", final_state=source.state)
        assert _drain(second) == [4, 5], f"trial {trial}: the stream after the error"
        assert second.get(timeout=0) == End({"next": 6})
        first.stop()
        second.stop()


def test_each_item_carries_the_state_after_it_and_the_end_the_final_state():
    source = _FailsOnce(bad=-1, stop=3)
    producer = Producer(source, 8, "grainlite-test-producer", final_state=source.state)
    items = [producer.get(timeout=5) for _ in range(4)]
    assert items == [
        Item(0, {"next": 1}),
        Item(1, {"next": 2}),
        Item(2, {"next": 3}),
        End({"next": 3}),
    ]
    producer.thread.join(1.0)
    assert not producer.thread.is_alive()


def test_a_final_state_that_raises_is_handed_over_as_the_error_of_the_end():
    def broken_state() -> Any:
        raise OSError("the source cannot say where it is")

    producer = Producer(iter(()).__next__, 1, "grainlite-test-producer", final_state=broken_state)
    item = producer.get(timeout=5)
    assert isinstance(item, Failed) and str(item.error) == "the source cannot say where it is"
    assert producer.get(timeout=0) == End(None)


def test_a_dropped_producer_ends_its_thread_once_collected(busy_core):
    for trial in range(TRIALS):
        producer, _ = _blocked_on_a_full_queue(depth=1 + trial % 2)
        thread = producer.thread
        del producer  # no cycle holds it: dropping the last reference collects it
        thread.join(1.0)
        if thread.is_alive():  # held by a cycle after all: a full collection (slow with JAX loaded)
            gc.collect()
            thread.join(1.0)
        assert not thread.is_alive(), f"trial {trial}: a dropped producer's thread lives on"


def test_a_stop_asked_from_the_thread_itself_ends_it_and_runs_then_as_it_leaves():
    ran: list[str] = []
    holder: list[Producer] = []
    counter = itertools.count()
    made = threading.Event()

    def step() -> tuple[int, None]:
        n = next(counter)
        if n == 2:
            made.wait(5.0)  # as a garbage collection on this thread closing the consumer would
            holder[0].stop(then=lambda: ran.append(threading.current_thread().name))
        return n, None

    holder.append(Producer(step, 8, "grainlite-test-producer"))
    made.set()
    producer = holder[0]
    producer.thread.join(5.0)
    assert not producer.thread.is_alive()
    assert ran == ["grainlite-test-producer"]
    producer.stop()  # from here: idempotent, and `then` is not run twice
    assert ran == ["grainlite-test-producer"]
