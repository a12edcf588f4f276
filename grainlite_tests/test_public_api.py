"""The public surface: one sorted __all__, every name Grain's tutorial uses, both import paths."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import grainlite
import grainlite.experimental
import grainlite.python
from grainlite import errors

ROOT = Path(__file__).resolve().parents[1]
# The Grain tutorial as this repository runs it (its code is the tutorial's, unchanged).
TUTORIALS = [
    ROOT / "docs" / "tutorials" / "data_loader_tutorial.md",
    ROOT / "examples" / "tutorial.py",
]


# Grain's submodules, which grainlite has as attributes at the same names (and in __all__).
SUBMODULES = {
    "checkpoint",
    "config",
    "constants",
    "experimental",
    "multiprocessing",
    "samplers",
    "sharding",
    "sources",
    "transforms",
}


def isort_order(name: str) -> tuple[int, str]:
    """The order of ruff's RUF022: CONSTANTS, then Classes, then the rest, each alphabetical."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def test_all_is_sorted_and_every_name_in_it_exists():
    assert grainlite.__all__ == sorted(grainlite.__all__, key=isort_order)
    for name in grainlite.__all__:
        assert getattr(grainlite, name) is not None, name


def test_all_lists_every_public_name_of_the_package():
    public = {
        name
        for name, value in vars(grainlite).items()
        if not name.startswith("_")
        and not (isinstance(value, types.ModuleType) and name not in SUBMODULES)
        and name not in {"annotations", "Any"}
    }
    assert public <= set(grainlite.__all__), public - set(grainlite.__all__)
    assert set(grainlite.__all__) >= SUBMODULES, SUBMODULES - set(grainlite.__all__)


# Imports every module of grainlite (in a child, so that optional extras such as torch do not load
# into the test process) and prints every GrainliteError subclass with the module defining it.
_ERROR_TREE = """
import importlib, json, pkgutil
import grainlite
from grainlite.errors import GrainliteError

for module in pkgutil.walk_packages(grainlite.__path__, "grainlite."):
    if not module.name.endswith("__main__"):
        try:
            importlib.import_module(module.name)
        except ImportError as error:  # only an optional stack that is not installed here
            if (error.name or "grainlite").split(".")[0] == "grainlite":
                raise

def below(kind):
    for sub in kind.__subclasses__():
        yield sub
        yield from below(sub)

print(json.dumps(sorted({(k.__module__, k.__qualname__) for k in below(GrainliteError)})))
"""


def test_every_grainlite_error_is_defined_in_errors_and_importable_from_the_top_level():
    found = subprocess.run(
        [sys.executable, "-c", _ERROR_TREE], capture_output=True, text=True, check=True, cwd=ROOT
    )
    tree = [tuple(pair) for pair in json.loads(found.stdout)]
    ours = [(module, name) for module, name in tree if module.split(".")[0] == "grainlite"]
    assert len(ours) >= 27, ours  # the tree as of this test; new errors only add to it
    elsewhere = [f"{module}.{name}" for module, name in ours if module != "grainlite.errors"]
    assert not elsewhere, f"define these in grainlite/errors.py: {elsewhere}"
    for name in ["GrainliteError"] + [name for _, name in ours]:
        assert name in grainlite.__all__, name
        assert getattr(grainlite, name) is getattr(errors, name), name
        assert issubclass(getattr(errors, name), errors.GrainliteError), name
    with pytest.raises(grainlite.GrainliteValueError) as caught:
        grainlite.IndexSampler(3, num_epochs=0)
    assert isinstance(caught.value, ValueError)


def _type_checking_imports(module: types.ModuleType) -> dict[str, str]:
    """What the ``TYPE_CHECKING`` imports of a facade give each name, in its ``_NAMES`` spelling:
    ``"module"``, ``"module:attribute"`` (imported under another name) or ``""`` (a submodule)."""
    tree = ast.parse(Path(module.__file__).read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    )
    given: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module, ast.unparse(node)
        for alias in node.names:
            name = alias.asname or alias.name
            assert name not in given, f"{name} is imported twice"
            if node.module == module.__name__:
                given[name] = ""
            elif alias.asname and alias.asname != alias.name:
                given[name] = f"{node.module}:{alias.name}"
            else:
                given[name] = node.module
    return given


