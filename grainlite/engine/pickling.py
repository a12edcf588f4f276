"""Pickling a pipeline for the workers: cloudpickle, with the user's file names kept.

Functions and classes of the user's script (``__main__``) and of notebooks travel by value:
cloudpickle rebuilds their code objects in the worker. It writes ``"<dynamic-code>"`` in place of
each code object's file name (so that its output does not depend on where the code lives), which
leaves a worker's traceback with ``File "<dynamic-code>", line 6, in map``: no file, and no source
line. :func:`dumps` keeps the real file name, so a worker's traceback names the file, the line and
(read from that file, as Python does) the source line, as the same error at ``worker_count=0``.
Line numbers were never lost: only the name is put back. Code whose file does not exist (a
notebook cell) carries its source lines from this process's :mod:`linecache`.
"""

from __future__ import annotations

import io
import linecache
import os
import pickle
import types
from collections import ChainMap
from typing import Any

import cloudpickle

from grainlite.engine.code_source import code_with_source

_BLANK_NAME = "<dynamic-code>"  # what cloudpickle writes for every file name


def _code_reduce_keeping_file_name(code: types.CodeType) -> Any:
    """cloudpickle's reduction of ``code`` with the code's own file name in place of the blank;
    for code whose file does not exist (a notebook cell), with its source lines from this
    process's :mod:`linecache` (see :mod:`~grainlite.engine.code_source`)."""
    constructor, args = cloudpickle.cloudpickle._code_reduce(code)
    name = code.co_filename
    named = tuple(name if isinstance(arg, str) and arg == _BLANK_NAME else arg for arg in args)
    entry: tuple[Any, ...] = linecache.cache.get(name, ())
    if len(entry) == 4 and entry[1] is None and entry[2] and not os.path.exists(name):
        return code_with_source, (constructor, named, name, entry[2])
    return constructor, named


def _method_reduce_by_name(method: types.MethodType) -> Any:
    """A bound method as ``getattr(its object, its name)`` (what plain pickle writes) where that
    gives the method back, so the worker needs no cloudpickle to load it (a Dataset node keeps
    ``transform.map``); otherwise cloudpickle's reduction."""
    owner, name = method.__self__, method.__func__.__name__
    try:
        same = getattr(owner, name, None) == method
    except Exception:
        same = False
    if same:
        return getattr, (owner, name)
    return cloudpickle.Pickler.dispatch_table[types.MethodType](method)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle ships no type hints
    dispatch_table = ChainMap(
        {
            types.CodeType: _code_reduce_keeping_file_name,
            types.MethodType: _method_reduce_by_name,
        },
        cloudpickle.Pickler.dispatch_table,
    )


def _keeps_file_names() -> bool:
    """True where this cloudpickle has the reduction this module builds on (3.x does)."""
    return callable(getattr(getattr(cloudpickle, "cloudpickle", None), "_code_reduce", None))


_KEEPS_FILE_NAMES = _keeps_file_names()


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with the file names of code sent by value kept.

    Raises what cloudpickle raises for an object that cannot be pickled. The output loads with
    plain :func:`pickle.loads` (cloudpickle is imported by the loader only if it must be).
    """
    if not _KEEPS_FILE_NAMES:
        return bytes(cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    with io.BytesIO() as file:
        _Pickler(file, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
        return file.getvalue()
