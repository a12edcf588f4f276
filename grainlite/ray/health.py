"""Is this process still connected to its Ray cluster? A cheap, bounded check of the head (GCS).

Ray sends actor calls straight to the actors, so when the head of the cluster goes away a stream
may go on for a while, or wait on a reply that never comes, until Ray ends the whole process
(after ``gcs_rpc_server_reconnect_timeout_s``, 60 s by default). :class:`ClusterHealth` asks the
head a trivial question (a key-value read with a timeout) at most every ``CHECK_EVERY_S`` seconds
while a loader reads its workers; when the head has not answered for ``LOST_AFTER_S`` seconds the
loader raises :class:`~grainlite.errors.ClusterConnectionError` well before Ray's own deadline.
"""

from __future__ import annotations

import time
from typing import Any

CHECK_EVERY_S = 2.0  # a stream that flows asks the head this often (one small RPC)
ASK_TIMEOUT_S = 3.0  # one question's wait
LOST_AFTER_S = 10.0  # no answer for this long: the cluster is lost

_KEY = b"grainlite-health"
_NAMESPACE = b"grainlite"


class ClusterHealth:
    """Remembers when the head last answered; ``lost()`` says if it has been silent too long."""

    def __init__(self) -> None:
        now = time.monotonic()
        self._asked = now
        self._answered = now
        self.is_lost = False

    def lost(self, ray: Any) -> float | None:
        """Seconds the head has been silent if that is ``LOST_AFTER_S`` or more, else None.

        Asks the head only when ``CHECK_EVERY_S`` passed since the last question, so a stream
        that flows pays one small RPC every few seconds.
        """
        now = time.monotonic()
        if now - self._asked < CHECK_EVERY_S:
            return None
        self._asked = now
        if _answers(ray):
            self._answered = time.monotonic()
            return None
        silent = time.monotonic() - self._answered
        if silent >= LOST_AFTER_S:
            self.is_lost = True
            return silent
        return None


def _answers(ray: Any) -> bool:
    """True if the head of ``ray``'s cluster answers a key-value read within ASK_TIMEOUT_S.

    Without a direct connection to the head (Ray Client) there is nothing to ask: True.
    """
    client = getattr(ray._private.worker.global_worker, "gcs_client", None)
    if client is None:  # Ray Client (ray://): its server holds the connection, and reports its loss
        return True
    try:
        client.internal_kv_get(_KEY, _NAMESPACE, timeout=ASK_TIMEOUT_S)
    except (AttributeError, TypeError):  # another Ray version's client: nothing to ask with
        return True
    except Exception:  # Ray raises its RPC or timeout errors: the head did not answer
        return False
    return True
