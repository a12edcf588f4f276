"""Every public name of Grain 0.2.18's namespaces is provided at the same path, or listed as absent
with a reason: test_namespaces walks ``dir()`` of the installed ``grain`` against the table in
grain_names.py, which is also the source of docs/grain_names.md."""

from __future__ import annotations

import importlib
import inspect
import re
import types
from typing import Any

import pytest

import grainlite
import grainlite.python  # as the test imports grain.python: the attribute appears
from grainlite_tests.support import grain_names
from grainlite_tests.support.grain_names import FIX, LEFT_OUT, NAMESPACES, NOT_YET, SAME, TABLE

real_grain = pytest.importorskip("grain")
pytest.importorskip("grain.python")

PROVIDED = (SAME, FIX)


def grain_namespace(path: str) -> Any:
    """Grain's namespace ``path``; ``grain.config`` is an object there, not a module."""
    if path == "grain.config":
        return real_grain.config
    return importlib.import_module(path)


def our_namespace(path: str) -> Any:
    """grainlite's module for Grain's namespace ``path``, or None if it does not exist."""
    try:
        return importlib.import_module(NAMESPACES[path])
    except ModuleNotFoundError:
        return None


def public_names(namespace: Any) -> set[str]:
    return {name for name in dir(namespace) if not name.startswith("_")}


def rows(*statuses: str) -> list[tuple[str, str]]:
    return [
        (path, name)
        for path, entries in TABLE.items()
        for name, entry in entries.items()
        if entry.status in statuses
    ]


def ids(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{path}.{name}" for path, name in pairs]


def test_the_table_covers_every_grain_namespace_that_is_not_left_out():
    assert set(TABLE) == set(NAMESPACES)
    for name, entry in TABLE["grain"].items():
        if isinstance(getattr(real_grain, name), types.ModuleType) and entry.status != LEFT_OUT:
            assert f"grain.{name}" in TABLE, name
    assert all(entry.status in grain_names.STATUSES for e in TABLE.values() for entry in e.values())


@pytest.mark.parametrize("path", list(TABLE))
def test_the_table_lists_exactly_the_public_names_of_grains_namespace(path):
    listed, public = set(TABLE[path]), public_names(grain_namespace(path))
    assert public - listed == set(), f"{path}: names of Grain 0.2.18 missing from grain_names.py"
    assert listed - public == set(), f"{path}: names listed that Grain 0.2.18 does not have"


@pytest.mark.parametrize(("path", "name"), rows(*PROVIDED), ids=ids(rows(*PROVIDED)))
def test_a_name_marked_same_is_there_and_the_same_kind_of_object(path, name):
    ours = our_namespace(path)
    assert ours is not None, f"{NAMESPACES[path]} does not exist, but {path}.{name} says provided"
    assert hasattr(ours, name), f"{NAMESPACES[path]}.{name} is missing"
    theirs, mine = getattr(grain_namespace(path), name), getattr(ours, name)
    if isinstance(theirs, type):
        assert isinstance(mine, type), name
        assert inspect.isabstract(mine) == inspect.isabstract(theirs), name
    elif isinstance(theirs, types.ModuleType):
        assert isinstance(mine, types.ModuleType), name
    elif inspect.isfunction(theirs) or inspect.isbuiltin(theirs):
        assert callable(mine), name
    elif isinstance(theirs, str | frozenset):
        assert mine == theirs, name


@pytest.mark.parametrize(
    ("path", "name"), rows(NOT_YET, LEFT_OUT), ids=ids(rows(NOT_YET, LEFT_OUT))
)
def test_a_name_marked_absent_is_absent_and_says_why(path, name):
    entry = TABLE[path][name]
    ours = our_namespace(path)
    provided = ours is not None and hasattr(ours, name)
    assert not provided, f"{NAMESPACES[path]}.{name} exists: mark it {SAME!r} in grain_names.py"
    if entry.status == NOT_YET:
        assert re.search(r"\(issue \d+", entry.note), entry
    else:
        assert len(entry.note.split()) >= 5, entry


def test_names_that_are_one_object_in_grain_are_one_object_here():
    # Each group: the Grain spellings of one class or function (e.g. transforms.Map, MapTransform).
    groups: dict[int, list[tuple[str, str]]] = {}
    for path, name in rows(*PROVIDED):
        theirs = getattr(grain_namespace(path), name)
        if isinstance(theirs, type | types.FunctionType | types.BuiltinFunctionType):
            groups.setdefault(id(theirs), []).append((path, name))
    aliased = [group for group in groups.values() if len(group) > 1]
    assert len(aliased) > 20  # Map / MapTransform, the samplers, the sources, ...
    for group in aliased:
        objects = {id(getattr(our_namespace(path), name)) for path, name in group}
        assert len(objects) == 1, f"not one object here: {group}"


def test_the_grain_python_spelling_gives_the_top_level_objects():
    import grainlite.python

    for path, name in rows(*PROVIDED):
        if path == "grain.python" and name != "experimental":
            assert getattr(grainlite.python, name) is getattr(grainlite, name), name
    assert grainlite.python.config is grainlite.config
    assert grainlite.python.experimental.__name__ == "grainlite.python.experimental"
    assert grainlite.python.experimental.__all__ == grainlite.experimental.__all__


def test_the_docs_page_is_generated_from_the_table():
    text = grain_names.PAGE.read_text()
    assert grain_names.generated_part(text) == grain_names.render(), (
        "docs/grain_names.md is stale: run `python -m grainlite_tests.support.grain_names`"
    )


def test_the_docs_page_is_linked_from_the_index_and_the_migration_guide():
    docs = grain_names.PAGE.parent
    assert "grain_names" in (docs / "index.md").read_text()
    assert "grain_names" in (docs / "how-to" / "migrate_from_grain.md").read_text()


def test_every_grain_submodule_is_an_attribute_right_after_import_grainlite():
    for path, entry in TABLE["grain"].items():
        # As in Grain, grain.python is there once imported (test_public_api covers it).
        if entry.status in PROVIDED and f"grain.{path}" in NAMESPACES and path != "python":
            assert isinstance(getattr(grainlite, path), types.ModuleType), path
            assert path in grainlite.__all__, path
