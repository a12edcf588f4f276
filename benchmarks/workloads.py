"""The three workloads: record formats, per-record work, sizes, and the configurations measured.

Everything a record contains is a pure function of its index and the seed, so the verifier can
recompute what any record must look like without trusting the loader under test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

IMAGE_SIZE = 128  # Stored JPEG side, pixels.
CROP_SIZE = 112  # Side of the random crop the transform returns.
JPEG_QUALITY = 90
HEADER = np.dtype("<i8")  # Every record starts with int64 index, int64 label (little endian).
LABEL_CLASSES = 1000


@dataclass(frozen=True)
class Workload:
    """One workload: how many records, how they are stored, batched and bounded in time.

    ``time_limited`` workloads stop after the run's time budget (or at the end of the epoch);
    the others always read the whole shuffled epoch.
    """

    name: str
    records: int
    quick_records: int
    batch_size: int
    storage: str  # "array_record" or "memory"
    time_limited: bool
    description: str


WORKLOADS: dict[str, Workload] = {
    "images": Workload(
        "images", 20_000, 512, 128, "array_record", False,
        "128x128 JPEGs in ArrayRecord (group_size:1): decode, random 112x112 crop and flip, "
        "float32 normalize, Batch(128), one shuffled epoch",
    ),
    "small": Workload(
        "small", 1_000_000, 20_000, 1024, "array_record", True,
        "16-byte records in ArrayRecord (writer defaults): parse with np.frombuffer, "
        "Batch(1024), shuffled, time-limited",
    ),
    "small-mem": Workload(
        "small-mem", 1_000_000, 20_000, 1024, "memory", True,
        "the same 16-byte records from memory (a list, or the library's shared-memory source)",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Config:
    """One loader configuration: a library, its API, its worker count and options, its source.

    File workloads read the ArrayRecord file; in-memory workloads a plain Python list, or the
    library's shared-memory source when ``shm`` is set. ``api`` is "loader" (``DataLoader``) or
    "dataset" (the Dataset API: ``MapDataset.source(...).shuffle(seed).map(...).batch(...)
    .to_iter_dataset()``, then ``mp_prefetch`` with ``workers`` processes when ``workers > 0``).
    """

    name: str
    library: str  # "bare", "grainlite" or "grain"
    workers: int
    reader_threads: int | None  # None: the library's default ReadOptions.
    shm: bool = False
    api: str = "loader"

    @property
    def label(self) -> str:
        """The row name in the results table."""
        if self.library == "bare":
            return "bare loop"
        if self.api == "dataset":
            prefetch = f" mp_prefetch W={self.workers}" if self.workers else " in-process"
            return f"{self.library} Dataset API{prefetch}"
        options = " defaults" if self.reader_threads is None else " num_threads=0"
        source = " InMemoryDataSource" if self.shm else ""
        return f"{self.library}{options}{source} W={self.workers}"


def configs_for(workload: Workload) -> list[Config]:
    """The configurations measured on ``workload``, bare first, the Dataset API last.

    Grain's shared-memory source (a ``ShareableList``) is left out of ``small-mem``: it strips
    trailing zero bytes from ``bytes`` values (CPython #96779), so our 16-byte records come back
    9 bytes long and every verification would fail.
    """
    configs = [Config("bare", "bare", 0, None)]
    for w in (0, 2):
        configs.append(Config(f"grainlite-w{w}", "grainlite", w, None))
    if workload.storage == "memory":
        for w in (0, 2):
            configs.append(Config(f"grainlite-shm-w{w}", "grainlite", w, None, shm=True))
    for w in (0, 2):
        configs.append(Config(f"grain-w{w}", "grain", w, None))
    for w in (0, 2):
        configs.append(Config(f"grain-best-w{w}", "grain", w, 0))
    for library in ("grainlite", "grain"):
        for w in (0, 2):
            configs.append(Config(f"{library}-ds-w{w}", library, w, None, api="dataset"))
    return configs


def dataset_rng(seed: int, position: int) -> np.random.Generator:
    """The generator Grain's Dataset API gives element ``position`` of ``random_map(seed=seed)``:
    Philox keyed by ``seed`` with its counter at ``[0, 0, 0, position]`` (Grain 0.2.18's rule,
    learned by running it)."""
    bit_generator = np.random.Philox(seed)
    state = bit_generator.state
    state["state"]["counter"] = np.array([0, 0, 0, position], dtype=np.uint64)
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def labels_of(indices: Any, seed: int) -> Any:
    """The label stored with record ``indices`` (an int or an int64 array)."""
    return (np.asarray(indices, dtype=np.int64) * 7919 + seed) % LABEL_CLASSES


def small_record(index: int, seed: int) -> bytes:
    """The 16-byte record ``index``: its index and label, int64 little endian."""
    return np.array([index, labels_of(index, seed)], dtype=HEADER).tobytes()


def parse_small(record: bytes) -> np.ndarray:
    """The per-record work of ``small``: the record as an int64 array ``[index, label]``."""
    return np.frombuffer(record, dtype=HEADER, count=2)


def synthetic_image(index: int, seed: int) -> np.ndarray:
    """A deterministic 128x128 RGB uint8 image: smooth colour blobs plus fine noise."""
    import cv2

    rng = np.random.default_rng([seed, index])
    coarse = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    smooth = cv2.resize(coarse, (IMAGE_SIZE, IMAGE_SIZE), interpolation=cv2.INTER_CUBIC)
    noise = rng.integers(-16, 17, size=smooth.shape)
    return np.clip(smooth.astype(np.int64) + noise, 0, 255).astype(np.uint8)


def image_record(index: int, seed: int) -> bytes:
    """Record ``index`` of ``images``: the 16-byte header, then the image as a quality-90 JPEG."""
    import cv2

    rgb = synthetic_image(index, seed)
    ok, jpeg = cv2.imencode(".jpg", rgb[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise RuntimeError(f"cv2.imencode failed on image {index}")
    return small_record(index, seed) + jpeg.tobytes()


def augment_image(record: bytes, rng: np.random.Generator) -> dict[str, Any]:
    """The per-record work of ``images``: decode, random crop and flip from ``rng``, normalize.

    Returns ``{"image": float32 (112, 112, 3) in [0, 1], "label": int64, "index": int64}``.
    """
    import cv2

    index, label = np.frombuffer(record, dtype=HEADER, count=2)
    bgr = cv2.imdecode(np.frombuffer(record, dtype=np.uint8, offset=16), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError(f"record {index} holds no decodable JPEG")
    top, left = rng.integers(0, IMAGE_SIZE - CROP_SIZE + 1, size=2)
    crop = bgr[top : top + CROP_SIZE, left : left + CROP_SIZE, ::-1]  # BGR -> RGB, a view
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return {"image": np.divide(crop, 255, dtype=np.float32), "label": label, "index": index}
