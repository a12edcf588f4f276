"""The demo: grainlite end to end on data it makes, in under a minute on a laptop CPU.

1. Builds the stand-in data: the 40-picture ``imagenet_a`` TFDS dataset of the tutorial, read with
   ``tfds.data_source`` (no download, no TensorFlow).
2. Reads a batch of those pictures through a loader with two worker processes and draws it into a
   PNG with ``show_batch``.
3. Runs ``examples/train_jax.py``: a small JAX classifier trains on an ArrayRecord file, with its
   parameters, optimizer state and loader iterator checkpointed together by Orbax; the run crashes
   on purpose, resumes from the last checkpoint, and is checked against an uninterrupted run.
4. Checks that no worker process and no shared-memory segment was left behind.

Run it with ``bash scripts/demo`` (sets up .venv first) or ``python examples/demo.py``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import tensorflow_datasets as tfds
from leak_check import live_children
from stand_in_data import build_imagenet_a

import grainlite as grain
from grainlite import shm
from grainlite.tools import one_batch, show_batch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class ResizeAndCrop(grain.MapTransform):
    """Pictures of any size to 224x224 (resize to 256x256, keep the top-left corner)."""

    def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        image = cv2.resize(element["image"], dsize=(256, 256), interpolation=cv2.INTER_LINEAR)
        element["image"] = image[:224, :224]
        return element


def draw_a_batch(out: Path, workers: int) -> Path:
    """One batch of the stand-in pictures, read by worker processes, drawn into a PNG."""
    data_dir = build_imagenet_a(out / "tensorflow_datasets", num_images=40)
    source = tfds.data_source("imagenet_a", split="test", data_dir=data_dir)
    print(f"built the imagenet_a stand-in: {len(source)} pictures in {data_dir}")
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(
            num_records=len(source),
            shard_options=grain.NoSharding(),
            shuffle=True,
            num_epochs=1,
            seed=0,
        ),
        operations=[ResizeAndCrop(), grain.Batch(batch_size=16)],
        worker_count=workers,
    )
    batch = one_batch(loader)  # the iterator (and its workers) is closed before this returns
    shapes = {key: value.shape for key, value in batch.items()}
    print(f"read one batch with {workers} worker processes: {shapes}")
    return show_batch(batch, out / "batch.png", max_images=16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "demo", help="where files go")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    png = draw_a_batch(args.out, args.workers)

    print("training: examples/train_jax.py (uninterrupted run, crashing run, resumed run)")
    training = subprocess.run(
        [
            sys.executable,
            str(HERE / "train_jax.py"),
            "--workers",
            str(args.workers),
            "--workdir",
            str(args.out / "training"),
        ],
        check=False,
    )
    if training.returncode != 0:
        print(f"FAILED: the training example exited with status {training.returncode}")
        return 1

    leftovers = [n for n in shm.list_segments() if shm.owner_pid(n) == os.getpid()]
    children = sorted(live_children())
    if leftovers or children:
        print(f"FAILED: left behind segments {leftovers} and processes {children}")
        return 1
    print("verified: no worker process and no shared-memory segment outlived its loader")
    print(f"the batch drawn by show_batch: {png}")
    print(f"demo finished in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
