"""Orbax checkpointing of the iterator on one host: names, layout, errors, Grain interop, model.

Every test uses a real ``ocp.CheckpointManager`` and real loaders; the multi-host cases are in
``test_multihost.py``.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import grainlite as grain
from grainlite.errors import CheckpointMismatchError, GrainliteValueError
from grainlite_tests.support.contracts import to_plain

ocp = pytest.importorskip("orbax.checkpoint")
jax = pytest.importorskip("jax")
jnp = jax.numpy

NUM_RECORDS = 24
REPO = Path(__file__).resolve().parents[1]


def make_loader(worker_count: int = 0, seed: int = 7) -> grain.DataLoader:
    """A shuffled loader over RangeDataSource(0, 24) in batches of 2."""
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, NUM_RECORDS, 1),
        sampler=grain.IndexSampler(
            NUM_RECORDS, grain.NoSharding(), shuffle=True, num_epochs=1, seed=seed
        ),
        operations=[grain.Batch(2)],
        worker_count=worker_count,
    )


def reference_run(worker_count: int = 0) -> list:
    with iter(make_loader(worker_count)) as iterator:
        return [to_plain(e) for e in iterator]


def take(iterator, count: int) -> list:
    return [to_plain(next(iterator)) for _ in range(count)]


def rest(iterator) -> list:
    return [to_plain(e) for e in iterator]


def state_file(root: Path, step: int, item: str = "default") -> Path:
    return root / str(step) / item / "process_0-of-1.json"


@pytest.fixture
def manager(tmp_path):
    with ocp.CheckpointManager(tmp_path / "checkpoints") as mngr:
        yield mngr


def saved_at(manager, step: int, iterator) -> bytes:
    """Saves ``iterator`` at ``step``, waits, returns the state it had."""
    state = iterator.get_state()
    manager.save(step, args=grain.GrainCheckpointSave(iterator))
    manager.wait_until_finished()
    return state


# Names ------------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["Save", "Restore", "Handler"])
def test_the_three_spellings_name_the_same_classes(kind):
    import grainlite.checkpoint

    spellings = {
        getattr(grain, f"GrainCheckpoint{kind}"),
        getattr(grain, f"PyGrainCheckpoint{kind}"),
        getattr(grainlite.checkpoint, f"Checkpoint{kind}"),
    }
    assert len(spellings) == 1
    assert issubclass(
        spellings.pop(), ocp.CheckpointHandler if kind == "Handler" else ocp.args.CheckpointArgs
    )


@pytest.mark.timeout(60)
def test_without_orbax_every_spelling_raises_missing_extra_error_naming_the_orbax_extra():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["orbax"] = None  # as if orbax-checkpoint were not installed
        import grainlite
        from grainlite.errors import MissingExtraError

        def attempt(get):
            try:
                get()
            except MissingExtraError as error:
                print(type(error).__name__, isinstance(error, ImportError), error)

        for name in ["GrainCheckpointSave", "PyGrainCheckpointRestore", "GrainCheckpointHandler"]:
            attempt(lambda: getattr(grainlite, name))
        attempt(lambda: grainlite.checkpoint.CheckpointSave)  # names need orbax, the package not
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=50
    )
    assert result.returncode == 0, result.stderr
    message = (
        "MissingExtraError True Checkpointing a grainlite iterator with Orbax needs the module "
        "'orbax.checkpoint', which is not installed (No module named 'orbax.checkpoint'; 'orbax' "
        "is not a package); install it with: pip install 'grainlite[orbax]'"
    )
    assert result.stdout.splitlines() == [message] * 4


# Layout and resume ------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_manager_writes_exactly_get_state_to_step_item_process_0_of_1_json(manager, tmp_path):
    with iter(make_loader()) as iterator:
        take(iterator, 3)
        state = saved_at(manager, 3, iterator)
    step = tmp_path / "checkpoints" / "3"
    assert sorted(p.name for p in (step / "default").iterdir() if p.suffix == ".json") == [
        "process_0-of-1.json"
    ]
    assert state_file(tmp_path / "checkpoints", 3).read_bytes() == state
    assert json.loads(state)["last_seen_indices"] == {"0": 5}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", [0, 2], ids=["workers=0", "workers=2"])
def test_restore_returns_the_same_iterator_moved_to_the_next_element(manager, worker_count):
    expected = reference_run(worker_count)
    with iter(make_loader(worker_count)) as iterator:
        assert take(iterator, 4) == expected[:4]
        saved_at(manager, 4, iterator)
        assert take(iterator, 3) == expected[4:7]  # the live iterator moves back from here
        restored = manager.restore(4, args=grain.GrainCheckpointRestore(iterator))
        assert restored is iterator
        assert rest(iterator) == expected[4:]
    with iter(make_loader(worker_count)) as fresh:
        assert manager.restore(4, args=grain.PyGrainCheckpointRestore(fresh)) is fresh
        assert rest(fresh) == expected[4:]


# Errors -----------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_restore_without_the_process_file_names_the_missing_file(manager, tmp_path):
    with iter(make_loader()) as iterator:
        saved_at(manager, 1, iterator)
        path = state_file(tmp_path / "checkpoints", 1)
        path.unlink()
        with pytest.raises(ValueError) as caught:
            manager.restore(1, args=grain.GrainCheckpointRestore(iterator))
    assert isinstance(caught.value, GrainliteValueError)
    assert str(caught.value) == (
        f"File {path} does not exist. The folder holds no process_<i>-of-<n>.json file: pass the "
        f"folder of the iterator item, and restore a step whose save finished "
        f"(mngr.wait_until_finished())."
    )


@pytest.mark.timeout(60)
def test_restore_of_a_two_process_checkpoint_in_one_process_says_how_many_to_use(manager, tmp_path):
    with iter(make_loader()) as iterator:
        state = saved_at(manager, 1, iterator)
        path = state_file(tmp_path / "checkpoints", 1)
        path.unlink()
        path.with_name("process_0-of-2.json").write_bytes(state)
        with pytest.raises(ValueError) as caught:
            manager.restore(1, args=grain.GrainCheckpointRestore(iterator))
    assert str(caught.value) == (
        f"File {path} does not exist. The checkpoint holds ['process_0-of-2.json'], written by "
        f"2 JAX process(es); this run has 1. Restore with 2 JAX process(es): each process "
        f"restores the file it wrote."
    )


@pytest.mark.timeout(60)
def test_restore_into_a_loader_with_another_sampler_raises_mismatch_naming_the_file(
    manager, tmp_path
):
    with iter(make_loader(seed=7)) as iterator:
        take(iterator, 2)
        saved_at(manager, 2, iterator)
    with iter(make_loader(seed=8)) as other, pytest.raises(CheckpointMismatchError) as caught:
        manager.restore(2, args=grain.GrainCheckpointRestore(other))
    sampler = "IndexSampler(num_records=24, shard_options=NoSharding(shard_index=0, shard_count=1, drop_remainder=False), shuffle=True, num_epochs=1, seed={})"  # noqa: E501
    assert str(caught.value) == (
        "Sampler in checkpoint does not match dataloader sampler.\n"
        f"sampler in checkpoint: {sampler.format(7)}\n"
        f"sampler in dataloader: {sampler.format(8)}\n"
        "The sampler is compared by `repr(sampler)`: build the loader with the same sampler "
        "arguments, or give a custom sampler a stable `__repr__`."
    )
    path = state_file(tmp_path / "checkpoints", 2)
    assert caught.value.__notes__ == [f"grainlite: while restoring the iterator from {path}"]


class _LeavesAMark:
    """Unpickling this would create a file: the proof that a checkpoint was executed."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self):
        return (Path.touch, (self.mark,))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("protocol", "reason"),
    [(0, "it is not valid JSON"), (pickle.HIGHEST_PROTOCOL, "it is not UTF-8 text")],
    ids=["ascii-pickle", "binary-pickle"],
)
def test_a_pickle_in_the_state_file_is_rejected_and_never_executed(
    manager, tmp_path, protocol, reason
):
    mark = tmp_path / "executed"
    with iter(make_loader()) as iterator:
        saved_at(manager, 1, iterator)
        path = state_file(tmp_path / "checkpoints", 1)
        path.write_bytes(pickle.dumps(_LeavesAMark(mark), protocol=protocol))
        with pytest.raises(ValueError) as caught:
            manager.restore(1, args=grain.GrainCheckpointRestore(iterator))
    assert str(caught.value).startswith(f"Invalid iterator state: {reason} (")
    assert str(caught.value).endswith(
        "). Pass the bytes returned by get_state() of a loader with the same settings."
    )
    assert caught.value.__notes__ == [f"grainlite: while restoring the iterator from {path}"]
    assert not mark.exists()


