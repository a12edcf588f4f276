"""The worker channel: whole messages of any size arrive intact and in order, the end is seen."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from grainlite.engine.channel import Channel

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pair():
    left, right = socket.socketpair()
    a, b = Channel(left.detach()), Channel(right.detach())
    yield a, b
    a.close()
    b.close()


def _poll_until(channel: Channel, deadline_s: float = 10.0) -> bool:
    deadline = time.monotonic() + deadline_s
    while not channel.poll():
        if time.monotonic() > deadline:
            return False
    return True


@pytest.mark.parametrize("size", [0, 1, 255, 65_536], ids=lambda n: f"{n}-bytes")
def test_a_message_arrives_whole(pair, size):
    sender, receiver = pair
    message = os.urandom(size)
    sender.send_bytes(message)
    assert receiver.recv_bytes() == message


def test_an_empty_message_is_a_message_and_not_the_end(pair):
    sender, receiver = pair
    sender.send_bytes(b"")
    sender.send_bytes(b"after")
    assert receiver.recv_bytes() == b""
    assert receiver.recv_bytes() == b"after"


def test_a_message_larger_than_the_socket_buffer_arrives_whole_while_sent_from_a_thread(pair):
    sender, receiver = pair
    with socket.socket(fileno=os.dup(sender.fileno())) as view:
        buffer = view.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    message = os.urandom(max(8 << 20, 4 * buffer))
    failures: list[BaseException] = []

    def send() -> None:
        try:
            sender.send_bytes(message)
        except BaseException as error:  # pragma: no cover - reported by the assert below
            failures.append(error)

    thread = threading.Thread(target=send)
    thread.start()
    received = receiver.recv_bytes()
    thread.join(timeout=30)
    assert not thread.is_alive() and failures == []
    assert received == message


def test_many_messages_back_to_back_arrive_in_order(pair):
    sender, receiver = pair
    messages = [bytes([n % 256]) * (n % 97) for n in range(2000)]

    def send() -> None:
        for message in messages:
            sender.send_bytes(message)

    thread = threading.Thread(target=send)
    thread.start()
    received = [receiver.recv_bytes() for _ in messages]
    thread.join(timeout=30)
    assert received == messages


def test_both_directions_work_on_one_channel(pair):
    a, b = pair
    a.send_bytes(b"ping")
    assert b.recv_bytes() == b"ping"
    b.send_bytes(b"pong")
    assert a.recv_bytes() == b"pong"


def test_receiving_after_the_peer_closed_raises_eoferror(pair):
    sender, receiver = pair
    sender.send_bytes(b"last")
    sender.close()
    assert receiver.recv_bytes() == b"last"
    with pytest.raises(EOFError):
        receiver.recv_bytes()


def test_a_message_cut_off_by_the_peer_closing_raises_eoferror(pair):
    sender, receiver = pair
    os.write(sender.fileno(), (100).to_bytes(8, "big") + b"only ten b")  # header says 100 bytes
    sender.close()
    with pytest.raises(EOFError):
        receiver.recv_bytes()


def test_sending_after_the_peer_closed_raises_an_oserror(pair):
    sender, receiver = pair
    receiver.close()
    with pytest.raises(OSError):
        sender.send_bytes(b"x" * 1024)


def test_poll_is_false_before_data_and_true_once_a_message_waits(pair):
    sender, receiver = pair
    assert receiver.poll() is False
    sender.send_bytes(b"data")
    assert _poll_until(receiver)
    assert receiver.recv_bytes() == b"data"
    assert receiver.poll() is False


def test_poll_is_true_when_the_peer_has_closed(pair):
    sender, receiver = pair
    sender.close()
    assert _poll_until(receiver)
    with pytest.raises(EOFError):
        receiver.recv_bytes()


def test_close_is_idempotent_and_releases_the_descriptor(pair):
    channel, _ = pair
    fd = channel.fileno()
    channel.close()
    channel.close()
    assert channel.fileno() == -1
    with pytest.raises(OSError):
        os.fstat(fd)
