"""A torchtitan-style PyTorch training loop over a Grain pipeline, with exact resume, run as a job.

``python torchtitan_client_job.py LIBRARY``: LIBRARY ``grainlite`` calls ``install_as_grain()``
first, ``grain`` runs the real Grain 0.2.18. Below the install the code is written as torchtitan's
Grain data loader is: ``import grain.python as grain``, a shuffled, repeated MapDataset made an
IterDataset with ReadOptions, packed (``FirstFitPackIterDataset``), batched by a collator that
returns torch tensors, prefetched by ``ThreadPrefetchIterDataset``; a ``state_dict()`` holding the
iterator's state per data-parallel rank. One run trains 8 steps; a second trains 4, keeps its
state dicts (data and model), rebuilds everything and trains 4 more. It prints one JSON line: the
losses and parameters of both runs, the data state dict, and the token batches of each.
"""

from __future__ import annotations

import json
import sys
from typing import Any

if sys.argv[1] == "grainlite":
    import grainlite

    grainlite.install_as_grain()

import grain.python as grain  # torchtitan's imports: grainlite after install_as_grain()
import numpy as np
import torch
from grain import experimental as grain_experimental

from grainlite_tests.support.llm_pipeline import MAX_LENGTH, documents, tokenize

ROWS = 4
STEPS = 8


def collate(rows: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """torchtitan's collator role: a batch of packed rows as torch tensors."""
    return {
        "input": torch.from_numpy(np.stack([row["inputs"] for row in rows]).astype(np.int64)),
        "labels": torch.from_numpy(np.stack([row["targets"] for row in rows]).astype(np.int64)),
    }


class DataLoader:
    """The shape of torchtitan's GrainDataLoader: one dataset graph, a state dict per rank."""

    def __init__(self, seed: int = 42) -> None:
        dataset = grain.MapDataset.source(documents(50)).shuffle(seed=seed).repeat().map(tokenize)
        iterable = dataset.to_iter_dataset(read_options=grain.ReadOptions(num_threads=2))
        packed = grain.experimental.FirstFitPackIterDataset(
            iterable,
            length_struct={"inputs": MAX_LENGTH, "targets": MAX_LENGTH},
            num_packing_bins=ROWS,
        )
        batched = packed.batch(ROWS, drop_remainder=True, batch_fn=collate)
        prefetched = grain_experimental.ThreadPrefetchIterDataset(batched, prefetch_buffer_size=2)
        self._iterator = iter(prefetched)

    def __iter__(self) -> Any:
        return self._iterator

    def state_dict(self) -> dict[str, Any]:
        return {"version": 1, "dp_world_size": 1, "dp_rank_0": self._iterator.get_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._iterator.set_state(state_dict["dp_rank_0"])


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(256, 8), torch.nn.Linear(8, 256))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train(loader: DataLoader, model: Any, optimizer: Any, steps: int) -> tuple[list, list]:
    losses, seen = [], []
    batches = iter(loader)
    for _ in range(steps):
        batch = next(batches)
        logits = model(batch["input"])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, 256), batch["labels"].reshape(-1)
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        seen.append(batch["input"].tolist())
    return losses, seen


def parameters(model: torch.nn.Module) -> list:
    return [p.detach().numpy().tolist() for p in model.parameters()]


def main() -> None:
    torch.use_deterministic_algorithms(True)
    model, optimizer = model_and_optimizer()
    full_losses, full_batches = train(DataLoader(), model, optimizer, STEPS)
    full_parameters = parameters(model)

    model, optimizer = model_and_optimizer()
    loader = DataLoader()
    first_losses, first_batches = train(loader, model, optimizer, STEPS // 2)
    # What a checkpoint keeps: the data state dict as JSON, the model and optimizer state dicts.
    data_state = json.dumps(loader.state_dict())
    model_state = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer_state = optimizer.state_dict()
    del loader, model, optimizer

    model, optimizer = model_and_optimizer()
    model.load_state_dict(model_state)
    optimizer.load_state_dict(optimizer_state)
    loader = DataLoader()
    loader.load_state_dict(json.loads(data_state))
    rest_losses, rest_batches = train(loader, model, optimizer, STEPS - STEPS // 2)
    print(
        json.dumps(
            {
                "active": getattr(grain, "__grainlite__", "the real grain"),
                "full_losses": full_losses,
                "full_batches": full_batches,
                "full_parameters": full_parameters,
                "resumed_losses": first_losses + rest_losses,
                "resumed_batches": first_batches + rest_batches,
                "resumed_parameters": parameters(model),
                "data_state": json.loads(data_state),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
