"""RayWorkers(restart_lost_workers=N): a lost actor (killed, its node removed) is replaced and the
iterator goes on at the element after the last one it returned, every element exactly once, in
the order and with the states of a run that lost nothing; N bounds the restarts of one iterator.

A simulated three-node Ray cluster on 127.0.0.1 (Ray's own ``ray.cluster_utils.Cluster``, its
files in a private temp dir): a head node (the training side, 1 CPU) and two CPU nodes that alone
declare the ``data_node`` resource, so the actors run on the CPU nodes and the last test can
remove one of them mid-epoch.
"""

from __future__ import annotations

import logging
import os
import signal

import numpy as np
import pytest

import grainlite as grain
from grainlite.errors import GrainliteValueError, WorkerDiedError
from grainlite.ray import RayWorkers
from grainlite_tests.support import ray_pipelines as rp
from grainlite_tests.support.ray_state import private_ray_tmpdir
from grainlite_tests.support.waiting import wait_until_gone

ray = pytest.importorskip("ray", reason="the ray extra (pip install 'grainlite[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.timeout(240)

OPTIONS = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
ON_A_CPU_NODE = {"data_node": 1}


@pytest.fixture(scope="module", autouse=True)
def cluster():
    with private_ray_tmpdir():  # the head's address file and the sessions go there, and go
        cluster = cluster_utils.Cluster(
            initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
        )
        try:
            for _ in range(2):
                cluster.add_node(num_cpus=2, resources={"data_node": 2})
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, log_to_driver=False)
            yield cluster
        finally:
            ray.shutdown()
            cluster.shutdown()


def backend(restarts: int) -> RayWorkers:
    return RayWorkers(2, resources=ON_A_CPU_NODE, restart_lost_workers=restarts)


def take_until_restarted(it, stream, limit: int = 400) -> list[tuple[object, object]]:
    """Elements (with states) until the iterator runs a stream other than ``stream``."""
    out = []
    while it._stream is stream:
        assert len(out) < limit, "the lost actor was never replaced"
        out.extend(rp.run_with_states(it, 1))
    return out


def test_a_killed_actor_is_replaced_and_the_loader_gives_every_record_once_in_order(caplog):
    whole = rp.run_with_states(iter(rp.numbers_loader(600, worker_count=2)))
    it = iter(rp.numbers_loader(600, backend=backend(1)))
    run = rp.run_with_states(it, 3)
    stream, pids = it._stream, it._stream.pids()
    with caplog.at_level(logging.WARNING, logger="grainlite"):
        os.kill(pids[1], signal.SIGKILL)
        run += take_until_restarted(it, stream)
    run += rp.run_with_states(it)
    it.close()
    assert wait_until_gone(pids) == []
    # The same batches and states as the run that lost nothing: nothing lost, nothing repeated.
    rp.assert_same_run(run, whole)
    records = sorted(int(x) for batch, _ in run for x in np.asarray(batch).ravel())
    assert records == [x for x in range(600) if x % 5 != 0]
    assert f"Ray worker actor 1 of 2 (pid {pids[1]}" in caplog.text
    assert "restart 1 of restart_lost_workers=1" in caplog.text


def test_an_mp_prefetch_iterator_replaces_a_killed_actor_with_the_same_elements_and_states():
    whole = rp.run_with_states(iter(rp.dataset(250).mp_prefetch(OPTIONS)))
    it = iter(rp.dataset(250).mp_prefetch(OPTIONS, backend=backend(1)))
    run = rp.run_with_states(it, 3)
    os.kill(it._stream.pids()[0], signal.SIGKILL)
    run += rp.run_with_states(it)
    it.close()
    rp.assert_same_run(run, whole)


def test_a_second_loss_after_one_allowed_restart_raises_naming_the_spent_budget():
    it = iter(rp.numbers_loader(2000, backend=backend(1)))
    rp.run_with_states(it, 2)
    stream = it._stream
    os.kill(stream.pids()[0], signal.SIGKILL)
    take_until_restarted(it, stream)
    new = it._stream.pids()
    os.kill(new[1], signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=r"restart budget is spent.*restart_lost_workers=1"):
        for _ in range(500):
            next(it)
    it.close()
    assert wait_until_gone(new) == []


def test_a_failing_element_is_raised_at_its_place_and_restarts_nothing():
    ds = grain.MapDataset.range(12).map(rp.fails_on_five).to_iter_dataset()
    it = iter(ds.mp_prefetch(OPTIONS, backend=backend(1)))
    got = [next(it) for _ in range(5)]
    stream = it._stream
    with pytest.raises(ValueError, match="five"):
        next(it)
    got += list(it)
    it.close()
    assert got == [x for x in range(12) if x != 5]
    assert it._lost_worker_restarts == 0 and stream.position() is not None


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_restart_budget_that_is_not_a_count_is_refused(bad):
    with pytest.raises(GrainliteValueError, match=r"restart_lost_workers=\.\.\.\) must be an int"):
        RayWorkers(2, restart_lost_workers=bad)


# Last: it removes a CPU node.
def test_removing_a_node_mid_epoch_goes_on_on_the_remaining_node_exactly_once(cluster):
    ds = grain.MapDataset.range(400).map(rp.node_of).to_iter_dataset()
    it = iter(ds.mp_prefetch(OPTIONS, backend=backend(1)))
    got = [next(it) for _ in range(4)]
    lost = got[0]["node"]  # the node of actor 0
    node = next(n for n in cluster.worker_nodes if n.node_id == lost)
    cluster.remove_node(node)
    got += list(it)
    it.close()
    assert [int(e["element"]) for e in got] == list(range(400))
    after = {e["node"] for e in got[40:]}
    assert lost not in after and len(after) == 1


# After the test above: a new CPU node joins, and the DataLoader loses a node too.
def test_a_data_loader_that_loses_a_node_mid_epoch_goes_on_exactly_once_in_order(cluster):
    added = cluster.add_node(num_cpus=2, resources={"data_node": 2})
    cluster.wait_for_nodes()
    try:
        _loses_a_node(cluster)
    finally:  # the node this test added is its own child processes: the leak check counts them
        if added in cluster.worker_nodes:
            cluster.remove_node(added)


def _loses_a_node(cluster) -> None:

    def loader(operations, **workers):
        sampler = grain.IndexSampler(400, grain.NoSharding(), shuffle=True, num_epochs=1, seed=3)
        return grain.DataLoader(
            data_source=list(range(400)),
            sampler=sampler,
            operations=operations,
            worker_buffer_size=2,
            **workers,
        )

    whole = [int(x) for x in loader([], worker_count=2)]  # the records, in the loader's order
    it = iter(loader([rp.NodeOf()], backend=backend(1)))
    got = [next(it) for _ in range(4)]
    lost = got[0]["node"]
    cluster.remove_node(next(n for n in cluster.worker_nodes if n.node_id == lost))
    got += list(it)
    it.close()
    assert [int(e["element"]) for e in got] == whole
    assert lost not in {e["node"] for e in got[40:]}
