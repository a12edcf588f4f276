"""Two real torch.distributed ranks (gloo, CPU) report what grainlite sees; run by the tests.

``python grainlite_tests/support/torch_ranks_job.py OUT_JSON`` spawns 2 processes; each reports its
ShardByTorchRank, a TorchDataLoader's rank, world size and first epoch with
``shard_options=None``, the warnings ShardByJaxProcess gave (twice made: warned once), strings
gathered from every rank, and a filtered loader's gathered state and resume. Rank 0 writes all
reports to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings

import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE = 2


def report(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD_SIZE)
    try:
        import grainlite as grain
        from grainlite.torch import ShardByTorchRank, TorchDataLoader
        from grainlite.torch.sharding import gather_strings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jax_shards = [repr(grain.ShardByJaxProcess()) for _ in range(2)]
        loader = TorchDataLoader(
            data_source=list(range(10)), operations=[grain.Batch(5)], shuffle=True, seed=0
        )
        result = {
            "shard": repr(ShardByTorchRank()),
            "loader": [loader.rank, loader.world_size, len(loader)],
            "epoch": [batch.tolist() for batch in loader],
            "jax": jax_shards,
            "warnings": [str(w.message) for w in caught],
            "gathered": gather_strings(f"from rank {rank}"),
        }
        result["filtered"] = filtered_state_round_trip(rank)
        everyone: list[object] = [None] * WORLD_SIZE
        dist.all_gather_object(everyone, result)
        if rank == 0:
            with open(out, "w") as file:
                json.dump(everyone, file)
    finally:
        dist.destroy_process_group()


def filtered_state_round_trip(rank: int) -> dict[str, object]:
    """With a Filter, state_dict() gathers every rank's own state; a new loader resumes exactly."""
    from torch_records import KeepEven, records  # grainlite_tests/support/, beside this script

    import grainlite as grain
    from grainlite.torch import TorchDataLoader

    def make() -> TorchDataLoader:
        return TorchDataLoader(
            data_source=records(24),
            operations=[KeepEven(), grain.Batch(2)],
            shuffle=True,
            seed=1,
            batches_per_epoch=2,
        )

    loader = make()
    batches = iter(loader)
    next(batches)
    saved = loader.state_dict()  # a collective: both ranks call it here
    own = loader._resources.iterator.get_state().decode()
    rest = [batch["id"].tolist() for batch in batches]
    resumed = make()
    resumed.load_state_dict(saved)
    return {
        "world_size": saved["world_size"],
        "own_state_saved": saved["ranks"][rank] == own,
        "states_differ": saved["ranks"][0] != saved["ranks"][1],
        "resumed_exactly": [batch["id"].tolist() for batch in resumed] == rest and bool(rest),
    }


if __name__ == "__main__":
    store = os.path.join(tempfile.mkdtemp(prefix="grainlite-ranks-"), "store")
    mp.spawn(report, args=(store, sys.argv[1]), nprocs=WORLD_SIZE, join=True)
