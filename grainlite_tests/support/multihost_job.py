"""One JAX process of the two-host checkpoint test in ``test_multihost.py``.

Usage: ``python multihost_job.py PHASE PROCESS_ID PORT CHECKPOINT_DIR WORKER_COUNTS OUT_JSON``,
WORKER_COUNTS being e.g. ``0,1``: one loader per worker count, saved side by side as the items
``workers_<W>`` of one Composite. One launch covers every worker count and both layouts, because
JAX and Orbax take seconds to import:

- ``shared``: one CheckpointManager on ``CHECKPOINT_DIR/shared``, the same folder for every
  process (a shared filesystem);
- ``per_host``: one CheckpointManager per process on ``CHECKPOINT_DIR/host_<i>`` with
  ``primary_host=None`` (hosts without a shared filesystem).

``save``: reads SAVE_AFTER elements of this process's shard from each loader, saves, then reads on
to the end (the uninterrupted run). ``restore``: a fresh process restores fresh iterators from each
layout and reads to the end. Either writes what it read to OUT_JSON. Every process makes every
Orbax call: the CheckpointManagers synchronise them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from grainlite_tests.support.multihost import join_peers

NUM_RECORDS = 21  # odd, so the two shards differ in size
SAVE_AFTER = 2  # elements (batches of 2) read before the save
LAYOUTS = ("shared", "per_host")


def item_name(worker_count: int) -> str:
    return f"workers_{worker_count}"


def layout_folder(directory: str, layout: str, process_index: int) -> str:
    return f"{directory}/shared" if layout == "shared" else f"{directory}/host_{process_index}"


def build_loader(worker_count: int) -> Any:
    """This process's loader: its ShardByJaxProcess shard, shuffled, batched by 2."""
    import grainlite as grain

    sampler = grain.IndexSampler(
        NUM_RECORDS, grain.ShardByJaxProcess(), shuffle=True, num_epochs=1, seed=5
    )
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, NUM_RECORDS, 1),
        sampler=sampler,
        operations=[grain.Batch(2)],
        worker_count=worker_count,
    )


def make_manager(directory: str, layout: str, counts: list[int]) -> Any:
    import jax
    import orbax.checkpoint as ocp

    import grainlite as grain

    folder = layout_folder(directory, layout, jax.process_index())
    if layout == "shared":
        return ocp.CheckpointManager(folder)
    options = ocp.CheckpointManagerOptions(
        multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=None)
    )
    handlers = {item_name(w): grain.GrainCheckpointHandler() for w in counts}
    return ocp.CheckpointManager(folder, item_handlers=handlers, options=options)


def save(directory: str, counts: list[int], report: dict) -> None:
    import orbax.checkpoint as ocp

    import grainlite as grain

    loaders = {w: build_loader(w) for w in counts}
    for w, loader in loaders.items():
        shard = loader.shard_options
        report[str(w)] = {"shard": [shard.shard_index, shard.shard_count]}
    iterators = {w: iter(loader) for w, loader in loaders.items()}
    for w, iterator in iterators.items():
        report[str(w)]["elements"] = [next(iterator).tolist() for _ in range(SAVE_AFTER)]
        report[str(w)]["saved_state"] = iterator.get_state().decode()
    for layout in LAYOUTS:
        with make_manager(directory, layout, counts) as manager:
            items = {item_name(w): grain.GrainCheckpointSave(it) for w, it in iterators.items()}
            manager.save(SAVE_AFTER, args=ocp.args.Composite(**items))
            manager.wait_until_finished()
    for w, iterator in iterators.items():
        report[str(w)]["elements"] += [e.tolist() for e in iterator]
        iterator.close()


def restore(directory: str, counts: list[int], report: dict) -> None:
    import orbax.checkpoint as ocp

    import grainlite as grain

    for layout in LAYOUTS:
        iterators = {w: iter(build_loader(w)) for w in counts}
        with make_manager(directory, layout, counts) as manager:
            items = {item_name(w): grain.GrainCheckpointRestore(it) for w, it in iterators.items()}
            restored = manager.restore(SAVE_AFTER, args=ocp.args.Composite(**items))
        for w, iterator in iterators.items():
            report[f"{layout}/{w}"] = {
                "same_object": restored[item_name(w)] is iterator,
                "restored_state": iterator.get_state().decode(),
                "elements": [e.tolist() for e in iterator],
            }
            iterator.close()


def main() -> None:
    phase, process_id, port, directory, worker_counts, out = sys.argv[1:]
    import jax

    # Before any other JAX call (ShardByJaxProcess asks JAX for the process index and count).
    join_peers(int(process_id), 2, port)
    counts = [int(w) for w in worker_counts.split(",")]
    report: dict[str, dict] = {}
    (save if phase == "save" else restore)(directory, counts, report)
    with open(out, "w") as file:
        json.dump(report, file)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
