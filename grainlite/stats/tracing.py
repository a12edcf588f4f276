"""The loader's spans in ``jax.profiler`` traces: the training process and its worker processes.

While a ``jax.profiler`` trace runs, each ``next()`` of an iterator is a ``grainlite next`` span
(the element's index and the milliseconds it waited for a worker), a device prefetch transfer is
a ``grainlite device_put`` span, and each timed stage (a read, each transform by the name
``stats()`` shows, ``Batch``, ``transport``) is a span named like its row of the table.

Nothing here imports JAX. :func:`active` looks for JAX's profiler among the modules already
imported; until the program imports JAX it is one dictionary lookup, afterwards one call to the
profiler's own "is a trace recording?" check (about 0.15 µs). With no trace running no span is
made, and the stages' sampled timing is unchanged.

Worker processes join a trace through JAX's subprocess profiling (``jax.profiler.
register_subprocess``, JAX 0.7.1 and newer), behind one switch: the ``grain.config`` option
``jax_profile_workers`` (environment variable :data:`~grainlite.config.JAX_PROFILE_WORKERS_ENV`).
With it on, each worker imports JAX, starts a profiler server on a free local port
(:func:`start_worker_server`) and names its main thread ``grain w<index> <pid>`` (``w<index>
<pid>`` where that passes Linux's 15 characters for a thread name; the profile's process,
``/host:CPU [pid]``, holds the pid too); the training process registers it
(:func:`register_worker`) at the iterator's first ``next()``. A trace started with
``profile_subprocesses`` (see :func:`profile_options`) then asks every registered worker for its
spans and merges them into the same profile. With the switch on a worker times every element of
every stage (not a sample), so each element it makes has its spans; it costs one check per
element and stage while no trace runs. A worker without JAX, or with a JAX too old for subprocess
profiling, runs as before and logs one line saying why its spans are missing.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable
from time import perf_counter_ns as clock
from typing import Any

from grainlite import config

logger = logging.getLogger("grainlite.stats")

_PROFILER_MODULE = "jax.profiler"  # imported by ``import jax``
_NULL = contextlib.nullcontext()
SPAN_LIMIT = 200_000
"""The timeline keeps at most this many spans per process (the oldest go first)."""

_is_enabled: Callable[[], bool] | None = None
_trace_me: Any = None
_recorder: Recorder | None = None  # the timeline's spans in this process (timeline_seconds)

EVERY_ELEMENT = False
"""True in a worker whose profiler server runs: every element is timed (and so gets its spans)."""

_server: Any = None  # the worker's profiler server: kept alive as long as the process


def _bind() -> bool:
    """Finds ``jax.profiler.TraceAnnotation`` once the program has imported JAX; False before."""
    global _is_enabled, _trace_me
    profiler = sys.modules.get(_PROFILER_MODULE)
    if profiler is None:
        return False
    trace_me = getattr(profiler, "TraceAnnotation", None)
    if trace_me is None or not hasattr(trace_me, "is_enabled"):
        return False
    _trace_me, _is_enabled = trace_me, trace_me.is_enabled
    return True


def active() -> bool:
    """True while a ``jax.profiler`` trace records in this process (never imports JAX), or
    while the timeline records (``timeline_seconds``)."""
    if _recorder is not None:
        return True
    if _is_enabled is None and not _bind():
        return False
    assert _is_enabled is not None
    return _is_enabled()


def span(name: str, **metadata: Any) -> Any:
    """A context that is a span named ``name`` while a trace (or the timeline) records, else
    nothing."""
    if _is_enabled is None:
        _bind()
    tracing = _is_enabled is not None and _is_enabled()
    if _recorder is not None:
        return _Recorded(name, _recorder, _trace_me(name, **metadata) if tracing else None)
    return _trace_me(name, **metadata) if tracing else _NULL


# The timeline (no JAX) ------------------------------------------------------------------------


class Recorder:
    """The spans of this process, newest last: ``(name, begin_ns, end_ns)`` on the monotonic
    clock every process of the machine shares, at most ``limit`` of them."""

    def __init__(self, seconds: float, limit: int = SPAN_LIMIT) -> None:
        self.seconds = seconds
        self.spans: collections.deque[tuple[str, int, int]] = collections.deque(maxlen=limit)

    def drain(self) -> list[tuple[str, int, int]]:
        """The spans recorded since the last call, oldest first (a worker reports them)."""
        spans = list(self.spans)
        self.spans.clear()
        return spans


class _Recorded:
    """One span of the timeline (and of a ``jax.profiler`` trace too, when one records)."""

    __slots__ = ("begin", "inner", "name", "recorder")

    def __init__(self, name: str, recorder: Recorder, inner: Any) -> None:
        self.name, self.recorder, self.inner = name, recorder, inner

    def __enter__(self) -> _Recorded:
        if self.inner is not None:
            self.inner.__enter__()
        self.begin = clock()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.recorder.spans.append((self.name, self.begin, clock()))
        if self.inner is not None:
            self.inner.__exit__(*exc_info)

    def set_metadata(self, **metadata: Any) -> None:
        if self.inner is not None:
            self.inner.set_metadata(**metadata)


def timeline_seconds() -> float:
    """The ``timeline_seconds`` option (0: no timeline), from the environment workers inherit."""
    value = config.get_or_default("timeline_seconds")
    return float(value) if value else 0.0


def arm_timeline() -> None:
    """Starts (or stops) recording the timeline as the option now says; called when a stream
    starts, and once in each worker process."""
    global _recorder, EVERY_ELEMENT
    seconds = timeline_seconds()
    if not seconds:
        _recorder = None
        EVERY_ELEMENT = _server is not None
        return
    if _recorder is None:
        _recorder = Recorder(seconds)
    _recorder.seconds = seconds
    EVERY_ELEMENT = True


def recorder() -> Recorder | None:
    """This process's timeline recorder, or None when the timeline is off."""
    return _recorder


