"""Train with plain PyTorch DDP on a grainlite TorchDataLoader: 2 processes, gloo, CPU.

What it shows:

* ``TorchDataLoader(shard_options=None)`` gives each rank its own shard from ``torch.distributed``
  (no DistributedSampler), reshuffles every epoch (``set_epoch``, as with torch's samplers), and
  has the same ``len()`` on every rank, so DDP's gradient all-reduce never waits for a rank that
  ran out;
* ``state_dict()`` saved mid-epoch next to the model's, and a fresh loader that loads it goes on
  with the very next batch.

The script checks that the ranks' shards are disjoint and cover every record once per epoch, that
epochs are shuffled differently, and that the resumed loader continues exactly; it exits non-zero
otherwise. Run it with ``python examples/train_torch_ddp.py`` (a few seconds).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

import grainlite as grain
from grainlite.torch import TorchDataLoader

NUM_RECORDS = 40
BATCH_SIZE = 4
EPOCHS = 3
WORLD_SIZE = 2


def make_loader() -> TorchDataLoader:
    """Records ``{"x": float32[3], "id": int64}``; 2 worker processes per rank."""
    source = [{"x": np.full(3, i, dtype=np.float32), "id": np.int64(i)} for i in range(NUM_RECORDS)]
    return TorchDataLoader(
        data_source=source,
        operations=[grain.Batch(BATCH_SIZE)],
        shuffle=True,
        seed=3,
        worker_count=2,
    )


def train(rank: int, store: str, results: str) -> None:
    """One rank: a few epochs of DDP training, then a mid-epoch save and restore of the loader."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD_SIZE)
    try:
        model = DistributedDataParallel(torch.nn.Linear(3, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
        seen: list[list[int]] = []
        with make_loader() as loader:
            for epoch in range(EPOCHS):
                loader.set_epoch(epoch)
                ids: list[int] = []
                for batch in loader:
                    optimizer.zero_grad()
                    loss = (model(batch["x"]).squeeze(1) - batch["x"].sum(1)).pow(2).mean()
                    loss.backward()  # all-reduce: every rank has the same len(loader)
                    optimizer.step()
                    ids += batch["id"].tolist()
                seen.append(ids)
            # Save mid-epoch: 2 batches into epoch EPOCHS, then go on with a fresh loader.
            loader.set_epoch(EPOCHS)
            iterator = iter(loader)
            next(iterator), next(iterator)
            saved = json.loads(json.dumps(loader.state_dict()))  # plain JSON-able data
            rest = [batch["id"].tolist() for batch in iterator]
        with make_loader() as resumed:
            resumed.load_state_dict(saved)
            resumed_rest = [batch["id"].tolist() for batch in resumed]
        everyone: list[Any] = [None] * WORLD_SIZE
        dist.all_gather_object(everyone, {"seen": seen, "rest": rest, "resumed": resumed_rest})
        if rank == 0:
            with open(results, "w") as file:
                json.dump({"len": len(loader), "ranks": everyone}, file)
    finally:
        dist.destroy_process_group()


def check(results: dict[str, Any]) -> list[str]:
    """What went wrong, if anything."""
    failures = []
    ranks = results["ranks"]
    for epoch in range(EPOCHS):
        shards = [set(rank["seen"][epoch]) for rank in ranks]
        if set.union(*shards) != set(range(NUM_RECORDS)) or sum(map(len, shards)) != NUM_RECORDS:
            failures.append(f"epoch {epoch}: the ranks' shards are not a partition of the records")
    for r, rank in enumerate(ranks):
        if len({tuple(ids) for ids in rank["seen"]}) != EPOCHS:
            failures.append(f"rank {r}: two epochs came in the same order")
        if rank["resumed"] != rank["rest"]:
            failures.append(f"rank {r}: the resumed loader did not go on with the next batch")
    return failures


def main() -> None:
    workdir = tempfile.mkdtemp(prefix="grainlite-ddp-")
    store, results = os.path.join(workdir, "store"), os.path.join(workdir, "results.json")
    mp.spawn(train, args=(store, results), nprocs=WORLD_SIZE, join=True)
    with open(results) as file:
        outcome = json.load(file)
    failures = check(outcome)
    if failures:
        sys.exit("\n".join(failures))
    print(
        f"verified: {WORLD_SIZE} ranks x {outcome['len']} batches per epoch, disjoint shards "
        f"covering all {NUM_RECORDS} records every epoch, a new order every epoch, and an exact "
        f"mid-epoch resume"
    )


if __name__ == "__main__":
    main()