@pytest.mark.parametrize("facade", [grainlite, grainlite.experimental], ids=lambda m: m.__name__)
def test_the_type_checking_imports_of_a_facade_say_what_its_one_name_table_says(facade):
    table = {
        name: where if not where.endswith(f":{name}") else where.rpartition(":")[0]
        for name, where in facade._NAMES.items()
    }
    assert _type_checking_imports(facade) == table
    assert sorted(facade.__all__) == sorted(table)
    for name in facade.__all__:
        where = table[name]
        module, _, attribute = where.partition(":")
        expected = (
            importlib.import_module(f"{facade.__name__}.{name}")
            if where == ""
            else getattr(importlib.import_module(module), attribute or name)
        )
        assert getattr(facade, name) is expected, name


def test_every_grain_name_the_tutorial_uses_is_exported():
    text = "\n".join(path.read_text() for path in TUTORIALS)
    used = set(re.findall(r"\bgrain\.([A-Za-z_]\w*)", text))
    used -= {"python"}
    assert {"IndexSampler", "DataLoader", "GrainCheckpointSave", "InMemoryDataSource"} <= used
    assert used <= set(grainlite.__all__), used - set(grainlite.__all__)


def test_grain_python_spelling_gives_the_same_objects():
    for name in grainlite.__all__:
        if name != "experimental":  # grainlite.python.experimental is its own module
            assert getattr(grainlite.python, name) is getattr(grainlite, name), name
    assert grainlite.python.__all__ == grainlite.__all__
    assert grainlite.PyGrainDatasetIterator is grainlite.DataLoaderIterator
    assert grainlite.InMemoryDataSource is grainlite.SharedMemoryDataSource
    assert grainlite.experimental.FlatMapTransform is grainlite.FlatMapTransform


def test_grain_python_experimental_imports_as_a_module_with_the_same_names():
    import grainlite.python.experimental as experimental
    from grainlite.python.experimental import FlatMapTransform

    assert experimental.FlatMapTransform is FlatMapTransform is grainlite.FlatMapTransform
    assert experimental.__all__ == grainlite.experimental.__all__


