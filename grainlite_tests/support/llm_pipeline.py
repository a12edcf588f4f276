"""The MaxText-style pipeline of test_llm_pipeline.py and the packing docs, in a module of its
own: Grain's and grainlite's workers import it to find ``tokenize``, and it imports neither
library (a worker that imported the test module would import Grain, and with it JAX)."""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_LENGTH = 32
BATCH_SIZE = 4


def documents(count: int = 90, seed: int = 0) -> list[str]:
    """Synthetic documents: words from a small vocabulary, long-tailed lengths."""
    rng = np.random.default_rng(seed)
    words = ["grain", "data", "token", "pack", "row", "model", "step", "batch", "loss", "a"]
    sizes = np.clip(rng.lognormal(2.0, 0.9, size=count), 1, 60).astype(int)
    return [" ".join(rng.choice(words, size=n)) for n in sizes]


def tokenize(text: str) -> dict[str, np.ndarray]:
    """A byte tokenizer, truncated to ``MAX_LENGTH + 1`` and shifted into inputs and targets."""
    ids = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int32)[: MAX_LENGTH + 1]
    return {"inputs": ids[:-1], "targets": ids[1:]}


def pipeline(grain: Any, workers: int = 2, seed: int = 42, count: int = 90) -> Any:
    """The pipeline as a MaxText user writes it, for whichever ``grain`` module is passed."""
    dataset = grain.MapDataset.source(documents(count)).shuffle(seed=seed).map(tokenize)
    packed = grain.experimental.FirstFitPackIterDataset(
        dataset.to_iter_dataset(),
        length_struct={"inputs": MAX_LENGTH, "targets": MAX_LENGTH},
        num_packing_bins=BATCH_SIZE * 2,
        seed=seed,
    )
    # drop_remainder=True here would lose a partial batch per worker (grainlite warns about it)
    batched = packed.batch(BATCH_SIZE)
    if not workers:
        return batched
    return batched.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
