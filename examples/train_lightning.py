"""Train with PyTorch Lightning on a grainlite TorchDataLoader: 2 DDP ranks, killed, resumed.

What it shows:

* a ``LightningDataModule`` in the shape of ffcv-pl's: ``prepare_data()`` writes the data file once,
  ``setup()`` opens it on every rank, ``train_dataloader()`` returns a
  :class:`grainlite.torch.TorchDataLoader`. The loader shards by rank, reshuffles every epoch,
  has a ``len()`` and yields tensors; nothing else is needed;
* a 2-rank DDP fit on CPU (``strategy="ddp"``, 2 worker processes per rank) that is killed with
  SIGKILL right after a checkpoint in the middle of an epoch, resumed with ``ckpt_path=``, killed
  again after the last batch of an epoch, and resumed again to the end;
* each rank trained on exactly the batches of an uninterrupted run, in the same order (the script
  checks it against the loader's own epochs and exits non-zero if anything differs), and no
  process or shared memory of the killed runs is left.

Run it with ``python examples/train_lightning.py`` (about half a minute on 2 CPU cores);
``--report FILE`` writes what every rank trained on as JSON. ``python examples/train_lightning.py
fit ...`` is one fit; the driver runs it three times.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from leak_check import alive, live_children
from stand_in_data import decode_example, encode_example

import grainlite as grain
from grainlite import shm
from grainlite.torch import TorchDataLoader

NUM_RECORDS = 48  # 24 per rank: 6 batches of 4 per epoch on each rank
NUM_FEATURES = 4
BATCH_SIZE = 4
WORKERS = 2  # worker processes per rank
EPOCHS = 4
SEED = 7
# The first run is killed after step 4 (mid-epoch 0), the second after step 12 (the last batch
# of epoch 1); each saved a Lightning checkpoint at that step first.
KILL_STEPS = (4, 12)
WAIT_S = 180.0


class ParseRecord(grain.MapTransform):
    """ArrayRecord bytes to ``{"features": float32[4], "id": int64}``."""

    def map(self, record: bytes) -> dict[str, Any]:
        example = decode_example(record)
        return {"features": example["features"], "id": example["label"]}


def write_records(path: Path) -> None:
    """The data: record ``i`` holds random features and its own index as the id."""
    from array_record.python import array_record_module as arm

    features = np.random.default_rng(0).normal(size=(NUM_RECORDS, NUM_FEATURES))
    writer = arm.ArrayRecordWriter(str(path), "group_size:1")
    try:
        for i, row in enumerate(features):
            writer.write(encode_example(row, i))
    finally:
        writer.close()


def make_loader(source: Any, **kwargs: Any) -> TorchDataLoader:
    """The training loader; ``kwargs`` (e.g. ``shard_options``) only for the check."""
    return TorchDataLoader(
        data_source=source,
        operations=[ParseRecord(), grain.Batch(BATCH_SIZE)],
        shuffle=True,
        seed=SEED,
        worker_count=WORKERS,
        **kwargs,
    )


class RecordsDataModule(L.LightningDataModule):
    """The data side, as in ffcv-pl: write once, open on every rank, return the loader."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.source: Any = None

    def prepare_data(self) -> None:  # rank 0 only
        if not self.path.exists():
            write_records(self.path)

    def setup(self, stage: str) -> None:  # every rank
        self.source = grain.ArrayRecordDataSource(str(self.path))

    def train_dataloader(self) -> TorchDataLoader:
        return make_loader(self.source)


