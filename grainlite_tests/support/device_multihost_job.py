"""One JAX process of the two-host device test in ``test_device_multihost.py``.

Usage: ``python device_multihost_job.py PROCESS_ID PORT OUT_JSON``, with ``XLA_FLAGS`` giving each
process two CPU devices. The process joins a two-process ``jax.distributed`` job on 127.0.0.1,
reads its ``ShardByJaxProcess`` shard through ``grainlite.device_put`` with the batch axis split
over all four devices of both processes, and writes to OUT_JSON, for each global batch: the rows
its own loader produced, the global shape, the rows held by this process's devices (each with its
index range in the global batch) and the sum a jitted step computes over the global batch.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from grainlite_tests.support.multihost import join_peers

NUM_RECORDS = 32
LOCAL_BATCH = 4
BATCHES = 3


def run(report: dict[str, Any]) -> None:
    import jax
    import numpy as np

    import grainlite as grain
    from grainlite.device import batch_sharding

    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, NUM_RECORDS, 1),
        sampler=grain.IndexSampler(NUM_RECORDS, grain.ShardByJaxProcess(), num_epochs=1),
        operations=[grain.Batch(LOCAL_BATCH)],
        worker_count=0,
    )
    local_batches = [np.asarray(b).tolist() for _, b in zip(range(BATCHES), iter(loader))]
    total = jax.jit(lambda x: x.sum())
    report["devices"] = [len(jax.devices()), len(jax.local_devices())]
    report["batches"] = []
    with grain.device_put(loader, sharding=batch_sharding(), prefetch=2) as batches:
        for local, batch in zip(local_batches, batches):
            shards = sorted(
                ([s.index[0].start, s.index[0].stop], np.asarray(s.data).tolist())
                for s in batch.addressable_shards
            )
            report["batches"].append(
                {
                    "local": local,
                    "global_shape": list(batch.shape),
                    "fully_addressable": batch.is_fully_addressable,
                    "shards": shards,
                    "sum": int(total(batch)),
                }
            )


def main() -> None:
    process_id, port, out = sys.argv[1:]
    import jax

    join_peers(int(process_id), 2, port)
    report: dict[str, Any] = {"process": jax.process_index()}
    run(report)
    with open(out, "w") as file:
        json.dump(report, file)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
