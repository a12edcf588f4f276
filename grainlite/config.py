"""Grain's global options, as ``grain.config.update(name, value)`` and ``get_or_default(name)``.

Grain 0.2.18 keeps its options in absl flags named ``grain_<name>``; code written for it calls
``grain.config.update("py_traceback_filtering", "off")``. grainlite takes the same calls without
absl, for the options of Grain's DataLoader path:

* ``py_traceback_filtering`` (default ``"auto"``): ``"off"`` keeps every frame of grainlite in the
  tracebacks of transform errors; the other Grain values (``"auto"``, ``"tracebackhide"``,
  ``"quiet_remove_frames"``, ``"remove_frames"``) all remove grainlite's frames. The value lives in
  the environment variable ``GRAINLITE_TRACEBACK_FILTERING`` (``0`` means ``"off"``), so worker
  processes started afterwards filter the same way, and setting that variable works too.
* ``py_debug_mode`` (default ``False``): a bool, accepted and stored. In Grain it only reports
  extra internal metrics; grainlite reports no metrics, so it changes nothing.

grainlite adds one option of its own (Grain has no such option):

* ``hide_accelerators_in_workers`` (default ``True``): worker processes start with every
  accelerator hidden (``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES`` and
  ``ROCR_VISIBLE_DEVICES`` set to ``-1``, ``JAX_PLATFORMS=cpu``, ``PJRT_DEVICE=CPU``), so a
  transform that imports JAX, PyTorch or TensorFlow never takes GPU memory or a TPU away from
  the training process. ``False`` gives workers the parent's environment unchanged, for a
  pipeline that really decodes on a GPU in its workers. The value lives in the environment
  variable ``GRAINLITE_HIDE_ACCELERATORS_IN_WORKERS`` (``0`` means ``False``), which works too.

and four more:

* ``jax_profile_workers`` (default ``False``): worker processes put their spans (read, each
  transform, batch, transport) into ``jax.profiler`` traces of the training process: each worker
  starts JAX's profiler server and the training process registers it
  (``jax.profiler.register_subprocess``); see :mod:`grainlite.stats.tracing` and
  ``docs/how-to/jax-profiler.md``. The value lives in the environment variable
  ``GRAINLITE_JAX_PROFILE_WORKERS`` (``1`` means ``True``), read by workers when they start.
* ``timeline_seconds`` (default ``None``): every process of an iterator records its spans, and
  ``iterator.stats().timeline(path)`` writes the last this many seconds of them as a Chrome trace
  JSON (see :mod:`grainlite.stats.timeline`). The value lives in the environment variable
  ``GRAINLITE_TIMELINE_SECONDS``, read when an iterator's stream and its workers start.

* ``first_element_in_parent`` (default ``False``): accepted (a bool) and stored, and changes
  nothing. Earlier grainlite versions made an iterator's first element in the calling process
  while the workers started; now every element is made in a worker process, with the worker
  environment, and the workers start at ``iter()``. The option stays so code that set it keeps
  running.
* ``worker_timeout_s`` (default ``None``): how long ``next()`` waits for a worker that sends
  nothing before it raises :class:`~grainlite.WorkerTimeoutError` naming the worker, its pid and
  where it stands in the stream (``None``: wait as long as it takes). Whatever the value, a worker
  silent for :data:`STALL_WARNING_S` seconds is reported once through the ``grainlite`` logger,
  and its Python stacks are printed to its standard error (Python's ``faulthandler``).

Grain's other options (SIGTERM relaying, the Dataset API's visualisation, the TensorFlow loader's
options) are known by name: setting one to Grain's default is accepted and changes nothing; any
other value raises GrainliteValueError naming the option, because grainlite does not implement it.
An unknown name raises GrainliteValueError (a ValueError, as in Grain). Options are also readable
as attributes: ``grain.config.py_traceback_filtering``.
"""

from __future__ import annotations

import os
from typing import Any

from grainlite.errors import GrainliteTypeError, GrainliteValueError

