"""A MaxText-style input pipeline and Orbax checkpoint, written for ``import grain``, as a job.

``python maxtext_client_job.py LIBRARY CHECKPOINT_DIR [RESTORE_FROM]``: LIBRARY ``grainlite``
calls ``install_as_grain()`` first, ``grain`` runs the real Grain 0.2.18. The code below the
install is what a MaxText-style trainer does with ``import grain``: two document sources mixed,
shuffled and repeated, tokenized, packed (``FirstFitPackIterDataset``), batched with
``batch_and_pad``, prefetched by 2 worker processes; the iterator saved by an Orbax
CheckpointManager after 3 batches and restored into a new pipeline. It prints one JSON line: every
batch, the checkpoint's files, the batches after restoring its own checkpoint, and (given
RESTORE_FROM, a checkpoint written by the other library) the batches after restoring that one.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

if sys.argv[1] == "grainlite":
    import grainlite

    grainlite.install_as_grain()
else:  # the real Grain's multiprocessing reads absl flags: parse them, as app.run would
    from absl import flags

    flags.FLAGS(sys.argv[:1])

import grain  # the trainer's own imports: grainlite after install_as_grain()
import grain.python as pygrain
import numpy as np
import orbax.checkpoint as ocp

from grainlite_tests.support.llm_pipeline import MAX_LENGTH, documents, tokenize

BATCH = 4
SAVE_AT = 3


def pipeline() -> Any:
    web = grain.MapDataset.source(documents(40, seed=1)).shuffle(seed=5).repeat(2)
    code = grain.MapDataset.source(documents(30, seed=2)).shuffle(seed=6).repeat(2)
    mixed = grain.MapDataset.mix([web, code], weights=[0.7, 0.3]).map(tokenize)
    packed = grain.experimental.FirstFitPackIterDataset(
        mixed.to_iter_dataset(),
        length_struct={"inputs": MAX_LENGTH, "targets": MAX_LENGTH},
        num_packing_bins=BATCH * 2,
        seed=7,
    )
    batch_fn = functools.partial(grain.experimental.batch_and_pad, batch_size=BATCH)
    batched = packed.batch(BATCH, batch_fn=batch_fn)
    return batched.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))


def plain(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    return {key: [str(value.dtype), np.asarray(value).tolist()] for key, value in batch.items()}


def manager_at(directory: str) -> ocp.CheckpointManager:
    handlers = {"iter": pygrain.PyGrainCheckpointHandler()}
    return ocp.CheckpointManager(directory, item_handlers=handlers)


def restored_batches(directory: str) -> list[dict[str, Any]]:
    iterator = iter(pipeline())
    with manager_at(directory) as manager:
        restore = pygrain.PyGrainCheckpointRestore(iterator)
        manager.restore(SAVE_AT, args=ocp.args.Composite(iter=restore))
    return [plain(batch) for batch in iterator]


def main() -> None:
    directory = sys.argv[2]
    iterator = iter(pipeline())
    batches = []
    with manager_at(directory) as manager:
        for step, batch in enumerate(iterator):
            if step == SAVE_AT:  # after SAVE_AT + 1 batches
                save = pygrain.PyGrainCheckpointSave(iterator)
                manager.save(step, args=ocp.args.Composite(iter=save))
                manager.wait_until_finished()
            batches.append(plain(batch))
    saved = Path(directory, str(SAVE_AT), "iter")
    out = {
        "active": getattr(grain, "__grainlite__", "grain " + getattr(grain, "__version__", "?")),
        "batches": batches,
        "files": {path.name: path.read_text() for path in sorted(saved.iterdir())},
        "restored": restored_batches(directory),
    }
    if len(sys.argv) > 3:
        out["cross"] = restored_batches(sys.argv[3])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
