"""Runs Grain 0.2.18's own unit tests (shipped in the installed ``grain`` wheel) against grainlite.

This is a pytest plugin (``-p grainlite_tests.support.grain_unit_adapter``);
``grainlite_tests.support.grain_unit_tests`` is the runner that uses it. Nothing of Grain is copied:
the test files run in place, from the wheel.

The tests import Grain's *internal* module paths (``grain._src.python.dataset.dataset``,
``grain._src.python.dataset.transformations.batch``, ...). The plugin puts a finder first on
``sys.meta_path`` that answers every ``grain`` / ``grain.*`` import with a stand-in module whose
attributes are grainlite's *public* names:

* a name in the module's row of ``MODULES`` resolves as that row says: a public grainlite name
  under another spelling (``"grainlite.transforms:Map"``), or, for a node class that Grain tests
  construct directly but that neither Grain nor grainlite makes public (``MapMapDataset``), the
  class of the node that grainlite's public method makes (``type(MapDataset.range(1).map(f))``);
* any other public name resolves to the same name in grainlite's public namespaces
  (``grainlite``, ``grainlite.experimental``, ``grainlite.transforms``, ...), in that order;
* a private name (``_x``) never resolves: a test that reaches for one fails with a clear
  ``AttributeError`` (and is in ``LEFT_OUT`` with its reason).

``grain.python`` is ``grainlite.python`` itself. The real ``grain`` package is never imported.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import absl.flags

PUBLIC_NAMESPACES = (
    "grainlite",
    "grainlite.experimental",
    "grainlite.transforms",
    "grainlite.sources",
    "grainlite.samplers",
    "grainlite.sharding",
    "grainlite.checkpoint",
    "grainlite.multiprocessing",
)


def grain_wheel_dir() -> Path:
    """The installed ``grain`` package's directory, found without importing it."""
    spec = importlib.machinery.PathFinder.find_spec("grain")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the grain 0.2.18 wheel is not installed: install the 'peer' extra "
            "(pip install -e '.[peer]') to run Grain's own unit tests"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _module(name: str) -> Any:
    return importlib.import_module(name)


def _public(path: str) -> Callable[[], Any]:
    """``"module:name"``: a public grainlite name spelled differently from Grain's internal one."""
    module, _, name = path.partition(":")
    return lambda: getattr(importlib.import_module(module), name)


def _node(build: Callable[[Any], Any]) -> Callable[[], type]:
    """The class of the node a public grainlite call makes, given ``grainlite`` itself."""
    return lambda: type(build(importlib.import_module("grainlite")))


def _iterator_class(build: Callable[[Any], Any]) -> Callable[[], type]:
    """The class of the iterator of a public pipeline (the iterator is closed right away)."""

    def find() -> type:
        iterator = iter(build(importlib.import_module("grainlite")))
        try:
            return type(iterator)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    return find


def _shim(node_type: Callable[[], type], build: Callable[..., Any]) -> Callable[[], type]:
    """A stand-in for a Grain node class whose constructor differs from grainlite's public call.

    Calling it builds the node through ``build`` (grainlite's public method); ``isinstance`` and
    ``issubclass`` answer for the class that call makes.
    """

    def make() -> type:
        real = node_type()

        class Meta(type):
            def __instancecheck__(cls, obj: Any) -> bool:
                return isinstance(obj, real)

            def __subclasscheck__(cls, sub: type) -> bool:
                return issubclass(sub, real)

            def __call__(cls, *args: Any, **kwargs: Any) -> Any:
                return build(*args, **kwargs)

        return Meta(real.__name__, (), {"__doc__": real.__doc__})

    return make


def _grainlite() -> Any:
    return importlib.import_module("grainlite")


def _mix_map(parents: Any, proportions: Any = None, selection_map: Any = None) -> Any:
    if selection_map is not None:
        return _grainlite().MapDataset.select_from_datasets(parents, selection_map)
    return _grainlite().MapDataset.mix(parents, proportions)


def _mix_iter(parents: Any, proportions: Any = None) -> Any:
    return _grainlite().IterDataset.mix(parents, proportions)


class _NoArgumentInit:
    """Grain's one-process prefetch calls ``worker_init_fn()``; ``mp_prefetch`` passes (i, n)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def __call__(self, worker_index: int, worker_count: int) -> None:
        self.fn()


def _multiprocess_prefetch(
    ds: Any,
    num_workers: int = 0,
    buffer_size: int = 1,
    worker_init_fn: Any = None,
    sequential_slice: bool = False,
) -> Any:
    """Grain's internal ``multiprocess_prefetch``: what its public ``ds.mp_prefetch`` calls."""
    if num_workers == 0:
        return ds
    options = _grainlite().MultiprocessingOptions(
        num_workers=num_workers, per_worker_buffer_size=buffer_size
    )
    return ds.mp_prefetch(options, worker_init_fn, sequential_slice)


