"""Train a small classifier in plain JAX on batches from a grainlite loader, crash, and resume.

What it shows:

* batches come from a ``grain.DataLoader`` over an ArrayRecord file (written here) with worker
  processes, through ``grain.device_put``: a thread copies the next two batches to the device
  while the step runs, so the step never waits for a host-to-device copy;
* the parameters, the optimizer state and the loader's iterator are saved *together* by Orbax
  every few steps, the iterator with ``grain.GrainCheckpointSave``;
* a crash (an exception at a chosen step) loses the work since the last checkpoint, and a new
  process restores all three and goes on;
* the resumed run sees exactly the batches, and computes exactly the losses and parameters, of a
  run that never crashed. The script checks this and exits non-zero if anything differs.

Run it with ``python examples/train_jax.py`` (a few seconds on a laptop CPU); ``--help`` lists the
knobs. ``examples/demo.py`` runs it as part of the demo.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # a toy model: the CPU is plenty, and always there

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from stand_in_data import decode_example, write_classification_records

import grainlite as grain


@dataclass(frozen=True)
class Settings:
    """Everything that defines a run; the uninterrupted and the resumed run share it."""

    num_records: int = 512
    num_features: int = 16
    num_classes: int = 4
    hidden: int = 32
    batch_size: int = 32
    steps: int = 40
    save_every: int = 5
    learning_rate: float = 0.05
    momentum: float = 0.9
    workers: int = 2
    seed: int = 0


@dataclass
class RunLog:
    """What each step saw and computed: ``losses[step]`` and ``batches[step]`` (a fingerprint)."""

    losses: dict[int, float] = field(default_factory=dict)
    batches: dict[int, str] = field(default_factory=dict)
    final_params: Any = None
    restored_from: int | None = None


class SimulatedCrash(RuntimeError):
    """Stands in for a preemption or an out-of-memory kill in the middle of training."""


class ParseExample(grain.MapTransform):
    """ArrayRecord bytes to ``{"features": float32[num_features], "label": int64}``."""

    def map(self, record: bytes) -> dict[str, np.ndarray]:
        return decode_example(record)


def make_loader(data_path: str, settings: Settings) -> grain.DataLoader:
    """The training input: shuffled, repeated without end, batched, read by worker processes."""
    return grain.DataLoader(
        data_source=grain.ArrayRecordDataSource(data_path),
        sampler=grain.IndexSampler(
            num_records=settings.num_records,
            shard_options=grain.NoSharding(),
            shuffle=True,
            num_epochs=None,  # the step count decides when training stops
            seed=settings.seed,
        ),
        operations=[
            ParseExample(),
            grain.Batch(batch_size=settings.batch_size, drop_remainder=True),
        ],
        worker_count=settings.workers,
    )


# The model: a one-hidden-layer MLP, and SGD with momentum, in plain JAX ------------------------


def init_state(settings: Settings) -> dict[str, Any]:
    """Parameters, momentum buffers and the step counter: everything the optimizer carries.

    Drawn with numpy and then moved to JAX, which compiles nothing (each eager jax.random call
    would compile a small program, seconds in all on a busy CPU).
    """
    rng = np.random.default_rng(settings.seed)
    d, h, c = settings.num_features, settings.hidden, settings.num_classes
    params = {
        "w1": rng.normal(size=(d, h)) / np.sqrt(d),
        "b1": np.zeros(h),
        "w2": rng.normal(size=(h, c)) / np.sqrt(h),
        "b2": np.zeros(c),
    }
    params = {name: np.asarray(value, np.float32) for name, value in params.items()}
    state = {
        "params": params,
        "momentum": {name: np.zeros_like(value) for name, value in params.items()},
        "step": np.zeros((), np.int32),
    }
    return jax.tree.map(jnp.asarray, state)


def loss_fn(params: dict[str, jax.Array], features: jax.Array, labels: jax.Array) -> jax.Array:
    hidden = jax.nn.relu(features @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))


@functools.cache  # one compiled step per settings, shared by every run in this process
def make_train_step(settings: Settings) -> Any:
    lr, beta = settings.learning_rate, settings.momentum

    @jax.jit
    def train_step(
        state: dict[str, Any], features: jax.Array, labels: jax.Array
    ) -> tuple[dict[str, Any], jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], features, labels)
        momentum = jax.tree.map(lambda m, g: beta * m + g, state["momentum"], grads)
        params = jax.tree.map(lambda p, m: p - lr * m, state["params"], momentum)
        return {"params": params, "momentum": momentum, "step": state["step"] + 1}, loss

    return train_step


def fingerprint(batch: dict[str, jax.Array]) -> str:
    """A short hash of a batch's contents, to compare the batches two runs trained on."""
    digest = hashlib.sha1(np.asarray(batch["features"]).tobytes())
    digest.update(np.asarray(batch["label"]).tobytes())
    return digest.hexdigest()[:12]


# Training with checkpoints -------------------------------------------------------------------


