"""The ``grainlite.shm`` package: its public names, and that it sits below everything else."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from grainlite import shm

pytestmark = pytest.mark.timeout(30)

PACKAGE = Path(shm.__file__).parent

# The names the loader, the engine and the sources code against.
API = {
    "Segment": None,
    "StaleSegment": None,
    "list_segments": "() -> list[str]",
    "owner_pid": "(name: str) -> int | None",
    "remove_stale_segments": "() -> list[StaleSegment]",
    "remove_stale_segments_automatically": "() -> None",
    "memory_key": "() -> str | None",
    "owned_prefix": "(owner_pid: int, tag: str) -> str",
    "remove_tagged": "(tag_prefix: str, owner_pid: int | None = None) -> None",
    "segment_name": "(tag: str, owner_pid: int | None = None) -> str",
    "stale_segments": "() -> list[StaleSegment]",
    "unlink": "(name: str) -> None",
}


def signature(function: object) -> str:
    """The signature as written in the source (annotations are strings there)."""
    return str(inspect.signature(function)).replace("'", "")


def test_all_is_sorted_and_is_exactly_the_api():
    assert shm.__all__ == sorted(shm.__all__)
    assert set(shm.__all__) == set(API)


@pytest.mark.parametrize("name", [n for n, s in API.items() if s is not None])
def test_each_function_keeps_its_signature(name):
    assert signature(getattr(shm, name)) == API[name]


def test_segment_keeps_its_constructors_and_attributes():
    create = "(size: int, tag: str, owner_pid: int | None = None, reserve: bool = False) -> Segment"
    assert signature(shm.Segment.create) == create
    assert signature(shm.Segment.attach) == "(name: str) -> Segment"
    assert {"name", "size", "buf"} <= set(shm.Segment.__slots__)
    assert callable(shm.Segment.unlink) and callable(shm.Segment.close)
    assert list(shm.StaleSegment.__dataclass_fields__) == ["name", "owner_pid", "size"]


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_the_package_imports_nothing_of_grainlite_but_errors_checks_and_itself(module):
    # errors and checks (the one owner of option checks; it imports only errors) are leaves.
    tree = ast.parse((PACKAGE / module).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    ours = [m for m in imported if m == "grainlite" or m.startswith("grainlite.")]
    leaves = {"grainlite.errors", "grainlite.checks"}
    assert [m for m in ours if m not in leaves and not m.startswith("grainlite.shm")] == []