def _process_prefetch(parent: Any, buffer_size: int, worker_init_fn: Any = None) -> Any:
    """Grain's internal one-process prefetch: ``mp_prefetch`` with one worker process."""
    options = _grainlite().MultiprocessingOptions(num_workers=1, per_worker_buffer_size=buffer_size)
    init = None if worker_init_fn is None else _NoArgumentInit(worker_init_fn)
    return parent.mp_prefetch(options, init)


def _keep(x: Any) -> bool:
    return True


def _same(x: Any) -> Any:
    return x


def _same_with_index(i: int, x: Any) -> Any:
    return x


def _same_random(x: Any, rng: Any) -> Any:
    return x


def _range(g: Any) -> Any:
    return g.MapDataset.range(4)


def _iter(g: Any) -> Any:
    return g.MapDataset.range(4).to_iter_dataset()


class _BatchFn:
    """Stands for Grain's abstract batch function: a callable taking the list of elements."""

    def __call__(self, values: Any) -> Any:
        raise NotImplementedError


def _tree_lib() -> types.ModuleType:
    """Grain's tree helpers, as the tests use them (test support: JAX's tree functions)."""
    import jax

    module = types.ModuleType("grain._src.core.tree_lib")

    def map_structure(fn: Callable[..., Any], *trees: Any) -> Any:
        return jax.tree_util.tree_map(fn, *trees, is_leaf=lambda x: x is None)

    def map_structure_with_path(fn: Callable[..., Any], *trees: Any) -> Any:
        return jax.tree_util.tree_map_with_path(fn, *trees, is_leaf=lambda x: x is None)

    module.map_structure = map_structure  # type: ignore[attr-defined]
    module.map_structure_with_path = map_structure_with_path  # type: ignore[attr-defined]
    return module


def _pytest_flags() -> types.ModuleType:
    module = types.ModuleType("grain._src.core.pytest")
    module.RUN_IN_PYTEST = True  # type: ignore[attr-defined]
    return module


def _config_module() -> types.ModuleType:
    module = types.ModuleType("grain._src.core.config")
    module.config = importlib.import_module("grainlite.config")  # type: ignore[attr-defined]
    return module


def _shared_memory_array_module() -> types.ModuleType:
    module = types.ModuleType("grain._src.python.ipc.shared_memory_array")
    module.SharedMemoryArray = importlib.import_module("grainlite").SharedMemoryArray  # type: ignore[attr-defined]
    return module


_T = "grain._src.python.dataset.transformations."

# Grain's own test-support modules (test code, not library code): they run from the wheel as they
# are, on the stand-ins, like the test files.
TEST_SUPPORT = frozenset({_T + "testing_util"})