def traced_next(take: Callable[[], Any], counters_of: Callable[[], Any]) -> Any:
    """``take()`` inside a ``grainlite next`` span. ``counters_of()`` gives the stream's
    :class:`~grainlite.stats.counters.ParentCounters` (or None): with workers, the element's index
    (elements taken from workers before it) and the wait for a worker go into the span."""
    counters = counters_of()
    waited = counters.wait_ns if counters is not None else 0
    with span("grainlite next") as annotation:
        element = take()
        counters = counters_of()
        if counters is not None and counters.worker_count:
            annotation.set_metadata(
                index=counters.delivered - 1, wait_ms=round((counters.wait_ns - waited) / 1e6, 3)
            )
    return element


# Worker processes -----------------------------------------------------------------------------


def workers_switched_on() -> bool:
    """The ``jax_profile_workers`` switch (read from the environment workers inherit)."""
    return bool(config.get_or_default("jax_profile_workers"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _name_thread(name: str) -> None:
    """Names the calling thread (Linux: what the profiler shows as its track), best effort."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except Exception:  # another OS, or no libc: the track keeps the interpreter's name
        pass


def start_worker_server(worker: int) -> int | None:
    """In a worker: with the switch on, starts JAX's profiler server and returns its port.

    None when the switch is off, or (after one log line saying why) when JAX is missing or too
    old, or the server does not start: the worker then runs as it does without the switch.
    """
    global _server, EVERY_ELEMENT
    if not workers_switched_on():
        return None
    try:
        import jax.profiler
    except Exception as error:
        logger.warning(
            "grainlite worker %d (pid %d): no spans in jax.profiler traces, JAX cannot be "
            "imported here (%s); install jax in the workers' environment or turn "
            "jax_profile_workers off.",
            worker,
            os.getpid(),
            error,
        )
        return None
    if not hasattr(jax.profiler, "register_subprocess"):
        logger.warning(
            "grainlite worker %d (pid %d): no spans in jax.profiler traces, jax %s has no "
            "subprocess profiling (jax.profiler.register_subprocess, JAX 0.7.1 and newer); "
            "upgrade jax or turn jax_profile_workers off.",
            worker,
            os.getpid(),
            getattr(sys.modules.get("jax"), "__version__", "?"),
        )
        return None
    try:
        port = _free_port()
        _server = jax.profiler.start_server(port, requires_backend=False)
    except Exception as error:
        logger.warning(
            "grainlite worker %d (pid %d): no spans in jax.profiler traces, its profiler "
            "server did not start (%s).",
            worker,
            os.getpid(),
            error,
        )
        return None
    name = f"grain w{worker} {os.getpid()}"
    _name_thread(name if len(name) <= 15 else f"w{worker} {os.getpid()}")
    _bind()
    EVERY_ELEMENT = True
    return port


def register_worker(worker: int, pid: int, port: int) -> Callable[[], None] | None:
    """In the training process: has traces collect worker ``worker``'s spans (pid, port);
    returns what unregisters it, or None (logged) if JAX refused."""
    try:
        import jax.profiler

        unregister: Callable[[], None] = jax.profiler.register_subprocess(pid, port)
    except Exception as error:
        logger.warning(
            "grainlite worker %d (pid %d): its spans will be missing from jax.profiler "
            "traces, registering it failed (%s).",
            worker,
            pid,
            error,
        )
        return None
    return unregister


def profile_options(**options: Any) -> Any:
    """A ``jax.profiler.ProfileOptions`` that collects registered worker processes too
    (``advanced_configuration={"profile_subprocesses": True}``); ``options`` set other fields
    (``python_tracer_level=0``...). Pass it as ``jax.profiler.trace(dir, profiler_options=...)``."""
    import jax.profiler

    result = jax.profiler.ProfileOptions()
    for name, value in options.items():
        setattr(result, name, value)
    result.advanced_configuration = {
        **dict(result.advanced_configuration),
        "profile_subprocesses": True,
    }
    return result
