"""``grainlite.install_as_grain()``: library code that says ``import grain`` gets grainlite.

Keras's ``model.fit``, MaxText, torchtitan, tunix and kauldron import ``grain`` inside code the user
does not edit. After ``install_as_grain()`` every such import resolves to grainlite: ``grain`` is
the ``grainlite`` module itself, each public namespace of Grain 0.2.18 (``grain.python``,
``grain.experimental``, ...) is the matching grainlite module, and the few internal Grain paths
that well-known clients import (:data:`CLIENT_ALIASES`) are the grainlite modules that hold the
same names. Any other ``grain.*`` import fails with a ModuleNotFoundError naming the path: the
real Grain is never loaded next to grainlite, and no grainlite file is loaded twice under a
second name.

The same idea as ``pymysql.install_as_MySQLdb()``. Three ways in:

- ``grainlite.install_as_grain()`` first thing in a script (before anything imports ``grain``);
- ``GRAINLITE_AS_GRAIN=1`` in the environment, read when ``grainlite`` is imported;
- ``python -m grainlite run script.py [args]``.

``install_as_grain()`` also sets ``GRAINLITE_AS_GRAIN=1`` in ``os.environ``, so grainlite's worker
processes (fresh interpreters) and any subprocess of the script see the same ``grain``.
``grain.__grainlite__`` says which library is active (the real Grain has no such attribute).

The tables here (:data:`PUBLIC_NAMESPACES`, :data:`CLIENT_ALIASES`) are the one list of Grain
module paths grainlite answers for; docs/how-to/grain-under-libraries.md lists them with the
client that needs each.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Sequence

from grainlite.errors import GrainliteRuntimeError

ENV_VAR = "GRAINLITE_AS_GRAIN"

# Grain 0.2.18's public modules -> the grainlite module with the same names.
PUBLIC_NAMESPACES: dict[str, str] = {
    "grain": "grainlite",
    "grain.checkpoint": "grainlite.checkpoint",
    "grain.constants": "grainlite.constants",
    "grain.experimental": "grainlite.experimental",
    "grain.multiprocessing": "grainlite.multiprocessing",
    "grain.python": "grainlite.python",
    "grain.python.experimental": "grainlite.python.experimental",
    "grain.samplers": "grainlite.samplers",
    "grain.sharding": "grainlite.sharding",
    "grain.sources": "grainlite.sources",
    "grain.transforms": "grainlite.transforms",
}

# Internal Grain paths that a released client imports -> (grainlite module, the client and why).
# Only paths a real client imports belong here.
CLIENT_ALIASES: dict[str, tuple[str, str]] = {
    "grain._src.python.ipc.shared_memory_array": (
        "grainlite.shm.array",
        "Keras 3 (GrainDatasetAdapter.get_numpy_iterator: SharedMemoryArrayMetadata)",
    ),
    "grain._src.core.constants": (
        "grainlite.constants",
        "kauldron (kauldron/data/loaders: INDEX, SEED)",
    ),
    "grain._src.python.dataset.sources.tfrecord_dataset": (
        "grainlite.dataset.experimental.tfrecord_parts",
        "MaxText (input_pipeline_utils: _TFRecordReader, _TFRecordDatasetIterator)",
    ),
}


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


# The packages on the way to a client alias (grain._src, grain._src.python, ...): empty modules.
_INTERMEDIATE = frozenset(
    parent
    for alias in CLIENT_ALIASES
    for parent in _parents(alias)
    if parent not in PUBLIC_NAMESPACES
)


def target_of(name: str) -> str | None:
    """The grainlite module that stands for Grain module ``name``, or None."""
    if name in PUBLIC_NAMESPACES:
        return PUBLIC_NAMESPACES[name]
    if name in CLIENT_ALIASES:
        return CLIENT_ALIASES[name][0]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Hands out an existing grainlite module (or an empty package) under a ``grain`` name."""

    def __init__(self, target: str | None) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self._target is None:
            module = types.ModuleType(spec.name, "An empty package on the way to a grain alias.")
            module.__path__ = []
            return module
        # importlib keeps the module's own __name__, __spec__ and __file__ (it sets only those
        # that are missing), so this is the very grainlite module, reachable under both names.
        return importlib.import_module(self._target)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the grainlite module is already imported."""


class _GrainFinder(importlib.abc.MetaPathFinder):
    """Answers every ``grain`` / ``grain.*`` import while grainlite is installed as grain."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "grain" and not fullname.startswith("grain."):
            return None
        grainlite_name = target_of(fullname)
        if grainlite_name is None and fullname not in _INTERMEDIATE:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: grainlite is installed as grain "
                "(grainlite.install_as_grain) and does not alias this Grain path. The aliased "
                "paths are grainlite.as_grain.PUBLIC_NAMESPACES and CLIENT_ALIASES (see "
                "docs/how-to/grain-under-libraries.md); use the public name instead, or run "
                "without install_as_grain to use the real Grain.",
                name=fullname,
            )
        is_package = grainlite_name is None or fullname in PUBLIC_NAMESPACES
        return importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(grainlite_name), is_package=is_package
        )


_FINDER = _GrainFinder()


def _active_line() -> str:
    import grainlite

    return (
        f"grainlite {_version()} installed as grain by grainlite.install_as_grain() "
        f"({os.path.dirname(grainlite.__file__ or '')})"
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("grainlite")
    except Exception:  # not installed as a distribution (a source checkout on PYTHONPATH)
        return "(source)"


def is_installed() -> bool:
    """True when ``import grain`` gives grainlite in this process."""
    import grainlite

    return sys.modules.get("grain") is grainlite and _FINDER in sys.meta_path


def install_as_grain() -> None:
    """Makes ``import grain`` (and Grain's public submodules) give grainlite in this process.

    Call it before anything imports ``grain``. Calling it again is a no-op. Sets
    ``GRAINLITE_AS_GRAIN=1`` in ``os.environ`` so worker processes and subprocesses do the same.

    Raises:
      GrainliteRuntimeError: ``grain`` (the real Grain) was already imported in this process;
        a mix of both libraries is never what is wanted.
    """
    import grainlite

    if is_installed():
        return
    loaded = sorted(name for name in sys.modules if name == "grain" or name.startswith("grain."))
    if loaded:
        origin = getattr(sys.modules[loaded[0]], "__file__", None)
        raise GrainliteRuntimeError(
            f"install_as_grain(): the real Grain is already imported in this process "
            f"({', '.join(loaded[:3])}{', ...' if len(loaded) > 3 else ''} from {origin!r}), so "
            "library code would mix both. Call grainlite.install_as_grain() before anything "
            "imports grain (first line of the script), or start the script with "
            "GRAINLITE_AS_GRAIN=1 or `python -m grainlite run script.py`."
        )
    grainlite.__grainlite__ = _active_line()  # type: ignore[attr-defined]
    sys.meta_path.insert(0, _FINDER)
    sys.modules["grain"] = grainlite
    os.environ[ENV_VAR] = "1"


def install_from_environment() -> None:
    """Calls :func:`install_as_grain` when ``GRAINLITE_AS_GRAIN`` is ``1`` (read at import)."""
    value = os.environ.get(ENV_VAR, "")
    if value in ("", "0"):
        return
    if value != "1":
        raise GrainliteRuntimeError(
            f"{ENV_VAR}={value[:50]!r}: expected 1 (make `import grain` give grainlite) or 0/unset."
        )
    install_as_grain()
