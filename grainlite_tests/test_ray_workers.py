"""grainlite.ray.RayWorkers on a local Ray instance: the workers of mp_prefetch and DataLoader
as Ray actors give the elements, order and states of local worker processes; states restore
across the two backends; dead actors are named; close and garbage collection end the actors.

One Ray instance (2 CPUs, no dashboard, its files in a private temp dir) serves the whole module;
each loader starts its actors.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from leak_check import alive

import grainlite as grain
from grainlite import shm
from grainlite.errors import (
    ClusterConnectionError,
    GrainliteTypeError,
    GrainliteValueError,
    WorkerDiedError,
)
from grainlite.ray import RayWorkers, direct
from grainlite_tests.support import ray_pipelines as rp
from grainlite_tests.support.ray_state import private_ray_tmpdir
from grainlite_tests.support.waiting import wait_until_gone

ray = pytest.importorskip("ray", reason="the ray extra (pip install 'grainlite[ray]')")

pytestmark = pytest.mark.timeout(180)

OPTIONS = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    with private_ray_tmpdir():  # the instance's files go there, and go with it
        ray.init(address="local", num_cpus=2, include_dashboard=False)
        yield
        ray.shutdown()


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    from stand_in_data import write_classification_records

    return write_classification_records(tmp_path_factory.mktemp("ray") / "r.array_record", 48)


# Same elements, order and states ---------------------------------------------------------------
# How the actors of this host talk to the training process: over its socket (the default), by
# Ray calls with their elements in shared memory (when they cannot reach the socket), or by Ray
# calls through the object store (RayWorkers(shared_memory=False)).
ROUTES = pytest.mark.parametrize("route", ["socket", "ray-calls", "object-store"])


@pytest.fixture
def backend_for(monkeypatch):
    def make(route: str, num_workers: int = 2) -> RayWorkers:
        if route == "ray-calls":  # as from another network namespace: nobody listens there
            monkeypatch.setattr(
                direct.DirectListener,
                "address",
                lambda self, worker: ("\0grainlite-nobody-listens", bytes(32), worker),
            )
        return RayWorkers(num_workers, shared_memory=route != "object-store")

    return make


@ROUTES
def test_mp_prefetch_on_ray_actors_gives_the_elements_order_and_states_of_local_workers(
    route, backend_for
):
    local = rp.run_with_states(iter(rp.dataset().mp_prefetch(OPTIONS)))
    backend = backend_for(route)
    remote = rp.run_with_states(iter(rp.dataset().mp_prefetch(OPTIONS, backend=backend)))
    assert len(local) > 10
    rp.assert_same_run(remote, local)


def test_a_dataset_state_restores_from_ray_actors_onto_local_workers_and_back():
    whole = rp.run_with_states(iter(rp.dataset().mp_prefetch(OPTIONS)))
    ray_ds = rp.dataset().mp_prefetch(OPTIONS, backend=RayWorkers(2))
    with iter(ray_ds) as it:
        saved = rp.run_with_states(it, limit=4)[-1][1]
    with iter(rp.dataset().mp_prefetch(OPTIONS)) as it:
        it.set_state(saved)
        rp.assert_same_run(rp.run_with_states(it), whole[4:])
    saved_locally = whole[6][1]
    with iter(ray_ds) as it:
        it.set_state(saved_locally)
        rp.assert_same_run(rp.run_with_states(it), whole[7:])


@ROUTES
def test_the_data_loader_on_ray_actors_gives_the_elements_order_and_states_of_local_workers(
    records, route, backend_for
):
    local = rp.run_with_states(iter(rp.loader(records, worker_count=2)))
    backend = backend_for(route)
    remote = rp.run_with_states(iter(rp.loader(records, backend=backend)))
    assert len(local) > 10
    rp.assert_same_run(remote, local)


def test_a_loader_state_restores_across_backends_and_onto_another_worker_count(records):
    whole = rp.run_with_states(iter(rp.loader(records, worker_count=2)))
    on_ray = rp.loader(records, backend=RayWorkers(2))
    with iter(on_ray) as it:
        saved = rp.run_with_states(it, limit=3)[-1][1]
    with iter(rp.loader(records, worker_count=2)) as it:
        it.set_state(saved)
        rp.assert_same_run(rp.run_with_states(it), whole[3:])
    with iter(on_ray) as it:
        it.set_state(whole[5][1])
        rp.assert_same_run(rp.run_with_states(it), whole[6:])
    # Elastic: the Ray state onto one worker, on Ray and locally, gives the same rest.
    with iter(rp.loader(records, worker_count=1)) as it:
        it.set_state(saved)
        on_one_local = rp.run_with_states(it)
    with iter(rp.loader(records, backend=RayWorkers(1))) as it:
        it.set_state(saved)
        rp.assert_same_run(rp.run_with_states(it), on_one_local)
    assert on_one_local


def test_an_orbax_checkpoint_saved_with_ray_workers_restores_onto_local_workers(records, tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    whole = rp.run_with_states(iter(rp.loader(records, worker_count=2)))
    on_ray = iter(rp.loader(records, backend=RayWorkers(num_workers=2)))
    with ocp.CheckpointManager(tmp_path) as manager, on_ray:
        rp.run_with_states(on_ray, limit=5)
        manager.save(5, args=grain.GrainCheckpointSave(on_ray))
        manager.wait_until_finished()
    local = iter(rp.loader(records, worker_count=2))
    with ocp.CheckpointManager(tmp_path) as manager, local:
        assert manager.restore(5, args=grain.GrainCheckpointRestore(local)) is local
        rp.assert_same_run(rp.run_with_states(local), whole[5:])


def test_ray_workers_run_with_the_worker_environment_and_not_in_this_process():
    ds = grain.MapDataset.range(8).map(rp.where_it_runs).to_iter_dataset()
    seen = list(ds.mp_prefetch(OPTIONS, backend=RayWorkers(2)))
    assert [int(e["element"]) for e in seen] == list(range(8))
    assert {e["JAX_PLATFORMS"] for e in seen} == {"cpu"}
    assert {e["CUDA_VISIBLE_DEVICES"] for e in seen} == {"-1"}
    pids = {int(e["pid"]) for e in seen}
    assert len(pids) == 2 and os.getpid() not in pids


def test_ray_workers_make_no_more_ahead_than_local_workers_while_the_consumer_waits(tmp_path):
    made: dict[str, list[int]] = {}
    for name, backend in (("local", None), ("ray", RayWorkers(2))):
        log = tmp_path / name
        made_by = grain.MapDataset.range(400).map(rp.Logged(str(log)))
        ds = made_by.to_iter_dataset(grain.ReadOptions(num_threads=0))  # no read-ahead threads
        with iter(ds.mp_prefetch(OPTIONS, backend=backend)) as it:
            assert [int(next(it)) for _ in range(4)] == [0, 1, 2, 3]
            made[name] = []
            for _ in range(2):
                time.sleep(2)  # time enough to run far ahead if nothing held the workers back
                made[name].append(len(log.read_text().splitlines()))
    # The credits (per_worker_buffer_size=2 per worker) stop both backends a few elements ahead
    # of the 4 delivered, and waiting longer makes nothing more.
    for counts in made.values():
        assert counts[0] == counts[1] < 24, made


def test_large_arrays_from_ray_workers_arrive_as_read_only_views_of_the_object_store():
    ds = grain.MapDataset.range(4).map(rp.large_array).to_iter_dataset()
    with iter(ds.mp_prefetch(OPTIONS, backend=RayWorkers(2, shared_memory=False))) as it:
        got = list(it)
    assert [int(a[0, 0]) for a in got] == [0, 1, 2, 3]
    for i, array in enumerate(got):
        assert array.shape == (256, 1024) and array.dtype == np.float32 and (array == i).all()
        assert not array.flags.writeable  # Ray's shared memory, not a private copy
        assert _slab_of(array) is None


def _slab_of(array: np.ndarray):
    """The shared-memory slab lease an array of a local worker's element derives from, if any."""
    from grainlite.engine.transport import _Lease

    base = array
    while base is not None:
        if type(base) is _Lease:
            return base
        base = getattr(base, "base", None)
    return None


