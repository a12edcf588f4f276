"""``python -m grainlite cleanup``: remove shared memory left by grainlite processes that died."""

from __future__ import annotations

import argparse

NAME = "cleanup"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Registers the ``cleanup`` command and its options."""
    command = commands.add_parser(
        NAME,
        help="remove /dev/shm segments of this container and user whose owning process died",
        description=(
            "Removes the grainlite segments in /dev/shm whose owner process no longer runs. Only "
            "segments of this pid namespace (container) and this user are considered; segments "
            "of other containers, boots or users are never touched, only counted."
        ),
    )
    command.add_argument("--dry-run", action="store_true", help="only list what would be removed")


def run(args: argparse.Namespace) -> int:
    """Removes (or, with ``--dry-run``, lists) the stale segments; returns the exit status."""
    from grainlite.shm import cleanup

    found = cleanup.survey()
    if args.dry_run:
        verb, done = "would remove", found.stale
    else:
        verb, done = "removed", cleanup.remove(found.stale)
    for segment in done:
        print(
            f"{verb} /dev/shm/{segment.name} ({segment.size} bytes, owner pid {segment.owner_pid})"
        )
    for segment in found.stale:
        if segment not in done:
            print(f"could not remove /dev/shm/{segment.name} (gone, or not removable)")
    print(
        f"{verb} {len(done)} stale segment(s); kept {found.in_use} in use; skipped "
        f"{found.not_ours} not ours (another container, boot or user)"
    )
    return 0
