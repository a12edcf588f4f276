"""The layers of grainlite run one way: every import follows an arrow of ``layers.toml``.

The scan reads every ``.py`` file under ``grainlite/`` with :mod:`ast` and takes each import in it,
at module level and inside functions (a lazy import is an arrow too), plus
``importlib.import_module("grainlite....")`` with a literal name. Each module is folded to its
layer (``layers.toml``, ``[layers]``); an import from one layer into another must follow an arrow
(``[arrows]``, closed under "and below"). A failure lists every arrow against the table, as
``file:line``, so the fix starts from the list.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "grainlite"
TABLE = ROOT / "layers.toml"


def load_table(path: Path = TABLE) -> dict[str, Any]:
    with path.open("rb") as file:
        return tomllib.load(file)


def layer_of_name(table: dict[str, Any]) -> dict[str, str]:
    """Top-level name under grainlite/ -> its layer."""
    return {name: layer for layer, names in table["layers"].items() for name in names}


def allowed(table: dict[str, Any]) -> dict[str, set[str]]:
    """Layer -> every layer it may import: its own, its arrows and, through them, all below."""
    arrows: dict[str, list[str]] = table["arrows"]
    every = set(table["layers"])
    reach: dict[str, set[str]] = {}

    def below(layer: str, seen: tuple[str, ...] = ()) -> set[str]:
        if layer in reach:
            return reach[layer]
        assert layer not in seen, f"layers.toml: the arrows make a cycle through {seen}"
        targets = arrows.get(layer, [])
        result = {layer}
        if "*" in targets:
            result |= every
        else:
            for target in targets:
                result |= below(target, (*seen, layer))
        reach[layer] = result
        return result

    return {layer: below(layer) for layer in every}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every grainlite import in ``path``, anywhere in the file."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # ``from grainlite import shm`` imports the submodule: fold to it where it is one.
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                file = root / Path(*sub.split("."))
                is_module = file.is_dir() or file.with_suffix(".py").is_file()
                yield node.lineno, sub if is_module else module
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def top_name(module: str) -> str | None:
    """The top-level name under grainlite of ``module`` ("__init__" for the package itself)."""
    parts = module.split(".")
    if parts[0] != "grainlite":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def scan(root: Path = ROOT, table: dict[str, Any] | None = None) -> list[str]:
    """Every import against the table, as ``file:line: from-layer -> to-layer (module)``."""
    table = table if table is not None else load_table()
    layers = layer_of_name(table)
    may = allowed(table)
    problems: list[str] = []
    for path in sorted((root / "grainlite").rglob("*.py")):
        source = module_name(path, root)
        source_top = top_name(source)
        assert source_top is not None
        where = path.relative_to(root)
        if source_top not in layers:
            problems.append(f"{where}: grainlite.{source_top} is in no layer of layers.toml")
            continue
        source_layer = layers[source_top]
        for line, target in sorted(set(imports_of(path, root))):
            target_top = top_name(target)
            if target_top is None:
                continue
            target_layer = layers.get(target_top)
            if target_layer is None:
                problems.append(f"{where}:{line}: {target} is in no layer of layers.toml")
            elif target_layer not in may[source_layer]:
                problems.append(f"{where}:{line}: {source_layer} -> {target_layer} ({target})")
    return problems


def test_every_import_in_grainlite_follows_an_arrow_of_the_layer_table():
    problems = scan()
    assert not problems, "imports against layers.toml:\n" + "\n".join(problems)


def test_every_name_under_grainlite_has_a_layer():
    layers = layer_of_name(load_table())
    names = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()
    }
    assert names - set(layers) == set(), "add these to a layer in layers.toml"


def test_an_upward_import_is_reported_with_its_file_and_line(tmp_path):
    # A copy of two leaves and the engine, where a leaf imports the engine lazily.
    package = tmp_path / "grainlite"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("")
    (package / "engine" / "parent.py").write_text("from grainlite import errors\n")
    (package / "errors.py").write_text("")
    (package / "config.py").write_text(
        "import os\n\n\ndef late():\n    from grainlite.engine.parent import x\n"
    )
    problems = scan(tmp_path)
    assert problems == ["grainlite/config.py:5: leaves -> engine (grainlite.engine.parent)"]


@pytest.mark.parametrize(
    ("layer", "may", "may_not"),
    [
        ("engine", {"shm", "stats", "leaves"}, {"loader", "dataset", "sources", "transforms"}),
        ("loader", {"engine", "sources", "transforms", "sampling"}, {"dataset", "torch"}),
        ("dataset", {"engine", "transforms", "sampling"}, {"loader", "checkpoint"}),
        ("transforms", {"sampling", "leaves"}, {"dataset", "engine", "shm"}),
        ("leaves", {"leaves"}, {"shm", "sampling", "stats"}),
    ],
)
def test_the_table_closes_arrows_downward_only(layer, may, may_not):
    reach = allowed(load_table())[layer]
    assert may <= reach
    assert not may_not & reach


def contributing_rows(text: str) -> list[tuple[set[str], set[str], set[str]]]:
    """The rows of CONTRIBUTING.md's Layout table as (layers, the names "what is in it" lists
    before its colon, imports), each name without its ``/`` or ``.py``; "anything" reads as
    ``*``, "nothing" as no layer."""

    def names(cell: str) -> set[str]:
        found = {name.rstrip("/").removesuffix(".py") for name in re.findall(r"`([^`]+)`", cell)}
        return found | {word for word in ("facades", "leaves") if cell.strip() == word}

    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "---"):
            continue
        imports = {"*"} if cells[2] == "anything" else set() if cells[2] == "nothing" else None
        what = names(cells[1].split(":")[0])
        rows.append((names(cells[0]), what, imports if imports is not None else names(cells[2])))
    return rows


def test_contributing_shows_the_layers_and_arrows_of_the_layer_table():
    table = load_table()
    rows = contributing_rows((ROOT / "CONTRIBUTING.md").read_text())
    shown = [layer for layers, _, _ in rows for layer in layers]
    assert sorted(shown) == sorted(table["layers"]), "one row per layer of layers.toml"
    for layers, what, imports in rows:
        for layer in layers:
            assert imports == set(table["arrows"][layer]), f"{layer}: the imports column"
            if layer in ("facades", "leaves"):  # rows that list their modules
                assert what == set(table["layers"][layer]), f"{layer}: the modules listed"


def test_no_test_module_imports_another_test_module():
    """What tests share lives in grainlite_tests/support/ (CONTRIBUTING.md, Rules)."""
    tests = ROOT / "grainlite_tests"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted(tests.rglob("*.py"))
        for line, module in imports_of(path)
        if module.startswith("grainlite_tests.") and module.rpartition(".")[2].startswith("test_")
    ]
    assert found == [], "\n".join(found)