# Interop with Grain ----------------------------------------------------------------------------


@pytest.fixture
def peer():
    pytest.importorskip("grain")
    from grainlite_tests.support import grain_peer

    return grain_peer


PEER_CONFIG = dict(num_records=NUM_RECORDS, shuffle=True, seed=7, ops=("map", "batch"))


@pytest.mark.timeout(60)
def test_a_checkpoint_written_by_grain_restores_into_grainlite_at_the_same_element(peer, tmp_path):
    config = peer.Config(**PEER_CONFIG)
    expected = rest(iter(config.build("grain")))
    grain_iterator = iter(config.build("grain"))
    take(grain_iterator, 5)
    with ocp.CheckpointManager(tmp_path) as mngr:
        mngr.save(5, args=peer.real_grain.PyGrainCheckpointSave(grain_iterator))
        mngr.wait_until_finished()
    with ocp.CheckpointManager(tmp_path) as mngr, iter(config.build("lite")) as iterator:
        assert mngr.restore(5, args=grain.GrainCheckpointRestore(iterator)) is iterator
        assert iterator.get_state() == grain_iterator.get_state()
        assert rest(iterator) == expected[5:]


@pytest.mark.timeout(60)
def test_a_checkpoint_written_by_grainlite_restores_into_grain_at_the_same_element(peer, tmp_path):
    config = peer.Config(**PEER_CONFIG)
    with iter(config.build("lite")) as iterator:
        expected = rest(iterator)
    with ocp.CheckpointManager(tmp_path) as mngr, iter(config.build("lite")) as iterator:
        take(iterator, 5)
        mngr.save(5, args=grain.GrainCheckpointSave(iterator))
        mngr.wait_until_finished()
    grain_iterator = iter(config.build("grain"))
    with ocp.CheckpointManager(tmp_path) as mngr:
        mngr.restore(5, args=peer.real_grain.PyGrainCheckpointRestore(grain_iterator))
    assert rest(grain_iterator) == expected[5:]