TRACEBACK_FILTERING_ENV = "GRAINLITE_TRACEBACK_FILTERING"
"""The environment variable that holds ``py_traceback_filtering`` (inherited by workers)."""

HIDE_ACCELERATORS_ENV = "GRAINLITE_HIDE_ACCELERATORS_IN_WORKERS"
"""The environment variable that holds ``hide_accelerators_in_workers`` (``0``: off)."""
_HIDE_ACCELERATORS = "hide_accelerators_in_workers"
JAX_PROFILE_WORKERS_ENV = "GRAINLITE_JAX_PROFILE_WORKERS"
"""The environment variable that holds ``jax_profile_workers`` (``1``: on)."""
_PROFILE_WORKERS = "jax_profile_workers"
TIMELINE_SECONDS_ENV = "GRAINLITE_TIMELINE_SECONDS"
"""The environment variable that holds ``timeline_seconds`` (empty or ``0``: off)."""
_TIMELINE = "timeline_seconds"
_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")
_WORKER_TIMEOUT = "worker_timeout_s"
_FIRST_IN_PARENT = "first_element_in_parent"
STALL_WARNING_S = 60.0
"""After this long without a message from a worker, the parent logs which one and where."""

_TRACEBACK_VALUES = ("auto", "off", "tracebackhide", "quiet_remove_frames", "remove_frames")

# Grain 0.2.18's options with their defaults: every name its ``grain.config.update`` accepts.
_DEFAULTS: dict[str, Any] = {
    "py_dataset_visualization_output_dir": None,
    "py_debug_mode": False,
    "py_relay_sigterm_to_main": False,
    "py_traceback_filtering": "auto",
    "tf_interleaved_shuffle": False,
    "tf_interleaved_shuffle_block_size": 10,
    "tf_interleaved_shuffle_parallel_blocks": 10,
    "tf_lookup_batch_size": 100,
    "tf_lookup_fast_warmup": False,
    "tf_lookup_num_parallel_calls": -1,
    "tf_optimized_sequential_read": False,
    "tf_prefetch_buffer_size": -1,
}
SUPPORTED = ("py_debug_mode", "py_traceback_filtering")
"""The options whose every Grain value grainlite honours; the others take only their default."""

_stored: dict[str, Any] = {}


def _unknown(name: Any) -> GrainliteValueError:
    return GrainliteValueError(
        f"grain.config has no option {name!r}: Grain 0.2.18's options are "
        f"{', '.join(_DEFAULTS)}; check the spelling (without the 'grain_' prefix of the flag)."
    )


