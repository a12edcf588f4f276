"""The demo: build a small ArrayRecord dataset, train-style iterate a shuffled, batched loader with
worker processes, checkpoint the iterator, restore it in a brand-new loader, and check that it
resumes at exactly the next batch.

Run it with ``bash scripts/demo`` (sets up .venv first) or ``python examples/demo.py``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from array_record.python import array_record_module

import grainlite as grain


def write_dataset(path: Path, num_records: int) -> None:
    """Records of 16 bytes: the record's index and a label, both little-endian int64."""
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for index in range(num_records):
        writer.write(np.array([index, index % 10], dtype="<i8").tobytes())
    writer.close()


class Parse(grain.MapTransform):
    """Bytes to a dict of arrays."""

    def map(self, record: bytes) -> dict[str, np.ndarray]:
        index, label = np.frombuffer(record, dtype="<i8")
        return {"index": index, "label": label}


class Jitter(grain.RandomMapTransform):
    """A random feature from the record's own generator: reproducible on every run and resume."""

    def random_map(self, element: dict, rng: np.random.Generator) -> dict:
        element["noise"] = rng.normal(size=4).astype(np.float32)
        return element


def make_loader(path: Path, num_records: int, workers: int) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=grain.ArrayRecordDataSource(str(path)),
        sampler=grain.IndexSampler(
            num_records, grain.NoSharding(), shuffle=True, num_epochs=1, seed=42
        ),
        operations=[Parse(), Jitter(), grain.Batch(batch_size=32, drop_remainder=True)],
        worker_count=workers,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--checkpoint-after", type=int, default=10, help="batches before saving")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "demo.array_record"
        write_dataset(path, args.records)
        print(f"wrote {args.records} records to {path.name}")

        loader = make_loader(path, args.records, args.workers)
        with iter(loader) as iterator:
            for _ in range(args.checkpoint_after):
                next(iterator)
            state = iterator.get_state()
            expected = [batch["index"].copy() for batch in iterator]
        print(f"read {args.checkpoint_after} batches, saved the iterator state:")
        print(state.decode())

        with iter(make_loader(path, args.records, args.workers)) as restored:
            restored.set_state(state)
            resumed = [batch["index"].copy() for batch in restored]
        assert len(resumed) == len(expected) and all(
            np.array_equal(a, b) for a, b in zip(resumed, expected)
        ), "the restored loader did not resume at the next batch"
        seen = np.concatenate(expected + resumed[:0])
        print(
            f"restored into a new loader: it resumed at the next batch and delivered the same "
            f"{len(resumed)} batches ({seen.size} records) as the uninterrupted run"
        )


if __name__ == "__main__":
    main()