# With the model ---------------------------------------------------------------------------------


def model_state(scale: float = 1.0) -> dict:
    """Parameters and a hand-written momentum optimizer state: a plain pytree of jnp arrays."""
    params = {"w": jnp.arange(6.0).reshape(2, 3) * scale, "b": jnp.ones(3) * scale}
    momentum = jax.tree.map(lambda p: p * 0.1, params)
    return {"params": params, "opt_state": {"count": jnp.asarray(4), "momentum": momentum}}


def assert_same_tree(actual, expected) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
        assert np.asarray(a).dtype == np.asarray(e).dtype


@pytest.mark.timeout(60)
def test_the_model_and_the_iterator_save_and_restore_together_in_a_composite(tmp_path):
    expected = reference_run()
    train_state = model_state()
    with ocp.CheckpointManager(tmp_path) as mngr, iter(make_loader()) as iterator:
        take(iterator, 3)
        mngr.save(
            3,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(train_state),
                loader=grain.GrainCheckpointSave(iterator),
            ),
        )
        mngr.wait_until_finished()
    assert state_file(tmp_path, 3, item="loader").exists()
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, train_state)
    with ocp.CheckpointManager(tmp_path) as mngr, iter(make_loader()) as iterator:
        restored = mngr.restore(
            mngr.latest_step(),
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract),
                loader=grain.GrainCheckpointRestore(iterator),
            ),
        )
        assert restored.loader is iterator
        assert_same_tree(restored.params, train_state)
        assert rest(iterator) == expected[3:]