# Grain's internal module -> {name: how grainlite's public names give it}. Names not listed resolve
# by the same name in PUBLIC_NAMESPACES; modules not listed here (nor below them) fail to import.
MODULES: dict[str, dict[str, Callable[[], Any]]] = {
    "grain._src.core.config": {"config": _public("grainlite:config")},
    "grain._src.core.pytest": {"RUN_IN_PYTEST": lambda: True},
    "grain._src.core.sharding": {},
    "grain._src.core.transforms": {},
    "grain._src.core.tree_lib": {
        "map_structure": lambda: _module("grain._src.core.tree_lib").map_structure,
        "map_structure_with_path": lambda: (
            _module("grain._src.core.tree_lib").map_structure_with_path
        ),
    },
    "grain._src.python.data_loader": {},
    "grain._src.python.ipc.shared_memory_array": {},
    "grain._src.python.data_sources": {},
    "grain._src.python.grain_logging": {},
    "grain._src.python.load": {},
    "grain._src.python.operations": {},
    "grain._src.python.options": {},
    "grain._src.python.record": {},
    "grain._src.python.samplers": {},
    "grain._src.python.testing.experimental": {},
    "grain._src.python.experimental.example_packing.packing": {},
    "grain._src.python.experimental.index_shuffle.python.index_shuffle_module": {},
    "grain._src.python.experimental.device_put.device_put": {},
    # MultiprocessingContext: Grain's private dataclass; its tests use it only in annotations.
    "grain._src.python.dataset.base": {"MultiprocessingContext": lambda: Any},
    "grain._src.python.dataset.dataset": {},
    "grain._src.python.dataset.stats": {},
    "grain._src.python.dataset.stats_utils": {},
    "grain.proto.execution_summary_pb2": {},
    "grain._src.python.ipc.queue": {},
    "grain._src.python.ipc.variable_size_queue": {},
    "grain._src.python.dataset.elastic_iterator": {},
    "grain._src.python.dataset.sources.parquet_dataset": {},
    "grain._src.python.dataset.sources.tfrecord_dataset": {},
    _T + "batch": {
        "BatchMapDataset": _node(lambda g: _range(g).batch(2)),
        "BatchIterDataset": _node(lambda g: _iter(g).batch(2)),
        # Grain's base class for a batch function; grainlite takes any callable of a list.
        "BatchFn": lambda: _BatchFn,
        "shared_memory_array": lambda: _module("grain._src.python.ipc.shared_memory_array"),
        "tree_lib": lambda: _module("grain._src.core.tree_lib"),
    },
    _T + "cache": {},
    _T + "filter": {
        "FilterMapDataset": _node(lambda g: _range(g).filter(_keep)),
        "FilterIterDataset": _node(lambda g: _iter(g).filter(_keep)),
    },
    _T + "flatmap": {},
    _T + "interleave": {},
    _T + "limit": {},
    _T + "map": {
        "MapMapDataset": _node(lambda g: _range(g).map(_same)),
        "MapIterDataset": _node(lambda g: _iter(g).map(_same)),
        "MapWithIndexMapDataset": _node(lambda g: _range(g).map_with_index(_same_with_index)),
        "MapWithIndexIterDataset": _node(lambda g: _iter(g).map_with_index(_same_with_index)),
        "RandomMapMapDataset": _node(lambda g: _range(g).random_map(_same_random, seed=1)),
        "RandomMapIterDataset": _node(lambda g: _iter(g).random_map(_same_random, seed=1)),
    },
    _T + "mix": {
        "MixedMapDataset": _shim(
            _node(lambda g: g.MapDataset.mix([_range(g), _range(g)])), _mix_map
        ),
        "MixedIterDataset": _shim(
            _node(lambda g: g.IterDataset.mix([_iter(g), _iter(g)])), _mix_iter
        ),
        "ConcatenateMapDataset": _node(lambda g: g.MapDataset.concatenate([_range(g)])),
    },
    _T + "packing": {
        # Grain's base class of the two packers: the common base of grainlite's public ones.
        "PackIterDataset": lambda: _grainlite().experimental.FirstFitPackIterDataset.__mro__[1],
        # The iterator of both packers (Grain's has the same public get_packed_batch_size_bytes).
        "PackingDatasetIterator": _iterator_class(
            lambda g: g.experimental.FirstFitPackIterDataset(
                _iter(g), length_struct={"x": 1}, num_packing_bins=1
            )
        ),
    },
    _T + "packing_concat_then_split": {},
    _T + "packing_packed_batch": {
        "get_non_sequence_meta_features": _public(
            "grainlite.experimental:non_sequence_meta_features"
        ),
    },
    _T + "prefetch": {
        "PrefetchIterDataset": _node(_iter),
        "PrefetchDatasetIterator": _iterator_class(_iter),
    },
    _T + "process_prefetch": {
        "multiprocess_prefetch": lambda: _multiprocess_prefetch,
        "ProcessPrefetchIterDataset": _shim(
            _node(lambda g: _iter(g).mp_prefetch(g.MultiprocessingOptions(num_workers=1))),
            _process_prefetch,
        ),
    },
    _T + "rebatch": {},
    _T + "repeat": {"RepeatMapDataset": _node(lambda g: _range(g).repeat(2))},
    _T + "shuffle": {"ShuffleMapDataset": _node(lambda g: _range(g).shuffle(seed=1))},
    _T + "slice": {"SliceMapDataset": _node(lambda g: _range(g)[1:])},
    _T + "source": {
        "RangeMapDataset": _node(_range),
        "SourceMapDataset": _node(lambda g: g.MapDataset.source([1, 2])),
    },
    _T + "zip": {},
    _T + "prefetch_autotune": {},
}

# Whole modules that are test support in Grain's tree or alias a grainlite module.
_MODULE_OBJECTS: dict[str, Callable[[], types.ModuleType]] = {
    "grain.python": lambda: importlib.import_module("grainlite.python"),
    "grain._src.core.tree_lib": _tree_lib,
    "grain._src.core.pytest": _pytest_flags,
    "grain._src.core.config": _config_module,
}


