"""``python -m grainlite bench FACTORY``: measure a user's own pipeline at several worker counts.

``FACTORY`` is ``path/to/file.py:function`` or ``package.module:function``. The function takes
``worker_count`` (and, if it accepts them, ``worker_buffer_size`` and ``read_options``) as keyword
arguments and returns a DataLoader or a Dataset API ``IterDataset``. Each configuration runs for
``--seconds``; the command prints its elements/s (and records/s where elements are batches), its
stats table, and at the end the recommended ``worker_count``, ``worker_buffer_size`` and read
threads: measured, not guessed. The work is in :mod:`grainlite.tools.bench`.
"""

from __future__ import annotations

import argparse

NAME = "bench"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Registers the ``bench`` command and its options."""
    command = commands.add_parser(
        NAME,
        help="measure your loader factory at several worker counts and recommend settings",
        description=(
            "Runs a loader factory (FILE.py:function or module:function, called with "
            "worker_count=N and optionally worker_buffer_size=, read_options=) for a few "
            "seconds per configuration, prints elements/s and the stats table of each, then the "
            "recommended worker_count, worker_buffer_size and read threads."
        ),
    )
    command.add_argument("factory", help="path/to/file.py:function or package.module:function")
    command.add_argument(
        "--seconds", type=float, default=5.0, help="how long each configuration runs (default 5)"
    )
    command.add_argument(
        "--workers",
        default=None,
        help="comma-separated worker counts to try (default: 0, 1, 2, 4, ... up to the CPUs)",
    )
    command.add_argument(
        "--buffer-sizes",
        default="1,2,4",
        help="worker_buffer_size values to try at the best worker count, if the factory takes "
        "worker_buffer_size (default 1,2,4)",
    )
    command.add_argument(
        "--quiet", action="store_true", help="print only the rates and the recommendation"
    )


def run(args: argparse.Namespace) -> int:
    """Runs the benchmark; returns the exit status (2 for a factory that cannot be used)."""
    from grainlite.tools import bench

    return bench.main(args)