@pytest.mark.timeout(60)
def test_an_async_save_stores_the_position_of_the_save_call_while_the_loader_goes_on(tmp_path):
    expected = reference_run()
    options = ocp.CheckpointManagerOptions(
        enable_async_checkpointing=True, async_options=ocp.AsyncOptions(timeout_secs=50)
    )
    with ocp.CheckpointManager(tmp_path, options=options) as mngr, iter(make_loader()) as it:
        take(it, 2)
        at_save = it.get_state()
        mngr.save(
            2,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(model_state()),
                loader=grain.GrainCheckpointSave(it),
            ),
        )
        assert take(it, 5) == expected[2:7]  # training goes on while the save runs
        mngr.wait_until_finished()
        assert state_file(tmp_path, 2, item="loader").read_bytes() == at_save
        mngr.restore(2, args=ocp.args.Composite(loader=grain.GrainCheckpointRestore(it)))
        assert rest(it) == expected[2:]


@pytest.mark.timeout(30)
def test_save_args_hold_the_state_of_the_moment_they_are_made(tmp_path):
    handler = grain.GrainCheckpointHandler()
    with iter(make_loader()) as iterator:
        take(iterator, 1)
        at_args = iterator.get_state()
        args = grain.GrainCheckpointSave(iterator)
        take(iterator, 2)
        handler.save(tmp_path, args=args)
    assert args.state == at_args
    assert (tmp_path / "process_0-of-1.json").read_bytes() == at_args


@pytest.mark.timeout(30)
def test_a_save_writes_into_the_folder_orbax_creates_later_and_never_creates_it(
    tmp_path, monkeypatch
):
    import threading

    from grainlite.checkpoint import orbax as handler_module

    handler = grain.GrainCheckpointHandler()
    folder = tmp_path / "2.orbax-checkpoint-tmp" / "loader"
    with iter(make_loader()) as iterator:
        take(iterator, 1)
        args = grain.GrainCheckpointSave(iterator)
    # Orbax makes the folder in the background, after the handler was called.
    maker = threading.Timer(0.3, lambda: folder.mkdir(parents=True))
    maker.start()
    handler.save(folder, args=args)
    maker.join()
    assert (folder / "process_0-of-1.json").read_bytes() == args.state
    monkeypatch.setattr(handler_module, "_FOLDER_WAIT_S", 0.2)
    missing = tmp_path / "never-made"
    with pytest.raises(GrainliteValueError, match="did not appear within"):
        handler.save(missing, args=args)
    assert not missing.exists()


# Dataset-API iterators --------------------------------------------------------------------------


def times_ten(x):
    return x * 10


def make_dataset(library=grain, workers: int = 0):
    """range(24), shuffled with seed 7, times ten, in batches of 2, as an IterDataset of
    ``library`` (grainlite, or the real grain for the interop tests)."""
    dataset = (
        library.MapDataset.range(NUM_RECORDS)
        .shuffle(seed=7)
        .map(times_ten)
        .batch(2)
        .to_iter_dataset()
    )
    if workers:
        dataset = dataset.mp_prefetch(library.MultiprocessingOptions(num_workers=workers))
    return dataset


def dataset_run(library=grain, workers: int = 0) -> list:
    iterator = iter(make_dataset(library, workers))
    try:
        return rest(iterator)
    finally:
        getattr(iterator, "close", lambda: None)()