class _StandInModule(types.ModuleType):
    """One of Grain's internal modules, its attributes looked up in grainlite's public names."""

    def __init__(self, name: str, table: dict[str, Callable[[], Any]]) -> None:
        super().__init__(name)
        self.__dict__["_adapter_table"] = table

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickled by name, as cloudpickle pickles an importable module: a worker process (where
        ``grain_unit_site`` installs the same mapping) imports it again. A test's lambda that
        names ``dataset.MapDataset`` carries its module this way."""
        return importlib.import_module, (self.__name__,)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        table = self.__dict__["_adapter_table"]
        if name in table:
            value = table[name]()
        elif name.startswith("_"):
            raise AttributeError(
                f"{self.__name__}.{name} is a private name of Grain; grainlite does not provide it"
            )
        else:
            value = _find_public(name)
            if value is _MISSING:
                raise AttributeError(
                    f"{self.__name__}.{name}: grainlite has no public name {name!r}"
                )
        setattr(self, name, value)
        return value


_MISSING = object()


def _find_public(name: str) -> Any:
    for namespace in PUBLIC_NAMESPACES:
        module = importlib.import_module(namespace)
        try:
            return getattr(module, name)
        except AttributeError:
            continue
    return _MISSING


def _packages() -> set[str]:
    names = set()
    for module in list(MODULES) + list(_MODULE_OBJECTS):
        parts = module.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return names


class _Loader(importlib.abc.Loader):
    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        self.packages = _packages()

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        name = spec.name
        if name in _MODULE_OBJECTS:
            return _MODULE_OBJECTS[name]()
        if name in MODULES:
            return _StandInModule(name, MODULES[name])
        module = types.ModuleType(name)
        module.__path__ = []  # a package: its submodules come through the finder too
        if name == "grain":
            module.__file__ = str(self.wheel / "__init__.py")
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def add_concrete_classes(module: types.ModuleType) -> list[type]:
    """Makes the concrete subclass of each of the module's abstract test classes it ships alone.

    Grain marks a shared base test class ``absltest.skipThisClass`` and runs it through a concrete
    subclass; where the wheel ships the base without that subclass (``CONCRETE_CLASSES``), running
    the file runs none of its tests. The subclass made here has no body of its own: it takes the
    base's ``_create_dataset`` / ``_maybe_wrap_ds`` defaults (the base must define them itself, so
    they are Grain's), and it gets the name Grain's tests refer to it by, in the module's namespace.
    Used for the wheel's modules under the adapter and, by ``concrete_grain_test_class``, for the
    same run against the real Grain.
    """
    from grainlite_tests.support.grain_unit_lists import CONCRETE_CLASSES

    made = []
    stem = module.__name__.rpartition(".")[2]
    for base_name, (concrete_name, hooks) in CONCRETE_CLASSES.get(stem, {}).items():
        base = getattr(module, base_name)
        missing = [hook for hook in hooks if hook not in vars(base)]
        if missing:
            raise RuntimeError(
                f"{module.__name__}.{base_name} no longer defines {missing} itself; read the "
                "wheel's file and update grain_unit_lists.CONCRETE_CLASSES"
            )
        concrete = type(concrete_name, (base,), {"__module__": module.__name__})
        concrete.__qualname__ = concrete_name
        setattr(module, concrete_name, concrete)
        made.append(concrete)
    return made


class _GrainTestFileLoader(importlib.machinery.SourceFileLoader):
    """Runs one of the wheel's test files as it is, then adds its concrete classes (if any)."""

    def exec_module(self, module: types.ModuleType) -> None:
        super().exec_module(module)
        add_concrete_classes(module)


class GrainToGrainliteFinder(importlib.abc.MetaPathFinder):
    """Answers ``grain`` / ``grain.*`` imports with stand-ins (``*_test`` files: from the wheel)."""

    def __init__(self, wheel: Path) -> None:
        self.loader = _Loader(wheel)
        self.known = set(MODULES) | set(_MODULE_OBJECTS) | self.loader.packages | TEST_SUPPORT

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "grain" and not fullname.startswith("grain."):
            return None
        if fullname.endswith("_test") or fullname in TEST_SUPPORT:  # loaded from the wheel as is
            file = self.loader.wheel.joinpath(*fullname.split(".")[1:]).with_suffix(".py")
            return importlib.util.spec_from_file_location(
                fullname, file, loader=_GrainTestFileLoader(fullname, str(file))
            )
        if fullname not in self.known:
            raise ModuleNotFoundError(
                f"{fullname} is an internal module of Grain that the adapter does not map",
                name=fullname,
            )
        is_package = fullname in self.loader.packages
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=is_package)