def train(
    data_path: str,
    checkpoint_dir: str,
    settings: Settings,
    log: RunLog,
    crash_at: int | None = None,
    resume: bool = False,
) -> RunLog:
    """Trains to ``settings.steps``, saving model, optimizer and loader every ``save_every`` steps.

    With ``resume``, first restores the latest checkpoint in ``checkpoint_dir``. With ``crash_at``,
    raises SimulatedCrash before training step ``crash_at``. Steps count from 1; ``log`` receives
    every step trained, even when the run crashes.
    """
    state = init_state(settings)
    train_step = make_train_step(settings)
    options = ocp.CheckpointManagerOptions(max_to_keep=2)
    with (
        ocp.CheckpointManager(checkpoint_dir, options=options) as mngr,
        # Batches arrive as jax.Arrays already on the device; the device iterator's state (saved
        # with GrainCheckpointSave like the loader's) is the position after the batch last taken.
        grain.device_put(make_loader(data_path, settings), prefetch=2) as batches,
    ):
        done = 0
        if resume:
            done = mngr.latest_step()
            if done is None:
                raise SystemExit(f"nothing to resume from: no checkpoint in {checkpoint_dir}")
            restored = mngr.restore(
                done,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(state),
                    loader=grain.GrainCheckpointRestore(batches),
                ),
            )
            state = restored.state  # restored.loader is `batches`, moved to step `done`
            log.restored_from = done
        for step in range(done + 1, settings.steps + 1):
            if step == crash_at:
                raise SimulatedCrash(f"simulated crash before step {step}")
            batch = next(batches)
            state, loss = train_step(state, batch["features"], batch["label"])
            log.losses[step] = float(loss)
            log.batches[step] = fingerprint(batch)
            if step % settings.save_every == 0:
                mngr.save(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardSave(state),
                        loader=grain.GrainCheckpointSave(batches),
                    ),
                )
    log.final_params = jax.tree.map(np.asarray, state["params"])
    return log


def same_params(a: Any, b: Any) -> bool:
    """True when two parameter trees are bit for bit equal."""
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(leaves_a, leaves_b)
    )


def crash_and_resume(workdir: Path, settings: Settings, crash_at: int) -> list[str]:
    """Runs the uninterrupted reference, the crashing run and the resumed run in ``workdir``.

    Returns the lines of a report; raises AssertionError if the resumed run differs in any batch,
    any loss or any parameter from the reference.
    """
    if not 1 < crash_at <= settings.steps:
        raise SystemExit(f"--crash-at must be in [2, {settings.steps}], got {crash_at}")
    for old in ("reference", "run"):  # a kept --workdir starts over
        shutil.rmtree(workdir / old, ignore_errors=True)
    data_path = write_classification_records(
        workdir / "train.array_record",
        settings.num_records,
        settings.num_features,
        settings.num_classes,
        settings.seed,
    )
    reference = train(data_path, str(workdir / "reference"), settings, RunLog())

    crashed = RunLog()
    try:
        train(data_path, str(workdir / "run"), settings, crashed, crash_at=crash_at)
    except SimulatedCrash as crash:
        crash_report = f"crashed on purpose: {crash} (trained steps 1-{max(crashed.losses)})"
    else:
        raise AssertionError("the run was meant to crash")
    resumed = train(data_path, str(workdir / "run"), settings, RunLog(), resume=True)
    start = resumed.restored_from
    assert start is not None

    lost = crash_at - 1 - start
    for step, loss in crashed.losses.items():
        assert loss == reference.losses[step], f"step {step} differs before the crash"
    for step in range(start + 1, settings.steps + 1):
        assert resumed.batches[step] == reference.batches[step], f"batch of step {step} differs"
        assert resumed.losses[step] == reference.losses[step], (
            f"loss of step {step} differs: {resumed.losses[step]!r} resumed, "
            f"{reference.losses[step]!r} uninterrupted"
        )
    assert same_params(resumed.final_params, reference.final_params), "final parameters differ"
    first, last = reference.losses[1], reference.losses[settings.steps]
    return [
        f"data: {settings.num_records} records in {Path(data_path).name}, batches of "
        f"{settings.batch_size} from {settings.workers} worker processes",
        f"uninterrupted run: {settings.steps} steps, loss {first:.4f} -> {last:.4f}",
        crash_report,
        f"resumed from the checkpoint of step {start} (model + optimizer + loader), "
        f"redoing the {lost} step(s) after it that the crash lost",
        f"verified: steps {start + 1}-{settings.steps} of the resumed run trained on the same "
        f"batches and computed bit-identical losses as the uninterrupted run",
        "verified: the final parameters are bit-identical",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=Settings.steps)
    parser.add_argument("--save-every", type=int, default=Settings.save_every)
    parser.add_argument("--crash-at", type=int, default=23, help="the step that crashes")
    parser.add_argument("--workers", type=int, default=Settings.workers)
    parser.add_argument("--workdir", type=Path, help="keep data and checkpoints here")
    args = parser.parse_args(argv)
    settings = Settings(steps=args.steps, save_every=args.save_every, workers=args.workers)
    with tempfile.TemporaryDirectory(prefix="grainlite_train_") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        for line in crash_and_resume(workdir, settings, args.crash_at):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
