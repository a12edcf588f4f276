"""One JAX process of the elastic Orbax test in ``test_elastic_orbax.py``.

Usage: ``python elastic_multihost_job.py PHASE PROCESS_ID PROCESS_COUNT PORT FOLDER OUT_JSON``.

``save``: this process reads its shard (``ShardOptions`` from JAX, one global sampler from
``elastic_helpers``) for ``SAVE_AFTER[process_id]`` elements (the processes stop at different
points, so the checkpoint has holes), saves with one CheckpointManager on FOLDER (shared by all
processes) and writes what it read to OUT_JSON. ``restore``: a fresh job of PROCESS_COUNT
processes (another count) restores with ``WORKERS_AFTER`` workers and reads to the end.
"""

from __future__ import annotations

import json
import sys

from grainlite_tests.support.multihost import join_peers

STEP = 1
SAVE_AFTER = (2, 5)  # elements (batches) read before the save, per saving process
WORKERS_BEFORE = 0
WORKERS_AFTER = 1
SPEC = ("filter", "fan")
BATCH = (2, False)


def main() -> None:
    phase, process_id, process_count, port, folder, out = sys.argv[1:]
    import jax

    join_peers(int(process_id), int(process_count), port)
    import orbax.checkpoint as ocp

    import grainlite as grain
    from grainlite_tests.support import elastic_helpers

    ops = elastic_helpers.operations(SPEC, BATCH)
    index, count = jax.process_index(), jax.process_count()
    workers = WORKERS_BEFORE if phase == "save" else WORKERS_AFTER
    iterator = iter(elastic_helpers.loader(ops, index, count, workers))
    with ocp.CheckpointManager(folder) as manager:
        if phase == "save":
            elements = [next(iterator) for _ in range(SAVE_AFTER[index])]
            manager.save(STEP, args=ocp.args.Composite(data=grain.GrainCheckpointSave(iterator)))
            manager.wait_until_finished()
        else:
            restore = ocp.args.Composite(data=grain.GrainCheckpointRestore(iterator))
            manager.restore(STEP, args=restore)
            elements = list(iterator)
    iterator.close()
    with open(out, "w") as file:
        json.dump({"elements": elastic_helpers.flatten(elements)}, file)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