def _define_grain_flags() -> None:
    """The absl flags Grain defines (tests set them with flagsaver); grainlite reads none."""
    flags = absl.flags.FLAGS
    for name, default in (("grain_py_debug_mode", False),):
        if name not in flags:
            absl.flags.DEFINE_bool(name, default, "Grain's flag, accepted by the adapter.")
    importlib.import_module("absl.testing.absltest")  # defines test_srcdir, which tests read
    flags.mark_as_parsed()


def install() -> GrainToGrainliteFinder:
    """Puts the finder first on ``sys.meta_path`` (once) and drops any real ``grain`` modules."""
    for finder in sys.meta_path:
        if isinstance(finder, GrainToGrainliteFinder):
            return finder
    for name in [n for n in sys.modules if n == "grain" or n.startswith("grain.")]:
        del sys.modules[name]
    finder = GrainToGrainliteFinder(grain_wheel_dir())
    sys.meta_path.insert(0, finder)
    for package in sorted(finder.loader.packages, key=len):
        importlib.import_module(package)
    _define_grain_flags()
    return finder


# --- the pytest plugin ---------------------------------------------------------------------------


SUBPROCESS_FLAG = "GRAINLITE_GRAIN_UNIT_ADAPTER"
SITE_DIR = Path(__file__).resolve().parent / "grain_unit_site"


def share_with_subprocesses() -> None:
    """Makes every Python process started from here install the same mapping at start-up.

    Worker processes unpickle the test modules' classes by reference, importing the test module;
    without the mapping that import loads the real Grain in the worker. The processes inherit
    ``GRAINLITE_GRAIN_UNIT_ADAPTER=1`` and find ``grain_unit_site/sitecustomize.py`` on their path
    (``PYTHONPATH``, and ``sys.path``, which grainlite's workers get as their ``PYTHONPATH``).
    """
    os.environ[SUBPROCESS_FLAG] = "1"
    site = str(SITE_DIR)
    if site not in sys.path:
        sys.path.append(site)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    root = str(SITE_DIR.parents[2])  # the repository root: where grainlite_tests imports from
    for entry in (root, site):
        if entry not in paths:
            paths.append(entry)
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


def pytest_configure(config: Any) -> None:
    install()
    share_with_subprocesses()


def test_module_name(path: Path) -> str | None:
    """``grain._src.python.x_test`` for a test file of the installed wheel; None for any other."""
    try:
        relative = path.resolve().relative_to(grain_wheel_dir().resolve())
    except ValueError:
        return None
    return ".".join(("grain", *relative.with_suffix("").parts))


def pytest_pycollect_makemodule(module_path: Path, parent: Any) -> Any:
    """Grain's test files import as ``grain._src...._test`` through the finder, not by file path."""
    import pytest

    name = test_module_name(module_path)
    if name is None:
        return None

    class GrainTestModule(pytest.Module):
        def _getobj(self) -> Any:
            return importlib.import_module(name)

    return GrainTestModule.from_parent(parent, path=module_path)


SLOW_TIMEOUT_S = 300  # for the tests in grain_unit_lists.SLOW; every other test has 60 s


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    import pytest

    from grainlite_tests.support.grain_unit_lists import KNOWN_FAILING, LEFT_OUT, SLOW

    kept, dropped = [], []
    for item in items:
        if _left_out_reason(item.nodeid, LEFT_OUT) is not None:
            dropped.append(item)
            continue
        kept.append(item)
        reason = _left_out_reason(item.nodeid, KNOWN_FAILING)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=f"known failing: {reason}", strict=False))
        slow = _left_out_reason(item.nodeid, SLOW)
        if slow is not None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _left_out_reason(nodeid: str, table: dict[str, str]) -> str | None:
    """The reason for a test id matching a key (``file::Class::test``; ``*`` as in fnmatch)."""
    file, _, rest = nodeid.partition("::")
    key = Path(file).name.removesuffix(".py")
    parts = rest.split("::") if rest else []
    candidates = ["::".join([key, *parts[:i]]) for i in range(len(parts) + 1)]
    if parts:  # parameterized cases ("test_x0", "test_x_name", "test_x[...]") match "test_x"
        candidates.append("::".join([key, *parts[:-1], parts[-1].split("[")[0]]))
    for pattern, reason in table.items():
        if any(fnmatch.fnmatchcase(candidate, pattern) for candidate in candidates):
            return reason
        if any(candidate.startswith(pattern) for candidate in candidates[-2:] if parts):
            return reason  # "test_x" also covers absl's numbered cases "test_x0", "test_x1"
    return None


def iter_test_files() -> Iterator[Path]:
    """Every ``*_test.py`` file of the installed wheel's ``grain/_src/python``."""
    yield from sorted((grain_wheel_dir() / "_src" / "python").rglob("*_test.py"))
