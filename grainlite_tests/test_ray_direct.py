"""The socket between the training process and its Ray actors on the same host
(grainlite.ray.direct): real Unix sockets, each end as the group and the actor use it."""

from __future__ import annotations

import socket
import time

import pytest

from grainlite.ray import direct


@pytest.fixture
def listener():
    opened = direct.DirectListener.open(3)
    assert opened is not None  # Linux: abstract Unix sockets
    yield opened
    opened.close()


def test_an_actor_that_presents_the_secret_gets_a_channel_both_ways(listener):
    actor_end = direct.connect(listener.address(1))
    assert actor_end is not None
    parent_end = listener.channel(1)
    assert parent_end is not None
    parent_end.send_bytes(b"init")
    assert bytes(actor_end.recv_bytes()) == b"init"
    actor_end.send_bytes(b"element")
    assert bytes(parent_end.recv_bytes()) == b"element"
    actor_end.close()
    with pytest.raises(EOFError):
        parent_end.recv_bytes()
    parent_end.close()


def test_connections_that_arrive_in_any_order_each_reach_their_worker(listener):
    actor_ends = {worker: direct.connect(listener.address(worker)) for worker in (2, 0, 1)}
    for worker in (0, 1, 2):
        parent_end = listener.channel(worker)
        assert parent_end is not None
        parent_end.send_bytes(str(worker).encode())
        assert bytes(actor_ends[worker].recv_bytes()) == str(worker).encode()
        parent_end.close()
        actor_ends[worker].close()


def test_a_connection_without_the_secret_is_closed_and_never_handed_out(listener):
    name, secret, _ = listener.address(0)
    impostor = direct.connect((name, bytes(len(secret)), 0))
    assert impostor is not None  # it connected; the parent reads its handshake and drops it
    assert listener.channel(0, wait_s=0.5) is None
    with pytest.raises(EOFError):
        impostor.recv_bytes()
    impostor.close()
    genuine = direct.connect(listener.address(0))
    assert genuine is not None and listener.channel(0) is not None
    genuine.close()


def test_a_connection_that_sends_no_handshake_is_dropped_after_the_wait(listener, monkeypatch):
    monkeypatch.setattr(direct, "HANDSHAKE_WAIT_S", 0.3)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(listener.name)
    began = time.monotonic()
    assert listener.channel(0, wait_s=1.0) is None
    assert time.monotonic() - began < 2.0
    assert silent.recv(1) == b""  # closed by the parent
    silent.close()


def test_nothing_connects_once_the_listener_is_closed(listener):
    address = listener.address(0)
    listener.close()
    assert direct.connect(address) is None
