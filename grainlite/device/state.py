"""The device iterator's state: the host iterator's state and the count of batches received.

``{"host_state": <the host iterator's state>, "batches_received": N}``, as JSON bytes when the host
iterator's state is bytes (a ``DataLoader`` iterator, whose bytes are JSON and are embedded as the
object they encode), as a dict otherwise (a Dataset-API iterator). ``N`` is the index of the next
batch, which keys the device transforms' randomness, so a restore reproduces them too.
"""

from __future__ import annotations

import json
from typing import Any

from grainlite.checks import invalid_state, state_int
from grainlite.errors import GrainliteValueError

HOST = "host_state"
RECEIVED = "batches_received"


def encode(host_state: Any, received: int) -> Any:
    """The device iterator's state, of the same kind (bytes or dict) as ``host_state``."""
    as_bytes = isinstance(host_state, bytes | bytearray)
    inner = json.loads(bytes(host_state)) if as_bytes else host_state
    text = json.dumps({HOST: inner, RECEIVED: received})
    return text.encode() if as_bytes else json.loads(text)  # a copy the caller may keep


_FIX = "pass what get_state() of a device iterator returned."


def decode(state: Any, host_takes_bytes: bool) -> tuple[Any, int]:
    """``(host state, batches received)`` from what :func:`encode` made (bytes, text or dict).

    Raises:
      GrainliteValueError: ``state`` is not a device iterator's state (for example, the bare
        state of a host iterator).
    """
    parsed = state
    if isinstance(state, bytes | bytearray | str):
        try:
            parsed = json.loads(state)
        except json.JSONDecodeError as error:
            raise invalid_state(
                f"Invalid device iterator state: not JSON ({error})", _FIX, subject=None
            ) from None
    if not (isinstance(parsed, dict) and set(parsed) == {HOST, RECEIVED}):
        raise GrainliteValueError(
            f"Invalid device iterator state {str(state)[:80]!r}: expected a dict with the keys "
            f"{HOST!r} and {RECEIVED!r}, as get_state() of a device iterator returns. To start "
            f"from a host iterator's state, call host.set_state(state) before device_put(host)."
        )
    received = state_int(
        parsed[RECEIVED],
        f"Invalid device iterator state: {RECEIVED}",
        lambda what: invalid_state(what, _FIX, subject=None),
        low=0,
    )
    host_state = parsed[HOST]
    return (json.dumps(host_state).encode() if host_takes_bytes else host_state), received
