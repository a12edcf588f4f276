"""``python -m grainlite cleanup``: remove shared memory left by grainlite processes that died."""

from __future__ import annotations

import argparse
import sys

from grainlite.loader import shm


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m grainlite", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    cleanup = commands.add_parser(
        "cleanup", help="remove /dev/shm segments whose owning process no longer runs"
    )
    cleanup.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    args = parser.parse_args(argv)
    stale = shm.stale_segments() if args.dry_run else shm.remove_stale_segments()
    verb = "would remove" if args.dry_run else "removed"
    for segment in stale:
        print(
            f"{verb} /dev/shm/{segment.name} ({segment.size} bytes, owner pid {segment.owner_pid})"
        )
    print(f"{verb} {len(stale)} stale segment(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
