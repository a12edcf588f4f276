"""A Keras 3 program that feeds ``model.fit``/``evaluate``/``predict`` from Grain, run as a job.

``python keras_client_job.py LIBRARY`` with LIBRARY ``grainlite`` (``install_as_grain()`` first,
so Keras's ``import grain`` gets grainlite) or ``grain`` (the real Grain 0.2.18). The backend is
Keras's ``KERAS_BACKEND`` (``jax``: fit, evaluate, predict and a resumed train loop; ``numpy``:
evaluate and predict, the numpy backend has no fit). For each input kind (a MapDataset, an
IterDataset under ``mp_prefetch`` with 2 workers, a DataLoader with 2 workers) it prints one
JSON line with what Keras computed, the batches the dataset yields read directly, and the same
training done batch by batch over those batches, so the test can check that Keras trained on
exactly these batches and that both libraries give the same numbers.
"""

from __future__ import annotations

import json
import sys

if sys.argv[1] == "grainlite":
    import grainlite

    grainlite.install_as_grain()
else:  # the real Grain reads absl flags in its multiprocessing code: parse them, as app.run would
    from absl import flags

    flags.FLAGS(sys.argv[:1])

import grain  # the module Keras imports too: grainlite after install_as_grain()
import numpy as np

if __name__ == "__main__":
    # Not in the real Grain's workers: they start by spawn, which runs this file again as
    # ``__mp_main__`` and needs only its datasets. Keras cost each of them 1.6 s of CPU, and a
    # job starts two workers for each of the 12 iterators Keras and the job make of one input kind.
    import keras

RECORDS = 64
BATCH = 8


def records() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(RECORDS, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + 0.25).astype(np.float32)[:, None]
    return [(x[i], y[i]) for i in range(RECORDS)]


def map_dataset() -> object:
    return grain.MapDataset.source(records()).shuffle(seed=11).batch(BATCH)


def iter_dataset() -> object:
    options = grain.MultiprocessingOptions(num_workers=2)
    dataset = grain.MapDataset.source(records()).shuffle(seed=12).to_iter_dataset()
    return dataset.batch(BATCH).mp_prefetch(options)


def data_loader() -> object:
    sampler = grain.samplers.IndexSampler(
        num_records=RECORDS,
        shard_options=grain.sharding.NoSharding(),
        shuffle=True,
        num_epochs=1,
        seed=13,
    )
    return grain.DataLoader(
        data_source=records(),
        sampler=sampler,
        operations=[grain.transforms.Batch(BATCH, drop_remainder=True)],
        worker_count=2,
    )


KINDS = {"map": map_dataset, "iter": iter_dataset, "loader": data_loader}


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    built = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    built.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return built


def plain(batches: list) -> list:
    return [[np.asarray(x).tolist(), np.asarray(y).tolist()] for x, y in batches]


def weights(trained: keras.Model) -> list:
    return [w.tolist() for w in trained.get_weights()]


def run_kind(kind: str, backend: str) -> dict:
    dataset = KINDS[kind]()
    batches = list(dataset)  # what the dataset yields, read directly
    out: dict = {"kind": kind, "batches": plain(batches)}
    if backend == "jax":
        fitted = model()
        out["history"] = fitted.fit(dataset, epochs=2, verbose=0).history["loss"]
        out["fit_weights"] = weights(fitted)
        by_hand = model()
        for _ in range(2):
            for x, y in batches:
                by_hand.train_on_batch(x, y)
        out["by_hand_weights"] = weights(by_hand)
    reference = model()  # evaluate/predict with fixed weights
    out["evaluate"] = reference.evaluate(dataset, verbose=0)
    out["predict"] = np.asarray(reference.predict(dataset, verbose=0)).tolist()
    out["predict_by_hand"] = np.concatenate(
        [np.asarray(reference.predict_on_batch(x)) for x, _ in batches]
    ).tolist()
    if backend == "jax":
        out["resume"] = resume(kind, batches)
    return out


def resume(kind: str, seen: list) -> dict:
    """Trains batch by batch on the dataset's batches (``seen``) and again from an iterator,
    restoring a saved state midway into a new iterator."""
    full = model()
    for x, y in seen:
        full.train_on_batch(x, y)
    first = model()
    iterator = iter(KINDS[kind]())
    for _ in range(3):
        x, y = next(iterator)
        first.train_on_batch(x, y)
    state = iterator.get_state()
    saved = state.decode() if isinstance(state, bytes) else json.dumps(state)
    saved_weights = first.get_weights()
    del iterator
    restored = iter(KINDS[kind]())
    restored.set_state(saved.encode() if kind == "loader" else json.loads(saved))
    second = model()
    second.set_weights(saved_weights)
    rest = []
    for x, y in restored:
        second.train_on_batch(x, y)
        rest.append((x, y))
    return {
        "state": saved,
        "same_batches_after_restore": plain(rest) == plain(seen[3:]),
        "full_weights": weights(full),
        "resumed_weights": weights(second),
    }


def main() -> None:
    backend = keras.backend.backend()
    active = getattr(grain, "__grainlite__", "grain " + getattr(grain, "__version__", "?"))
    print(json.dumps({"active": active, "backend": backend}), flush=True)
    for kind in sys.argv[2:] or KINDS:
        print(json.dumps(run_kind(kind, backend)), flush=True)


if __name__ == "__main__":
    main()