def test_importing_grainlite_loads_no_heavy_optional_package():
    code = (
        "import sys, grainlite; "
        "heavy = {'jax', 'orbax', 'tensorflow_datasets', 'cv2', 'matplotlib', 'array_record', "
        "'tensorflow', 'torch', 'lightning', 'ray', 'apache_beam', 'obstore'}; "
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_checkpoint_is_an_attribute_at_import_and_loads_orbax_only_on_first_use():
    pytest.importorskip("orbax.checkpoint")
    code = (
        "import sys, grainlite; "
        "loaded = lambda: 'orbax.checkpoint' in sys.modules; "
        "module = grainlite.checkpoint; "
        "print(module.__name__, loaded(), sorted(module.__all__)); "
        "save = grainlite.checkpoint.CheckpointSave; "
        "print(loaded(), save is grainlite.PyGrainCheckpointSave is grainlite.GrainCheckpointSave)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == [
        "grainlite.checkpoint False ['CheckpointHandler', 'CheckpointRestore', 'CheckpointSave']",
        "True True",
    ]


def test_an_unknown_checkpoint_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'CheckpointLoad'"):
        grainlite.checkpoint.CheckpointLoad  # noqa: B018


def test_the_dataset_api_base_classes_are_top_level_names_and_in_grain_python():
    from grainlite.dataset import dataset_iterator, iter_dataset, map_dataset

    for name, module in (
        ("DatasetIterator", dataset_iterator),
        ("IterDataset", iter_dataset),
        ("MapDataset", map_dataset),
    ):
        assert name in grainlite.__all__, name
        assert getattr(grainlite, name) is getattr(module, name), name
        assert getattr(grainlite.python, name) is getattr(module, name), name


def test_importing_grainlite_and_grainlite_python_loads_no_dataset_node_module():
    code = (
        "import sys, grainlite, grainlite.python, grainlite.python.experimental; "
        "print(sorted(m for m in sys.modules if m.startswith('grainlite.dataset.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(
        [
            "grainlite.dataset.dataset_iterator",
            "grainlite.dataset.iter_dataset",
            "grainlite.dataset.map_dataset",
            "grainlite.dataset.node_base",
        ]
    )


def test_a_dataset_pipeline_over_a_list_loads_no_array_record_remote_or_report_module():
    # A source package's names load on first use: a list source never pays for the ArrayRecord,
    # object-storage and stats-report modules at its start (about 15 ms of imports).
    code = (
        "import sys, grainlite as grain\n"
        "ds = grain.MapDataset.source(list(range(10))).shuffle(seed=1).map(lambda x: x + 1)\n"
        "got = [int(x) for b in ds.batch(5).to_iter_dataset() for x in b]\n"
        "assert sorted(got) == list(range(1, 11)), got\n"
        "names = ('grainlite.sources.array_record', 'grainlite.sources.remote.objects',\n"
        "         'grainlite.sources.remote.file_objects', 'grainlite.stats.report')\n"
        "print(sorted(m for m in names if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("package", ["grainlite.sources", "grainlite.sources.remote"])
def test_each_name_of_a_source_package_loads_from_its_module_on_first_use(package):
    facade = importlib.import_module(package)
    assert sorted(facade.__all__) == sorted(facade._WHERE)
    for name in facade.__all__:
        where = facade._WHERE[name]
        module = importlib.import_module(where if "." in where else f"{package}.{where}")
        assert getattr(facade, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = facade.Nope


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("FlatMapIterDataset", "grainlite.dataset.flat_map"),
        ("FlatMapMapDataset", "grainlite.dataset.flat_map"),
        ("apply_transformations", "grainlite.dataset.apply"),
        ("device_put", "grainlite.device.dataset"),
        ("ElasticIterator", "grainlite.dataset.experimental.elastic_iterator"),
        ("InterleaveIterDataset", "grainlite.dataset.experimental.interleave"),
        ("LimitIterDataset", "grainlite.dataset.experimental.limit"),
        ("ParquetIterDataset", "grainlite.dataset.experimental.parquet"),
        ("RebatchIterDataset", "grainlite.dataset.experimental.rebatch"),
        ("RepeatIterDataset", "grainlite.dataset.repeat"),
        ("StreamingShuffleMapDataset", "grainlite.dataset.experimental.streaming_shuffle"),
        ("TFRecordIterDataset", "grainlite.dataset.experimental.tfrecord"),
        ("ThreadPrefetchDatasetIterator", "grainlite.dataset.experimental.thread_prefetch"),
        ("ThreadPrefetchIterDataset", "grainlite.dataset.experimental.thread_prefetch"),
        ("WindowShuffleIterDataset", "grainlite.dataset.experimental.window_shuffle"),
        ("WindowShuffleMapDataset", "grainlite.dataset.experimental.window_shuffle"),
        ("ZipIterDataset", "grainlite.dataset.experimental.zip"),
        ("ZipMapDataset", "grainlite.dataset.experimental.zip"),
        ("batch_and_pad", "grainlite.dataset.experimental.rebatch"),
    ],
)
def test_experimental_dataset_names_load_on_first_use_as_one_object_in_both_spellings(name, module):
    import importlib

    import grainlite.python.experimental

    defined = getattr(importlib.import_module(module), name)
    assert getattr(grainlite.experimental, name) is defined
    assert getattr(grainlite.python.experimental, name) is defined
    assert name in grainlite.experimental.__all__
    assert name in dir(grainlite.python.experimental)