@pytest.mark.parametrize(("route", "travel"), [("socket", "socket"), ("ray-calls", "ray calls")])
def test_actors_on_this_host_hand_arrays_over_in_shared_memory_as_local_workers_do(
    route, travel, backend_for
):
    ds = grain.MapDataset.range(4).map(rp.large_array).to_iter_dataset()
    with iter(ds.mp_prefetch(OPTIONS, backend=backend_for(route))) as it:
        got = [next(it)]
        actors = it._stream._group._actors
        assert ray.get([a.transport.remote() for a in actors]) == ["shared memory"] * 2
        assert ray.get([a.messages_travel.remote() for a in actors]) == [travel] * 2
        got += list(it)
    for i, array in enumerate(got):
        assert array.shape == (256, 1024) and (array == i).all()
        assert _slab_of(array) is not None  # a view of a worker's slab, no object store copy
        assert array.flags.writeable  # as from local workers


def test_an_actor_whose_shared_memory_differs_from_the_parents_uses_the_object_store():
    from grainlite.ray.actor import WorkerActor

    assert WorkerActor(shm.memory_key()).transport() == "shared memory"
    assert WorkerActor("0other:1:2").transport() == "object store"  # another host or container
    assert WorkerActor(None).transport() == "object store"  # RayWorkers(shared_memory=False)