def update(name: str, value: Any) -> None:
    """Sets option ``name`` to ``value``, as ``grain.config.update`` does.

    Raises:
      GrainliteValueError: ``name`` is not one of Grain's options (or grainlite's three),
        ``worker_timeout_s`` is not a positive number or None, ``py_traceback_filtering``
        gets a value Grain does not know, or an option grainlite does not implement gets a value
        other than Grain's default.
      GrainliteTypeError: ``py_debug_mode``, ``hide_accelerators_in_workers``,
        ``jax_profile_workers`` or ``first_element_in_parent`` gets something other than a bool.
    """
    if name == _HIDE_ACCELERATORS:
        if not isinstance(value, bool):
            raise GrainliteTypeError(
                f"grain.config option {_HIDE_ACCELERATORS} must be a bool (got {value!r} of type "
                f"{type(value).__name__}); pass False to let worker processes see accelerators."
            )
        os.environ[HIDE_ACCELERATORS_ENV] = "1" if value else "0"  # nested workers inherit it
        return
    if name == _PROFILE_WORKERS:
        if not isinstance(value, bool):
            raise GrainliteTypeError(
                f"grain.config option {_PROFILE_WORKERS} must be a bool (got {value!r} of type "
                f"{type(value).__name__}); pass True to see worker processes in jax.profiler "
                "traces."
            )
        os.environ[JAX_PROFILE_WORKERS_ENV] = "1" if value else "0"  # workers read it
        return
    if name == _TIMELINE:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
        ):
            raise GrainliteValueError(
                f"grain.config option {_TIMELINE} must be a number of seconds > 0 or None "
                f"(got {value!r}); e.g. 60 to keep the last minute of spans for "
                "stats().timeline()."
            )
        os.environ[TIMELINE_SECONDS_ENV] = "" if value is None else str(float(value))
        return
    if name == _FIRST_IN_PARENT:
        if not isinstance(value, bool):
            raise GrainliteTypeError(
                f"grain.config option {_FIRST_IN_PARENT} must be a bool (got {value!r} of type "
                f"{type(value).__name__}); it has no effect: every element is made in a worker."
            )
        _stored[name] = value
        return
    if name == _WORKER_TIMEOUT:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
        ):
            raise GrainliteValueError(
                f"grain.config option {_WORKER_TIMEOUT} must be a number of seconds > 0 or None "
                f"(got {value!r}); e.g. 600 to raise when a worker is silent for 10 minutes."
            )
        _stored[name] = None if value is None else float(value)
        return
    if name not in _DEFAULTS:
        raise _unknown(name)
    if name == "py_traceback_filtering":
        if value not in _TRACEBACK_VALUES:
            raise GrainliteValueError(
                f"grain.config option py_traceback_filtering must be one of "
                f"{', '.join(_TRACEBACK_VALUES)} (got {value!r}); pass 'off' to keep every frame."
            )
        os.environ[TRACEBACK_FILTERING_ENV] = value  # worker processes inherit it
    elif name == "py_debug_mode":
        if not isinstance(value, bool):
            raise GrainliteTypeError(
                f"grain.config option py_debug_mode must be a bool (got {value!r} of type "
                f"{type(value).__name__}); pass True or False."
            )
        _stored[name] = value
    elif value != _DEFAULTS[name]:
        raise GrainliteValueError(
            f"grain.config option {name} is not implemented by grainlite (got {value!r}); it "
            f"accepts only Grain's default, {_DEFAULTS[name]!r}, which changes nothing here; "
            f"remove the call."
        )


def get_or_default(name: str) -> Any:
    """The current value of option ``name``: the value set, else Grain's default.

    Raises:
      GrainliteValueError: ``name`` is not one of Grain's options.
    """
    if name == _HIDE_ACCELERATORS:
        raw = os.environ.get(HIDE_ACCELERATORS_ENV, "").strip().lower()
        return raw not in _FALSE_WORDS
    if name == _PROFILE_WORKERS:
        raw = os.environ.get(JAX_PROFILE_WORKERS_ENV, "").strip().lower()
        return raw in _TRUE_WORDS
    if name == _TIMELINE:
        raw = os.environ.get(TIMELINE_SECONDS_ENV, "").strip()
        try:
            seconds = float(raw) if raw else 0.0
        except ValueError:
            seconds = 0.0
        return seconds if seconds > 0 else None
    if name == _WORKER_TIMEOUT:
        return _stored.get(name)
    if name == _FIRST_IN_PARENT:
        return _stored.get(name, False)
    if name not in _DEFAULTS:
        raise _unknown(name)
    if name == "py_traceback_filtering":
        raw = os.environ.get(TRACEBACK_FILTERING_ENV, "").strip().lower()
        if raw == "0":
            return "off"
        return raw if raw in _TRACEBACK_VALUES else "auto"
    return _stored.get(name, _DEFAULTS[name])


def __getattr__(name: str) -> Any:
    if name in _DEFAULTS or name in (
        _HIDE_ACCELERATORS,
        _WORKER_TIMEOUT,
        _FIRST_IN_PARENT,
        _PROFILE_WORKERS,
        _TIMELINE,
    ):
        return get_or_default(name)
    raise AttributeError(f"module 'grainlite.config' has no attribute {name!r}")


__all__ = [
    "HIDE_ACCELERATORS_ENV",
    "JAX_PROFILE_WORKERS_ENV",
    "STALL_WARNING_S",
    "SUPPORTED",
    "TIMELINE_SECONDS_ENV",
    "TRACEBACK_FILTERING_ENV",
    "get_or_default",
    "update",
]
