"""``python -m grainlite``: the command line (cleanup, and the commands listed in COMMANDS).

Each command lives in its own module with ``NAME``, ``add_parser(subparsers)`` and
``run(args) -> int``; those modules import their heavy dependencies inside ``run`` only, so
``--help`` and every command start fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# The modules that define a command, in the order ``--help`` lists them.
COMMANDS = (
    "grainlite.tools.bench_command",
    "grainlite.tools.cleanup_command",
    "grainlite.tools.convert_command",
    "grainlite.tools.inspect_command",
    "grainlite.run_command",
)


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m grainlite", description="grainlite's command line tools."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    runners = {}
    for module_name in COMMANDS:
        module = importlib.import_module(module_name)
        module.add_parser(subparsers)
        runners[module.NAME] = module.run
    args = parser.parse_args(argv)
    return int(runners[args.command](args))


if __name__ == "__main__":
    sys.exit(main())
