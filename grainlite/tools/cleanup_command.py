"""``python -m grainlite cleanup``: remove what grainlite processes that died left behind: shared
memory segments, and the partial folders of killed conversions."""

from __future__ import annotations

import argparse

NAME = "cleanup"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Registers the ``cleanup`` command and its options."""
    command = commands.add_parser(
        NAME,
        help="remove /dev/shm segments and convert's partial folders whose owning process died",
        description=(
            "Removes the grainlite segments in /dev/shm whose owner process no longer runs, and "
            "the partial folders (DST.partial-*) of conversions that were killed, in each PATH "
            "(a convert destination, or a folder holding destinations; default: the current "
            "folder). Only segments and folders of this pid namespace (container) and this user "
            "are considered; those of other containers, hosts, boots or users are never touched, "
            "only counted."
        ),
    )
    command.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="where to look for convert's partial folders (default: the current folder)",
    )
    command.add_argument("--dry-run", action="store_true", help="only list what would be removed")


def run(args: argparse.Namespace) -> int:
    """Removes (or, with ``--dry-run``, lists) the stale segments and partial folders; returns
    the exit status."""
    from grainlite.shm import cleanup

    _partial_folders(args.paths or ["."], args.dry_run)
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


def _partial_folders(paths: list[str], dry_run: bool) -> None:
    """Removes (or lists) the stale partial folders of ``paths``; prints nothing if none is
    found at all (the segments' summary stays the last line)."""
    from grainlite.tools.convert import partial

    found = partial.survey(*paths)
    if not found:
        return
    verb = "would remove" if dry_run else "removed"
    done = found.stale if dry_run else partial.remove(found.stale)
    for folder in done:
        print(f"{verb} {folder.path} (a killed conversion's output, owner pid {folder.owner_pid})")
    for folder in found.stale:
        if folder not in done:
            print(f"could not remove {folder.path} (gone, or not removable)")
    for path in found.unknown:
        print(f"kept {path} (owner not provably dead: another host, container or user, or an "
              f"older grainlite; remove it yourself once no conversion writes it)")  # fmt: skip
    print(
        f"{verb} {len(done)} stale partial folder(s); kept {len(found.in_use)} in use and "
        f"{len(found.unknown)} of unknown owner"
    )
