"""One JAX process of the sampler-sharded elastic Orbax test in ``test_elastic_resharding.py``.

Usage: ``python resharding_multihost_job.py PHASE PROCESS_ID PROCESS_COUNT PORT FOLDER OUT_JSON
WORKERS FORM``.

Every process builds ``IndexSampler(n, ShardByJaxProcess(drop_remainder=...), shuffle=True, ...)``
(see ``resharding_helpers``), with a Filter and a Batch: FORM ``drop`` is Grain's tutorial
(``drop_remainder=True``), ``default`` Grain's default ``ShardByJaxProcess()`` (blocks of unequal
length).

``save``: reads and saves with one CheckpointManager on FOLDER (shared by all processes) at each
step of ``SAVE_AFTER``: step ``k`` after this process has read ``SAVE_AFTER[k][process_id]``
batches in all, so the processes stand at different points. Writes what it had read at each step
to OUT_JSON. ``restore``: for each step, a fresh iterator (with WORKERS workers, or with
``ALTERNATE`` workers on odd steps when WORKERS is negative) restores the step and reads to the
end; writes each step's elements.
"""

from __future__ import annotations

import json
import logging
import sys

from grainlite_tests.support.multihost import join_peers

# Batches read in all before each save, per saving process, for 2 and for 3 saving processes.
SAVE_AFTER = {
    2: {1: (1, 2), 2: (4, 5), 3: (7, 9)},  # of (9, 12) batches in all
    3: {1: (0, 1, 1), 2: (2, 4, 3), 3: (5, 7, 6)},  # of (6, 9, 8)
}
SPEC = ("filter",)
BATCH = 2
ALTERNATE = (0, 2)  # the worker counts a negative WORKERS alternates between, by step
FORMS = ("drop", "default")  # FORM: drop_remainder=True (the tutorial), or Grain's default


def main() -> None:
    phase, process_id, process_count, port, folder, out, workers_arg, form_arg = sys.argv[1:]
    logging.disable(logging.WARNING)  # the drop_remainder notice, once per sampler
    import jax

    join_peers(int(process_id), int(process_count), port)
    import orbax.checkpoint as ocp

    import grainlite as grain
    from grainlite_tests.support import resharding_helpers as helpers
    from grainlite_tests.support.elastic_helpers import flatten

    index, count = jax.process_index(), jax.process_count()
    ops = helpers.operations(SPEC, BATCH)
    drop_remainder = {"drop": True, "default": False}[form_arg]

    def make(workers: int) -> grain.DataLoader:
        sampler = grain.IndexSampler(
            helpers.NUM_RECORDS,
            shard_options=grain.ShardByJaxProcess(drop_remainder=drop_remainder),
            shuffle=True,
            num_epochs=helpers.EPOCHS,
            seed=helpers.SEED,
        )
        return grain.DataLoader(
            data_source=grain.RangeDataSource(0, helpers.NUM_RECORDS, 1),
            sampler=sampler,
            operations=ops,
            worker_count=workers,
            read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
        )

    workers = int(workers_arg)
    result: dict[str, list[int]] = {}
    with ocp.CheckpointManager(folder) as manager:
        if phase == "save":
            iterator = iter(make(workers))
            elements = []
            for step, after in sorted(SAVE_AFTER[count].items()):
                while len(elements) < after[index]:
                    elements.append(next(iterator))
                save = ocp.args.Composite(data=grain.GrainCheckpointSave(iterator))
                manager.save(step, args=save)
                result[str(step)] = flatten(elements)
            manager.wait_until_finished()
            iterator.close()
        else:
            for step in manager.all_steps():
                chosen = workers if workers >= 0 else ALTERNATE[step % 2]
                with iter(make(chosen)) as iterator:
                    restore = ocp.args.Composite(data=grain.GrainCheckpointRestore(iterator))
                    manager.restore(step, args=restore)
                    result[str(step)] = flatten(list(iterator))
    with open(out, "w") as file:
        json.dump(result, file)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