def test_a_killed_training_process_leaves_no_segment_of_its_actors(tmp_path):
    """Its actors' slabs not yet announced (an element sent and not read, one made ahead) are
    named with its pid; Ray ends the actors when it dies, and each actor's janitor
    (grainlite.ray.janitor) removes them."""
    address = ray.get_runtime_context().gcs_address
    code = (
        "import sys, time, ray, grainlite as grain\n"
        "from grainlite.ray import RayWorkers\n"
        "from grainlite_tests.support import ray_pipelines as rp\n"
        f"ray.init(address={address!r})\n"
        "ds = grain.MapDataset.range(40).map(rp.large_array).to_iter_dataset()\n"
        "opts = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=1)\n"
        "it = iter(ds.mp_prefetch(opts, backend=RayWorkers(2)))\n"
        "first = next(it)\n"  # held: its slab is not free for the next elements
        "print(' '.join(map(str, it._stream.pids())), flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        actors = [int(p) for p in driver.stdout.readline().split()]
        assert len(actors) == 2
        deadline = time.monotonic() + 30
        while len(_segments_of(driver.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # each actor makes its next elements ahead into a new slab
        assert len(_segments_of(driver.pid)) >= 2
    finally:
        driver.kill()
        driver.wait()
        driver.stdout.close()
    assert wait_until_gone(actors) == []
    # The actors' janitors removed their slabs once the training process and they were gone
    # (left to the next loader's clean-up, they would stay; GRAINLITE_AUTO_CLEANUP=0 in CI).
    deadline = time.monotonic() + 1.0
    while _segments_of(driver.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _segments_of(driver.pid) == []


def _segments_of(pid: int) -> list[str]:
    return [name for name in shm.list_segments() if shm.owner_pid(name) == pid]


# The worker count on a live iterator ------------------------------------------------------------
def test_ray_workers_2_to_3_to_1_on_a_live_iterator_give_every_record_exactly_once():
    half_a_cpu = RayWorkers(2, resources={"CPU": 0.5})  # 3 actors fit the module's 2 CPUs
    it = iter(rp.numbers_loader(120, backend=half_a_cpu))
    run = rp.run_with_states(it, 4)
    old = it._stream.pids()
    run += rp.take_changing_workers(it, [(3, 5)])
    assert len(it._stream.pids()) == 3 and wait_until_gone(old) == []  # the old actors ended
    assert json.loads(run[-1][1])["worker_count"] == 3
    saved = run[-1][1]
    run += rp.take_changing_workers(it, [(1, -1)])
    pids = it._stream.pids() if it._stream is not None else []
    it.close()
    assert wait_until_gone(pids) == []
    kept = [x for x in range(120) if x % 5 != 0]
    assert sorted(int(x) for batch, _ in run for x in np.asarray(batch).ravel()) == kept
    # The state taken at 3 actors restores onto 3 local workers and 3 actors alike, and the
    # rest completes the records delivered before it.
    with iter(rp.numbers_loader(120, worker_count=3)) as local:
        local.set_state(saved)
        rest = rp.run_with_states(local)
    with iter(rp.numbers_loader(120, backend=RayWorkers(3, resources={"CPU": 0.5}))) as on_ray:
        on_ray.set_state(saved)
        rp.assert_same_run(rp.run_with_states(on_ray), rest)
    before = [int(x) for batch, _ in run[:9] for x in np.asarray(batch).ravel()]
    assert sorted(before + [int(x) for b, _ in rest for x in np.asarray(b).ravel()]) == kept


def test_an_mp_prefetch_iterator_on_ray_refuses_another_worker_count():
    with iter(rp.dataset().mp_prefetch(OPTIONS, backend=RayWorkers(2))) as it:
        next(it)
        with pytest.raises(GrainliteValueError, match="cannot move onto another worker count"):
            it.set_num_workers(3)


# Faults and ownership --------------------------------------------------------------------------
def test_an_actor_killed_mid_epoch_is_named_within_seconds_and_the_state_resumes_after_it():
    whole = rp.run_with_states(iter(rp.dataset().mp_prefetch(OPTIONS)))
    it = iter(rp.dataset().mp_prefetch(OPTIONS, backend=RayWorkers(2)))
    before = rp.run_with_states(it, limit=3)
    os.kill(it._stream.pids()[1], signal.SIGKILL)
    killed = time.monotonic()
    with pytest.raises(WorkerDiedError, match=r"Ray worker actor 1 of 2 \(pid \d+"):
        for _ in range(len(whole)):
            next(it)
    assert time.monotonic() - killed < 10
    it.set_state(before[-1][1])  # new actors, from the last element delivered
    rp.assert_same_run(rp.run_with_states(it), whole[3:])
    it.close()


class Bystander:
    def ping(self) -> str:
        return "here"


def test_close_ends_every_actor_the_iterator_started_and_no_other():
    path = {"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}}  # to import this module
    bystander = ray.remote(num_cpus=0)(Bystander).options(runtime_env=path).remote()
    assert ray.get(bystander.ping.remote()) == "here"
    it = iter(rp.dataset().mp_prefetch(OPTIONS, backend=RayWorkers(2)))
    next(it)
    stream = it._stream  # held: close() itself must end the actors, not their handles' GC
    pids = stream.pids()
    assert len(pids) == 2 and all(alive(p) for p in pids)
    it.close()
    assert wait_until_gone(pids) == []
    del stream
    assert ray.get(bystander.ping.remote(), timeout=30) == "here"
    ray.kill(bystander)


def test_garbage_collection_ends_the_actors_of_an_iterator_dropped_mid_stream(records):
    it = iter(rp.loader(records, backend=RayWorkers(2)))
    next(it)
    pids = it._stream.pids()
    assert len(pids) == 2 and all(alive(p) for p in pids)
    del it
    gc.collect()
    assert wait_until_gone(pids) == []


def test_an_iterator_dropped_without_garbage_collection_ends_its_actors_at_once():
    it = iter(rp.dataset().mp_prefetch(OPTIONS, backend=RayWorkers(2)))
    next(it)
    pids = it._stream.pids()
    assert len(pids) == 2 and all(alive(p) for p in pids)
    gc.collect()
    gc.disable()  # reference counting alone must end them (no cycle holds the stream)
    try:
        del it
        assert wait_until_gone(pids) == []
    finally:
        gc.enable()


# Arguments -------------------------------------------------------------------------------------
def test_a_worker_count_that_disagrees_with_the_backend_is_refused(records):
    with pytest.raises(GrainliteValueError, match="worker_count=3 disagrees"):
        rp.loader(records, worker_count=3, backend=RayWorkers(2))
    with pytest.raises(GrainliteValueError, match="num_workers=3 disagrees"):
        rp.dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=3), backend=RayWorkers(2))
    with pytest.raises(GrainliteTypeError, match="backend must be a worker backend"):
        rp.dataset().mp_prefetch(backend="ray")


def test_resources_that_no_node_has_are_refused_at_once_not_waited_for():
    ds = rp.dataset().mp_prefetch(OPTIONS, backend=RayWorkers(2, resources={"tpu_host": 1}))
    started = time.monotonic()
    with pytest.raises(GrainliteValueError, match="No node of the Ray cluster has"):
        next(iter(ds))
    assert time.monotonic() - started < 10


def test_importing_grainlite_and_grainlite_ray_does_not_import_ray():
    code = (
        "import sys, grainlite, grainlite.ray; "
        "grainlite.ray.RayWorkers(2); "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_an_elements_array_bytes_travel_out_of_band_and_come_back_as_views_of_them():
    import pickle

    import numpy as np

    from grainlite.engine.protocol import Element
    from grainlite.ray.actor import INLINE_BYTES, HeapPool, pack_for_object_store, unpack

    image = np.arange(3 * 128 * 128, dtype=np.float32).reshape(3, 128, 128)
    assert image.nbytes > INLINE_BYTES
    element = {"image": image.transpose(1, 2, 0), "label": np.int64(3), "name": "x"}
    payload = HeapPool().export(element)  # the transposed view becomes C-contiguous, as in a slab
    data, buffers = pack_for_object_store(Element(0, {"i": 1}, payload, [], []))
    assert len(data) < 1000 < image.nbytes  # the pickle holds no array bytes
    assert [b.nbytes for b in buffers] == [image.nbytes]
    message = unpack((data, buffers))
    got = message.payload["image"]
    assert got.flags.c_contiguous and np.array_equal(got, element["image"])
    assert np.shares_memory(got, buffers[0])  # a view of the buffer, no copy
    assert message.state == {"i": 1} and message.payload["name"] == "x"
    assert pickle.loads(pickle.dumps(message.payload["label"])) == 3


def test_a_small_elements_array_bytes_travel_as_bytes_inside_the_reply():
    import numpy as np

    from grainlite.engine.protocol import Element
    from grainlite.ray.actor import INLINE_BYTES, HeapPool, pack_for_object_store, unpack

    small = np.arange(16 * 10, dtype=np.int64).reshape(16, 10)
    assert small.nbytes <= INLINE_BYTES
    payload = HeapPool().export({"ids": small, "name": "x"})
    data, buffers = pack_for_object_store(Element(0, {"i": 1}, payload, [], []))
    assert [type(b) for b in buffers] == [bytes] and len(buffers[0]) == small.nbytes
    got = unpack((data, buffers)).payload["ids"]
    assert np.array_equal(got, small) and got.dtype == small.dtype
    assert not got.flags.writeable  # read-only, as arrays from the object store are


def test_an_actors_take_calls_answer_in_their_numbered_order_whatever_order_they_run_in():
    import threading

    from grainlite.ray.actor import WorkerActor

    actor = WorkerActor()  # the actor's class itself, its calls made from threads as Ray does
    replies: dict[int, list] = {}
    later = threading.Thread(target=lambda: replies.setdefault(1, actor.take(1)))
    later.start()  # call 1 runs first: it must leave the first message to call 0
    actor._queues.outbox.put(b"first")
    later.join(0.5)
    assert replies == {}
    replies[0] = actor.take(0)
    actor._queues.outbox.put(b"second")
    later.join(10)
    assert replies == {0: [b"first"], 1: [b"second"]}


# Last: it shuts the module's Ray instance down.
def test_ray_shut_down_under_a_running_iterator_is_a_connection_error_not_a_hang():
    it = iter(rp.dataset().mp_prefetch(OPTIONS, backend=RayWorkers(2)))
    next(it)
    ray.shutdown()
    started = time.monotonic()
    with pytest.raises(ClusterConnectionError, match="connection to the Ray cluster"):
        for _ in range(100):
            next(it)
    assert time.monotonic() - started < 10
    it.close()


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


@pytest.mark.parametrize("first", ["owner", "actor"])
def test_the_janitor_removes_an_actors_slabs_only_when_the_training_process_dies_first(first):
    from grainlite.ray import janitor

    owner, actor = _sleeper(), _sleeper()
    tag = "jt" + first[0]
    segment = shm.Segment.create(4096, tag, owner.pid)
    names = [segment.name]
    try:
        started = subprocess.run(
            [sys.executable, "-I", "-S", janitor.__file__, str(owner.pid), str(actor.pid),
             shm.owned_prefix(owner.pid, tag)],
            timeout=30,
        )  # fmt: skip
        assert started.returncode == 0  # the first process returns at once; its fork waits
        time.sleep(0.3)
        assert _segments_of(owner.pid) == names  # both still run: nothing removed
        ended = [owner, actor] if first == "owner" else [actor]
        for process in ended:
            process.kill()
            process.wait()
        deadline = time.monotonic() + 10
        while _segments_of(owner.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        # The owner dying first: the janitor removed the slabs. The actor ending first (its
        # loader closed it) while the owner runs: they are the owner's to remove, and the
        # janitor left them.
        assert _segments_of(owner.pid) == ([] if first == "owner" else names)
        deadline = time.monotonic() + 10
        while _janitors(owner.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _janitors(owner.pid) == []  # it ends either way
    finally:
        for process in (owner, actor):
            process.kill()
            process.wait()
        segment.close()
        shm.unlink(segment.name)


def _janitors(owner: int) -> list[int]:
    """Processes running grainlite.ray.janitor for training process ``owner``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    args = cmdline.read().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"janitor.py") for a in args) and str(owner).encode() in args:
                found.append(int(entry))
    return found
