"""How many processes a loader runs: what the tests that count a loader's processes expect."""

from __future__ import annotations

from grainlite.engine.forkserver_client import use_fork_server


def loader_processes(workers: int) -> int:
    """The processes a loader with ``workers`` worker processes runs while its workers are up:
    the workers, and where workers are forked (:func:`use_fork_server`, the default on Linux)
    the one fork server that forked them. None for ``workers=0``.

    Counted among the descendants of the training process (``leak_check.live_children``), so a
    check against it still fails when one worker, or the server, is left behind or one too many
    starts."""
    if workers == 0:
        return 0
    return workers + use_fork_server()
