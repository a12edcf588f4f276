"""grainlite.ray.RayWorkers on a simulated two-node Ray cluster on 127.0.0.1 (Ray's own
``ray.cluster_utils.Cluster``): a head node (the training side, 1 CPU) and a CPU node that alone
declares the ``data_node`` resource. Workers that ask for it run there, their elements cross
between the nodes' object stores, and they equal local workers' elements and states. Losing the
node is a named error within seconds, and starting again without it says what is missing.
"""

from __future__ import annotations

import time

import pytest

import grainlite as grain
from grainlite.errors import GrainliteValueError, WorkerDiedError
from grainlite.ray import RayWorkers
from grainlite_tests.support import ray_pipelines as rp
from grainlite_tests.support.ray_state import private_ray_tmpdir

ray = pytest.importorskip("ray", reason="the ray extra (pip install 'grainlite[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.timeout(240)

OPTIONS = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
ON_THE_CPU_NODE = {"data_node": 1}


@pytest.fixture(scope="module", autouse=True)
def two_nodes():
    # The head writes ray_current_cluster, and the nodes their sessions, in a private temp dir.
    with private_ray_tmpdir():
        cluster = cluster_utils.Cluster(
            initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
        )
        try:
            cpu_node = cluster.add_node(num_cpus=2, resources={"data_node": 2})
            cluster.wait_for_nodes()
            # Connected here, as a training script would be, so no test's loader owns the
            # connection (the tests that passed address= find it connected).
            ray.init(address=cluster.address)
            yield cluster, cpu_node
        finally:
            ray.shutdown()
            cluster.shutdown()


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    from stand_in_data import write_classification_records

    return write_classification_records(tmp_path_factory.mktemp("ray2") / "r.array_record", 40)


def test_workers_that_ask_for_the_cpu_nodes_resource_run_only_there(two_nodes):
    cluster, cpu_node = two_nodes
    ds = grain.MapDataset.range(6).map(rp.node_of).to_iter_dataset()
    # The address of the cluster this process is connected to: the loader checks it answers.
    backend = RayWorkers(2, resources=ON_THE_CPU_NODE, address=cluster.address)
    seen = list(ds.mp_prefetch(OPTIONS, backend=backend))
    assert [int(e["element"]) for e in seen] == list(range(6))
    assert {e["node"] for e in seen} == {cpu_node.node_id}
    assert ray.get_runtime_context().get_node_id() != cpu_node.node_id


def test_the_dataset_api_on_the_cpu_node_gives_the_elements_and_states_of_local_workers():
    local = rp.run_with_states(iter(rp.dataset().mp_prefetch(OPTIONS)))
    backend = RayWorkers(2, resources=ON_THE_CPU_NODE)
    remote = rp.run_with_states(iter(rp.dataset().mp_prefetch(OPTIONS, backend=backend)))
    rp.assert_same_run(remote, local)


def test_the_data_loader_on_the_cpu_node_gives_the_elements_and_states_of_local_workers(records):
    local = rp.run_with_states(iter(rp.loader(records, worker_count=2)))
    loader = rp.loader(records, backend=RayWorkers(2, resources=ON_THE_CPU_NODE))
    with iter(loader) as it:
        remote = rp.run_with_states(it, limit=5)
        saved = remote[-1][1]
    rp.assert_same_run(remote, local[:5])
    with iter(rp.loader(records, worker_count=2)) as it:
        it.set_state(saved)
        rp.assert_same_run(rp.run_with_states(it), local[5:])


# Last: it removes the CPU node.
def test_losing_the_cpu_node_is_a_named_error_within_seconds_and_a_restart_says_what_is_missing(
    two_nodes,
):
    cluster, cpu_node = two_nodes
    backend = RayWorkers(2, resources=ON_THE_CPU_NODE)
    it = iter(rp.dataset().mp_prefetch(OPTIONS, backend=backend))
    before = rp.run_with_states(it, limit=2)
    cluster.remove_node(cpu_node)
    lost = time.monotonic()
    with pytest.raises(WorkerDiedError, match=r"Ray worker actor \d of 2 \(pid"):
        for _ in range(200):
            next(it)
    assert time.monotonic() - lost < 30
    it.set_state(before[-1][1])
    with pytest.raises(GrainliteValueError, match="No node of the Ray cluster has"):
        next(it)
    it.close()