@pytest.mark.timeout(60)
def test_a_dataset_iterator_is_written_as_its_state_in_json_with_a_four_space_indent(
    manager, tmp_path
):
    with iter(make_dataset()) as iterator:
        take(iterator, 3)
        state = iterator.get_state()
        manager.save(3, args=grain.GrainCheckpointSave(iterator))
        manager.wait_until_finished()
    text = state_file(tmp_path / "checkpoints", 3).read_text()
    assert state == {"next_index": 3}
    assert text == json.dumps(state, indent=4) == '{\n    "next_index": 3\n}'


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "mp_prefetch-2"])
def test_a_restored_dataset_iterator_goes_on_at_the_next_element(manager, workers):
    expected = dataset_run(workers=workers)
    with iter(make_dataset(workers=workers)) as iterator:
        assert take(iterator, 4) == expected[:4]
        manager.save(4, args=grain.GrainCheckpointSave(iterator))
        manager.wait_until_finished()
        assert take(iterator, 3) == expected[4:7]  # the live iterator moves back from here
        assert manager.restore(4, args=grain.GrainCheckpointRestore(iterator)) is iterator
        assert rest(iterator) == expected[4:]
    with iter(make_dataset(workers=workers)) as fresh:
        assert manager.restore(4, args=grain.GrainCheckpointRestore(fresh)) is fresh
        assert rest(fresh) == expected[4:]


@pytest.mark.timeout(60)
def test_a_dataset_iterator_and_the_model_save_and_restore_together_in_a_composite(tmp_path):
    expected = dataset_run()
    train_state = model_state()
    with ocp.CheckpointManager(tmp_path) as mngr, iter(make_dataset()) as iterator:
        take(iterator, 5)
        mngr.save(
            5,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(train_state),
                data=grain.GrainCheckpointSave(iterator),
            ),
        )
        mngr.wait_until_finished()
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, train_state)
    with ocp.CheckpointManager(tmp_path) as mngr, iter(make_dataset()) as iterator:
        restored = mngr.restore(
            5,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract),
                data=grain.GrainCheckpointRestore(iterator),
            ),
        )
        assert restored.data is iterator
        assert_same_tree(restored.params, train_state)
        assert rest(iterator) == expected[5:]


@pytest.mark.timeout(60)
def test_a_dataset_checkpoint_written_by_grain_restores_into_grainlite_at_the_same_element(
    peer, tmp_path
):
    expected = dataset_run()
    assert dataset_run(peer.real_grain) == expected
    grain_iterator = iter(make_dataset(peer.real_grain))
    take(grain_iterator, 5)
    with ocp.CheckpointManager(tmp_path) as mngr:
        mngr.save(5, args=peer.real_grain.PyGrainCheckpointSave(grain_iterator))
        mngr.wait_until_finished()
    with ocp.CheckpointManager(tmp_path) as mngr, iter(make_dataset()) as iterator:
        assert mngr.restore(5, args=grain.GrainCheckpointRestore(iterator)) is iterator
        assert iterator.get_state() == grain_iterator.get_state()
        assert rest(iterator) == expected[5:]


@pytest.mark.timeout(60)
def test_a_dataset_checkpoint_written_by_grainlite_restores_into_grain_at_the_same_element(
    peer, tmp_path
):
    expected = dataset_run()
    with ocp.CheckpointManager(tmp_path) as mngr, iter(make_dataset()) as iterator:
        take(iterator, 5)
        mngr.save(5, args=grain.GrainCheckpointSave(iterator))
        mngr.wait_until_finished()
    grain_iterator = iter(make_dataset(peer.real_grain))
    with ocp.CheckpointManager(tmp_path) as mngr:
        mngr.restore(5, args=peer.real_grain.PyGrainCheckpointRestore(grain_iterator))
    assert rest(grain_iterator) == expected[5:]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("protocol", "reason"),
    [(0, "it is not valid JSON"), (pickle.HIGHEST_PROTOCOL, "it is not UTF-8 text")],
    ids=["ascii-pickle", "binary-pickle"],
)
def test_a_pickle_in_a_dataset_iterator_state_file_is_rejected_and_never_executed(
    manager, tmp_path, protocol, reason
):
    mark = tmp_path / "executed"
    with iter(make_dataset()) as iterator:
        take(iterator, 1)
        manager.save(1, args=grain.GrainCheckpointSave(iterator))
        manager.wait_until_finished()
        path = state_file(tmp_path / "checkpoints", 1)
        path.write_bytes(pickle.dumps(_LeavesAMark(mark), protocol=protocol))
        with pytest.raises(ValueError) as caught:
            manager.restore(1, args=grain.GrainCheckpointRestore(iterator))
    assert str(caught.value).startswith(f"Invalid dataset iterator state: {reason} (")
    assert str(caught.value).endswith(
        "). Restore a step written by CheckpointSave of a dataset iterator (grainlite or Grain)."
    )
    assert caught.value.__notes__ == [f"grainlite: while restoring the iterator from {path}"]
    assert not mark.exists()
    if protocol == 0:
        assert isinstance(caught.value, json.JSONDecodeError)  # what Grain's json.loads raises


