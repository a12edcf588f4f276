"""Sphinx configuration of grainlite's docs: MyST pages whose code cells all run at build time.

Build (warnings are errors, every notebook page is executed):
``.venv/bin/sphinx-build -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The pages build their small datasets with the repository's scaffolding in examples/
# (``from stand_in_data import ...``), outside the grainlite package: put that folder on the path of
# this process and of the kernels that run the pages' cells.
_EXAMPLES = str(Path(__file__).resolve().parents[1] / "examples")
sys.path.insert(0, _EXAMPLES)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_EXAMPLES, os.environ.get("PYTHONPATH", "")) if p
)

project = "grainlite"
author = "the grainlite authors"
copyright = "the grainlite authors"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

exclude_patterns = ["_build", "**/.ipynb_checkpoints", "README.md"]

# MyST: ::: fences and definition lists read well in plain text too.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Every code cell of every notebook page runs on every build, and a failing cell fails the build:
# the docs cannot show code that does not work.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 180
# Cells run in a fresh temporary folder, so pages never write into the source tree.
nb_execution_in_temp = True
nb_merge_streams = True

# Pages run in kernels that start from this environment: keep TFDS quiet and JAX on the CPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# API reference: Google-style docstrings, type hints in the description, members in source order.
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = "grainlite"
html_theme_options = {
    "description": "Grain's DataLoader API, fast and leak-free",
    "fixed_sidebar": True,
}
