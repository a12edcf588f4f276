"""``python -m grainlite run script.py [args]``: a script whose ``import grain`` gives grainlite.

The script runs as ``__main__`` (as ``python script.py`` would run it), after
:func:`grainlite.install_as_grain`, so library code it calls that imports ``grain`` (Keras's
``model.fit``, MaxText, torchtitan...) gets grainlite without an edit. ``-m module`` runs a module
the same way (as ``python -m module`` would).
"""

from __future__ import annotations

import argparse

NAME = "run"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Registers the ``run`` command and its arguments."""
    command = commands.add_parser(
        NAME,
        help="run a Python script with `import grain` giving grainlite (install_as_grain)",
        description=(
            "Runs SCRIPT (or, with -m, a module) as __main__ after grainlite.install_as_grain(): "
            "every `import grain` in it and in the libraries it calls gives grainlite."
        ),
    )
    command.add_argument("-m", dest="module", action="store_true", help="run a module by name")
    command.add_argument("target", metavar="SCRIPT", help="the script's path (or module name)")
    command.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")


def run(args: argparse.Namespace) -> int:
    """Installs grainlite as grain and runs the script; returns 0 when it returns."""
    import os
    import runpy
    import sys

    from grainlite.as_grain import install_as_grain

    install_as_grain()
    sys.argv = [args.target, *args.args]
    if args.module:
        runpy.run_module(args.target, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(args.target)))
        runpy.run_path(args.target, run_name="__main__")
    return 0
