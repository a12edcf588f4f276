"""Connecting a loader to Ray never hangs: a cluster address that nothing answers (the
``ray_current_cluster`` file of a ``ray start`` whose head is gone, ``RAY_ADDRESS``, the
``address=`` argument) is a ``ClusterConnectionError`` within ``connect_timeout_s`` naming the
address, where it came from and the fix, where ``ray.init()`` itself waits without end; and
``address="local"`` starts a fresh instance whatever the file says.

Each test runs with this process not connected to Ray and a private ``RAY_TMPDIR`` (so the stale
file is the test's own, never the machine's /tmp/ray).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

import grainlite as grain
from grainlite.errors import ClusterConnectionError, GrainliteValueError
from grainlite.ray import RayWorkers
from grainlite.ray.connect import probe
from grainlite_tests.support.ray_state import private_ray_tmpdir

ray = pytest.importorskip("ray", reason="the ray extra (pip install 'grainlite[ray]')")

pytestmark = pytest.mark.timeout(180)

OPTIONS = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
BOUND_S = 2.0
SLACK_S = 8.0  # a loaded machine's scheduling, never Ray's unbounded wait


@pytest.fixture(autouse=True)
def not_connected_with_a_private_ray_dir(monkeypatch):
    assert not ray.is_initialized()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with private_ray_tmpdir() as path:
        yield Path(path)
    assert not ray.is_initialized()


def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def first_element(backend: RayWorkers) -> object:
    ds = grain.MapDataset.range(6).to_iter_dataset().mp_prefetch(OPTIONS, backend=backend)
    with iter(ds) as it:
        return next(it)


def connecting_fails(backend: RayWorkers) -> str:
    """The ClusterConnectionError's message; asserts it came within the bound."""
    started = time.monotonic()
    with pytest.raises(ClusterConnectionError) as raised:
        first_element(backend)
    assert time.monotonic() - started < backend.connect_timeout_s + SLACK_S
    assert not ray.is_initialized()  # ray.init was never called
    assert isinstance(raised.value, ConnectionError)  # what users catch for a lost connection
    return str(raised.value)


def test_a_stale_ray_current_cluster_file_is_a_named_error_within_the_bound_not_a_hang(
    not_connected_with_a_private_ray_dir,
):
    address = f"127.0.0.1:{closed_port()}"
    stale = not_connected_with_a_private_ray_dir / "ray" / "ray_current_cluster"
    stale.parent.mkdir()
    stale.write_text(address)  # what a `ray start` whose head is gone leaves
    message = connecting_fails(RayWorkers(2, connect_timeout_s=BOUND_S))
    assert repr(address) in message and str(stale) in message
    assert "`ray stop`" in message and "address='local'" in message


def test_an_unreachable_address_argument_is_a_named_error_within_the_bound():
    address = f"127.0.0.1:{closed_port()}"
    message = connecting_fails(RayWorkers(2, address=address, connect_timeout_s=BOUND_S))
    assert repr(address) in message and "the address= argument" in message


def test_an_unreachable_ray_address_variable_is_a_named_error_within_the_bound(monkeypatch):
    address = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    message = connecting_fails(RayWorkers(2, connect_timeout_s=BOUND_S))
    assert repr(address) in message and "RAY_ADDRESS" in message


def test_an_address_that_accepts_connections_but_never_answers_is_an_error_within_the_bound():
    with socket.socket() as silent:  # the kernel accepts; nothing ever replies
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        message = connecting_fails(RayWorkers(2, address=address, connect_timeout_s=BOUND_S))
    assert repr(address) in message and "no answer" in message


def test_address_local_starts_a_fresh_instance_whatever_the_stale_file_says(
    not_connected_with_a_private_ray_dir,
):
    stale = not_connected_with_a_private_ray_dir / "ray" / "ray_current_cluster"
    stale.parent.mkdir()
    stale.write_text(f"127.0.0.1:{closed_port()}")
    try:
        assert int(first_element(RayWorkers(2, address="local"))) == 0  # type: ignore[call-overload]
        # The connection check answers for a live head (what a loader with its address probes).
        assert probe(ray.get_runtime_context().gcs_address, BOUND_S) is None
        assert os.environ["RAY_TMPDIR"] in ray._private.worker._global_node.get_temp_dir_path()
    finally:
        ray.shutdown()


def test_a_connect_timeout_that_is_not_a_positive_number_is_refused():
    for bad in (0, -1.0, "15", True, None):
        with pytest.raises(GrainliteValueError, match="connect_timeout_s"):
            RayWorkers(2, connect_timeout_s=bad)  # type: ignore[arg-type]