class CountingIterator(grain.DatasetIterator):
    """A user's own iterator: counts up from 0; its state is ``{"count": n}`` (or ``bad`` as is)."""

    def __init__(self, bad=None) -> None:
        super().__init__()
        self.count, self.bad, self.states_set = 0, bad, []

    def __next__(self) -> int:
        self.count += 1
        return self.count - 1

    def get_state(self) -> dict:
        return {"count": self.count} if self.bad is None else self.bad

    def set_state(self, state: dict) -> None:
        self.states_set.append(state)
        self.count = state["count"]


@pytest.mark.timeout(60)
def test_a_users_dataset_iterator_subclass_gets_back_the_dict_it_saved(manager):
    iterator = CountingIterator()
    take(iterator, 3)
    manager.save(3, args=grain.GrainCheckpointSave(iterator))
    manager.wait_until_finished()
    fresh = CountingIterator()
    assert manager.restore(3, args=grain.GrainCheckpointRestore(fresh)) is fresh
    assert fresh.states_set == [{"count": 3}]
    assert take(fresh, 2) == [3, 4]


@pytest.mark.timeout(30)
def test_a_dataset_iterator_state_that_is_not_json_fails_at_save_naming_the_value_and_the_fix():
    iterator = CountingIterator(bad={"count": np.int64(3)})
    with pytest.raises(TypeError) as caught:
        grain.GrainCheckpointSave(iterator)
    assert str(caught.value) == (
        "CountingIterator.get_state() returned {'count': np.int64(3)}, which is not JSON "
        "(Object of type int64 is not JSON serializable). A dataset iterator's state must hold "
        "only dicts, lists, str, int, float, bool and None: convert numpy values with int() / "
        "float() / .tolist()."
    )


@pytest.mark.timeout(60)
def test_a_dataset_iterator_state_file_holding_a_json_list_names_what_it_holds(manager, tmp_path):
    iterator = CountingIterator()
    manager.save(1, args=grain.GrainCheckpointSave(iterator))
    manager.wait_until_finished()
    state_file(tmp_path / "checkpoints", 1).write_text("[1, 2]")
    with pytest.raises(ValueError) as caught:
        manager.restore(1, args=grain.GrainCheckpointRestore(CountingIterator()))
    assert str(caught.value) == (
        "Invalid dataset iterator state: expected a JSON object, got list '[1, 2]'. Restore a "
        "step written by CheckpointSave of a dataset iterator (grainlite or Grain)."
    )


@pytest.mark.timeout(30)
def test_dataset_save_args_hold_the_state_of_the_moment_they_are_made(tmp_path):
    handler = grain.GrainCheckpointHandler()
    with iter(make_dataset()) as iterator:
        take(iterator, 1)
        at_args = iterator.get_state()
        args = grain.GrainCheckpointSave(iterator)
        take(iterator, 2)
        handler.save(tmp_path, args=args)
    assert (
        json.loads((tmp_path / "process_0-of-1.json").read_text()) == at_args == {"next_index": 1}
    )
