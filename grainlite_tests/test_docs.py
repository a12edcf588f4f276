"""The docs build with every code cell executed and no warning, and the README's code runs."""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK_TIMEOUT_S = 120

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_docs_build_with_every_cell_executed_and_no_warning(tmp_path):
    pytest.importorskip("myst_nb")
    # -W: any warning fails; conf.py makes MyST-NB run every cell and fail on any error.
    command = [
        sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html",
        "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(tmp_path / "html"),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=570)
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stdout}\n{result.stderr}"
    html = tmp_path / "html"
    for page in ("index", "tutorials/data_loader_tutorial", "concepts", "errors", "api"):
        assert (html / f"{page}.html").exists(), page
    tutorial = (html / "tutorials" / "data_loader_tutorial.html").read_text()
    assert "process_0-of-1.json" in tutorial  # the checkpoint cell ran and listed its files
    api = (html / "api.html").read_text()
    assert "grainlite.DataLoader" in api and "show_batch" in api


def python_blocks(markdown: str) -> list[str]:
    """The contents of every ```python fence, in order."""
    return [match.group(1) for match in _FENCE.finditer(markdown)]


def undefined_names(code: str) -> list[str]:
    """Names a block reads but never binds, imports or gets from builtins: not self-contained.

    A rough static check (it ignores scopes), good enough to tell a runnable example from a sketch
    that uses names defined elsewhere.
    """
    tree = ast.parse(code)
    bound, read = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return sorted(read - bound)


def test_the_self_contained_check_tells_runnable_blocks_from_sketches():
    assert undefined_names("import numpy as np\nx = np.zeros(3)\nprint(len(x))") == []
    assert undefined_names("loader = grain.DataLoader(sampler=s)") == ["grain", "s"]
    assert undefined_names("def f(a):\n    return a\nclass C:\n    pass\nf(C)") == []


README_BLOCKS = python_blocks(README.read_text()) if README.exists() else []


@pytest.mark.parametrize(
    "code", README_BLOCKS, ids=[f"README-block-{i + 1}" for i in range(len(README_BLOCKS))]
)
@pytest.mark.timeout(BLOCK_TIMEOUT_S + 30)
def test_every_self_contained_readme_block_runs(tmp_path, code):
    missing = undefined_names(code)
    assert not missing, f"a README block must run as it is; it uses {missing} without defining them"
    script = tmp_path / "block.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    assert result.returncode == 0, f"the README block failed:\n{code}\n{result.stderr}"
