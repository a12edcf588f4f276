"""READ_POLICY's read-ahead hints: a source with ``prefetch_keys`` is told the keys a DataLoader
reader will read, in order, before it reads them (a remote source fetches their files ahead)."""

from __future__ import annotations

import threading

import grainlite as grain
from grainlite.options import READ_POLICY


class HintedSource:
    """A range source that records the hints it gets and the keys it is asked for."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.hints: list[int] = []
        self.reads: list[int] = []
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: int) -> int:
        with self.lock:
            self.reads.append(int(key))
            assert int(key) in self.hints, f"key {key} read before it was hinted"
        return int(key)

    def prefetch_keys(self, keys) -> None:
        with self.lock:
            self.hints.extend(int(k) for k in keys)


def test_the_data_loader_tells_the_source_every_key_before_reading_it_in_order():
    length = 3 * READ_POLICY.tell_ahead
    source = HintedSource(length)
    sampler = grain.IndexSampler(length, grain.NoSharding(), shuffle=True, seed=5, num_epochs=1)
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        worker_count=0,
        read_options=grain.ReadOptions(num_threads=0),
    )
    got = list(loader)
    order = [sampler[i].record_key for i in range(length)]
    assert got == order
    assert source.hints == order  # each key once, in the order it is read
    assert source.reads == order
