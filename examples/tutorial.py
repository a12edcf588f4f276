"""Grain's DataLoader tutorial as a script, offline, with ``import grainlite as grain``.

The steps of ``docs/tutorials/data_loader_tutorial.md`` in order: the IndexSampler, a TFDS data
source, a MapTransform with OpenCV, the DataLoader, the elements drawn with matplotlib, an Orbax
checkpoint of the iterator (saved, read as JSON, restored, resumed at element 5), the in-memory
source with five workers, and per-worker ReadOptions.

``imagenet_a`` is a 40-picture stand-in written here first (same name, version, features and
split as the real one), so nothing is downloaded. The notebook's shell commands (``!ls``, ``!cat``)
are done in Python, and the pictures are saved as PNG files instead of shown.

    python examples/tutorial.py [--out FOLDER]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import cv2
import matplotlib

matplotlib.use("Agg")  # a script draws into files, with no display

import matplotlib.pyplot as plt
import numpy as np
import orbax.checkpoint as ocp
from stand_in_data import build_imagenet_a

import grainlite as grain

os.environ.pop("TFDS_DATA_DIR", None)
import tensorflow_datasets as tfds  # after the environment is set, as in the tutorial


class ResizeAndCrop(grain.MapTransform):
    """Brings every picture to 224x224: resize to 256x256, keep the top-left corner."""

    def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        image = element["image"]
        image = cv2.resize(image, dsize=(256, 256), interpolation=cv2.INTER_LINEAR)
        image = image[:224, :224]
        element["image"] = image
        return element


def sampler_step() -> grain.IndexSampler:
    """Prints the metadata of a 5-record, 2-epoch shuffled sampler; returns a fresh one."""
    print("== IndexSampler: 5 records, 2 epochs, shuffled with seed 0")
    index_sampler_example = grain.IndexSampler(
        num_records=5,
        num_epochs=2,
        shard_options=grain.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        shuffle=True,
        seed=0,
    )
    for record_metadata in index_sampler_example:
        print(record_metadata)
    return grain.IndexSampler(
        num_records=5,
        num_epochs=2,
        shard_options=grain.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        shuffle=True,
        seed=0,
    )


def checkpoint_step(data_loader: grain.DataLoader, checkpoint_dir: Path) -> None:
    """Reads 5 elements, saves the iterator with Orbax, reads 5 more, restores, reads them again."""
    print("== Checkpointing with Orbax")
    data_iter = iter(data_loader)
    num_steps = 5
    for i in range(num_steps):
        x = next(data_iter)
        print(i, x["file_name"], x["label"])

    mngr = ocp.CheckpointManager(checkpoint_dir)
    assert mngr.save(step=num_steps, args=grain.GrainCheckpointSave(data_iter), force=True)
    mngr.wait_until_finished()  # Orbax saves asynchronously
    for path in sorted(checkpoint_dir.rglob("*")):  # what `!ls -R` shows in the notebook
        print(path.relative_to(checkpoint_dir))
    for path in sorted(checkpoint_dir.glob("*/*/*.json")):  # what `!cat` shows
        print(path.read_text())

    read_after_save = []
    for i in range(5, 10):
        x = next(data_iter)
        read_after_save.append(x["file_name"])
        print(i, x["file_name"], x["label"])

    mngr.restore(num_steps, args=grain.GrainCheckpointRestore(data_iter))
    print("restored; reading elements 5-9 again:")
    read_after_restore = []
    for i in range(5, 10):
        x = next(data_iter)
        read_after_restore.append(x["file_name"])
        print(i, x["file_name"], x["label"])
    assert read_after_restore == read_after_save, "the restored iterator did not resume at 5"
    print("verified: after the restore, elements 5-9 came again, in the same order")
    data_iter.close()
    mngr.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="keep the pictures and checkpoint here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tutorial_") as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        data_dir = build_imagenet_a(out / "tensorflow_datasets", num_images=40)

        index_sampler = sampler_step()

        print("== TFDS data source (the imagenet_a stand-in)")
        source = tfds.data_source("imagenet_a", split="test", data_dir=data_dir)
        print(f"# records: {len(source)}")
        print(f"First record:\n{source[0]}")

        transformations = [ResizeAndCrop()]
        data_loader = grain.DataLoader(
            data_source=source,
            operations=transformations,
            sampler=index_sampler,
            worker_count=0,
        )

        print("== DataLoader: drawing the 10 elements")
        for i, element in enumerate(data_loader):
            plt.figure(figsize=(2, 2))
            plt.imshow(element["image"])
            plt.savefig(out / f"element_{i}.png")
            plt.close()
        print(f"saved element_0.png ... element_9.png in {out}")

        checkpoint_step(data_loader, out / "orbax")

        print("== InMemoryDataSource with 5 workers")
        in_memory_datasource = grain.InMemoryDataSource(range(5))
        print(in_memory_datasource)
        print(f"First Record Read: {in_memory_datasource[0]}")
        data_loader = grain.DataLoader(
            data_source=in_memory_datasource,
            sampler=grain.IndexSampler(
                num_records=len(in_memory_datasource),
                num_epochs=2,
                shard_options=grain.NoSharding(),
                shuffle=True,
                seed=0,
            ),
            worker_count=5,
        )
        with iter(data_loader) as data_iter:  # grainlite: the workers stop when the block ends
            for _ in range(len(in_memory_datasource) * 2):
                x = next(data_iter)
                print(x)

        print("== Per-worker ReadOptions")
        # Every worker gets its own 8 reader threads: 8 * 10 = 80 in all.
        data_loader = grain.DataLoader(
            data_source=source,
            sampler=grain.IndexSampler(
                num_records=len(source),
                num_epochs=2,
                shard_options=grain.NoSharding(),
                shuffle=True,
                seed=0,
            ),
            worker_count=10,
            read_options=grain.ReadOptions(num_threads=8, prefetch_buffer_size=500),
        )
        print(data_loader.multiprocessing_options, data_loader.read_options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