class Regressor(L.LightningModule):
    """A linear model; it records the ids of every batch it trains on, per rank."""

    def __init__(self, workdir: Path, phase: str, stall_at: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(NUM_FEATURES, 1)
        self.workdir, self.phase, self.stall_at = workdir, phase, stall_at

    def _write(self, name: str, line: dict[str, Any]) -> None:
        with open(self.workdir / f"{self.phase}-rank{self.global_rank}-{name}", "a") as file:
            file.write(json.dumps(line) + "\n")
            file.flush()

    def on_train_start(self) -> None:
        loader = self.trainer.train_dataloader
        self._write(
            "start.jsonl",
            {"len": len(loader), "num_training_batches": self.trainer.num_training_batches},
        )

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        features, ids = batch["features"], batch["id"]
        self._write(
            "batches.jsonl",
            {
                "step": self.global_step + 1,
                "epoch": self.current_epoch,
                "ids": ids.tolist(),
                "tensors": isinstance(features, torch.Tensor) and isinstance(ids, torch.Tensor),
            },
        )
        return torch.nn.functional.mse_loss(self.layer(features).squeeze(1), features.sum(1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_batch_end(self, *args: Any) -> None:
        # Lightning's checkpoint of this step is saved (callbacks run first): wait to be killed.
        if self.global_step == self.stall_at:
            pids = [os.getpid(), *sorted(live_children())]
            self._write("stalled.jsonl", {"pids": pids})
            while True:
                time.sleep(1)


def fit(args: argparse.Namespace) -> None:
    """One fit; with ``--stall-at N`` it saves a checkpoint at step N and waits to be killed."""
    workdir = Path(args.workdir)
    callbacks = []
    if args.stall_at:
        callbacks.append(
            L.pytorch.callbacks.ModelCheckpoint(
                dirpath=workdir / args.phase,
                filename="{step}",
                every_n_train_steps=args.stall_at,
                save_top_k=-1,
            )
        )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(callbacks),
        callbacks=callbacks,
        default_root_dir=workdir,
    )
    model = Regressor(workdir, args.phase, args.stall_at)
    data = RecordsDataModule(workdir / "train.array_record")
    trainer.fit(model, datamodule=data, ckpt_path=args.resume)
    # Lightning's teardown stopped the loader's workers: none is left while this process lives.
    model._write("after-fit.jsonl", {"workers_left": sorted(grainlite_workers())})


def grainlite_workers() -> set[int]:
    """This process's live grainlite worker processes and the fork server that forks them.

    Its own only: rank 0's descendants include rank 1 (Lightning starts it) and rank 1's
    loader. A worker or fork server is a child of this process (``python -m
    grainlite.engine.child`` or ``python -m grainlite.engine.forkserver``), and forked workers
    are the server's children (they keep its command line)."""
    workers: set[int] = set()
    for pid in live_children():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                command = file.read()
            with open(f"/proc/{pid}/stat") as file:
                parent = int(file.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue  # it ended meanwhile
        if parent == os.getpid() and (
            b"grainlite.engine.child" in command or b"grainlite.engine.forkserver" in command
        ):
            workers |= {pid, *live_children(pid)}
    return workers


def _wait_for(condition: Any, what: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if process.poll() is not None:
            raise SystemExit(f"the fit exited with {process.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def run_phase(workdir: Path, phase: str, stall_at: int, resume: str | None) -> list[int]:
    """Runs one fit; if ``stall_at``, SIGKILLs both ranks there. Returns the killed pids."""
    command = [sys.executable, __file__, "fit", "--workdir", str(workdir), "--phase", phase]
    command += ["--stall-at", str(stall_at)] + (["--resume", resume] if resume else [])
    process = subprocess.Popen(command, text=True)
    if not stall_at:
        if process.wait(timeout=WAIT_S) != 0:
            raise SystemExit(f"{phase}: the fit exited with {process.returncode}")
        return []
    markers = [workdir / f"{phase}-rank{rank}-stalled.jsonl" for rank in (0, 1)]
    _wait_for(
        lambda: all(m.exists() and m.read_text().endswith("\n") for m in markers), phase, process
    )
    pids = [pid for m in markers for pid in json.loads(m.read_text())["pids"]]
    ranks = [json.loads(m.read_text())["pids"][0] for m in markers]
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    process.wait(timeout=WAIT_S)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids):  # the workers end by themselves when a rank dies
        if time.monotonic() > deadline:
            raise SystemExit(
                f"{phase}: processes left after the kill: {[p for p in pids if alive(p)]}"
            )
        time.sleep(0.05)
    return pids


def recorded(workdir: Path, phases: list[str], rank: int) -> list[dict[str, Any]]:
    """Every batch a rank trained on over the phases, in step order."""
    lines = []
    for phase in phases:
        path = workdir / f"{phase}-rank{rank}-batches.jsonl"
        lines += [{**json.loads(line), "phase": phase} for line in path.read_text().splitlines()]
    return lines


def expected(workdir: Path, rank: int) -> list[list[int]]:
    """The batches of an uninterrupted run on ``rank``: the loader's own epochs."""
    source = grain.ArrayRecordDataSource(str(workdir / "train.array_record"))
    with make_loader(source, shard_options=grain.ShardOptions(rank, 2)) as loader:
        return [batch["id"].tolist() for _ in range(EPOCHS) for batch in loader]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", help="write what every rank trained on to this JSON file")
    parser.add_argument("--workdir", help="where data, checkpoints and records go (default: temp)")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="grainlite-lightning-"))
    workdir.mkdir(parents=True, exist_ok=True)
    phases = ["killed-mid-epoch", "killed-at-epoch-end", "finished"]
    killed: list[int] = []
    resume = None
    for phase, stall_at in zip(phases, [*KILL_STEPS, 0]):
        killed += run_phase(workdir, phase, stall_at, resume)
        if stall_at:
            (resume,) = (str(p) for p in (workdir / phase).glob("*.ckpt"))
            print(f"{phase}: killed both ranks after step {stall_at}; resuming from {resume}")
    left = [n for n in shm.list_segments() if shm.owner_pid(n) in set(killed)]
    report: dict[str, Any] = {"leftover_segments": left, "killed_pids": killed, "ranks": []}
    for rank in (0, 1):
        lines = recorded(workdir, phases, rank)
        starts = [
            json.loads(line)
            for phase in phases
            for line in (workdir / f"{phase}-rank{rank}-start.jsonl").read_text().splitlines()
        ]
        after_fit = json.loads((workdir / f"finished-rank{rank}-after-fit.jsonl").read_text())
        report["ranks"].append(
            {
                "trained": [line["ids"] for line in lines],
                "steps": [line["step"] for line in lines],
                "epochs": [line["epoch"] for line in lines],
                "phases": [line["phase"] for line in lines],
                "tensors": all(line["tensors"] for line in lines),
                "starts": starts,
                "workers_left_after_fit": after_fit["workers_left"],
                "expected": expected(workdir, rank),
            }
        )
    if args.report:
        Path(args.report).write_text(json.dumps(report))
    failures = [f"shared memory of the killed runs left: {left}"] if left else []
    for rank, result in enumerate(report["ranks"]):
        if result["trained"] != result["expected"]:
            failures.append(f"rank {rank} trained on other batches than an uninterrupted run")
        if result["workers_left_after_fit"]:
            failures.append(f"rank {rank}: loader workers alive after Trainer.fit returned")
    if failures:
        raise SystemExit("\n".join(failures))
    steps = len(report["ranks"][0]["trained"])
    print(f"verified: both ranks trained on the {steps} batches of an uninterrupted run, in order")


if __name__ == "__main__":
    if sys.argv[1:2] == ["fit"]:
        fit_parser = argparse.ArgumentParser()
        fit_parser.add_argument("fit")
        fit_parser.add_argument("--workdir", required=True)
        fit_parser.add_argument("--phase", required=True)
        fit_parser.add_argument("--stall-at", type=int, default=0)
        fit_parser.add_argument("--resume")
        fit(fit_parser.parse_args())
    else:
        main()
