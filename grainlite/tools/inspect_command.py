"""``python -m grainlite inspect PATH``: what a converted folder holds, and ``--verify`` it."""

from __future__ import annotations

import argparse
import sys

NAME = "inspect"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Registers the ``inspect`` command and its options."""
    command = commands.add_parser(
        NAME,
        help="show a converted folder's manifest, shards and first records; --verify checks all",
        description=(
            "Shows the manifest of a folder written by python -m grainlite convert, its shards "
            "and record counts, and its first records decoded. --verify reads every record and "
            "checks sizes, counts and checksums against the manifest (exit status 1 if any "
            "differs)."
        ),
    )
    command.add_argument(
        "path", help="the converted folder or s3:// / gs:// prefix, or its manifest file"
    )
    command.add_argument("--records", type=int, default=3, help="how many records to show")
    command.add_argument("--verify", action="store_true", help="read and check every record")


def run(args: argparse.Namespace) -> int:
    """Prints the summary (and the verification); returns the exit status."""
    from grainlite.errors import GrainliteError
    from grainlite.tools.convert import manifest as manifest_module
    from grainlite.tools.convert import verify
    from grainlite.tools.convert.decoder import DecodeRecord

    try:
        manifest = manifest_module.load(args.path)
    except (GrainliteError, FileNotFoundError, ValueError) as error:
        print(f"inspect: error: {error}", file=sys.stderr)
        return 2
    print(f"manifest: {manifest_module.find(args.path)}")
    print("\n".join(verify.summary(manifest)))
    if args.verify:
        problems = verify.verify(manifest)
        for problem in problems:
            print(f"verify: {problem}")
        if problems:
            print(f"verify: FAILED ({len(problems)} problem(s))")
            return 1
        print(f"verify: OK, {manifest.num_records} records match the manifest")
    shown = min(max(args.records, 0), manifest.num_records)
    if shown:
        from grainlite.sources.array_record import ArrayRecordDataSource

        decode = DecodeRecord(manifest.features)
        try:
            with ArrayRecordDataSource(manifest.shard_paths) as source:
                print(f"first {shown} record(s):")
                for key in range(shown):
                    element = decode.map(source[key])
                    parts = [f"{k}: {verify.describe_value(v)}" for k, v in element.items()]
                    print(f"  [{key}] " + "; ".join(parts))
        except (GrainliteError, OSError) as error:
            print(f"inspect: error reading records: {error}", file=sys.stderr)
            return 1
    return 0
