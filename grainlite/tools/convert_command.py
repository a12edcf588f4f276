"""``python -m grainlite convert SRC DST``: a dataset to ArrayRecord shards and a manifest."""

from __future__ import annotations

import argparse
import errno
import sys

NAME = "convert"
# OSError numbers that say the destination cannot take the output.
_NOT_WRITABLE = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
     errno.ENOTDIR, errno.EEXIST}
)  # fmt: skip


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Registers the ``convert`` command and its options."""
    command = commands.add_parser(
        NAME,
        help="convert images, numpy, JSON Lines, Parquet, TFDS or Hugging Face data to ArrayRecord",
        description=(
            "Writes SRC as ArrayRecord shards <name>-<split>.array_record-0000i-of-0000n and a "
            "<name>-<split>.manifest.json into the folder DST. SRC is a folder of class "
            "subfolders of images, a .npy/.npz file, a .jsonl file, a .parquet file or folder, "
            "a folder saved by datasets' save_to_disk, or tfds:<name> (with --data-dir). The "
            "output is byte-identical for any --workers; shard s of n holds the records "
            "[s*N//n, (s+1)*N//n) in source order."
        ),
    )
    command.add_argument("src", help="the input: a file, a folder, or tfds:<name>")
    command.add_argument(
        "dst",
        help="the output folder (must not exist, or be empty), or an empty s3:// or gs:// prefix",
    )
    command.add_argument("--num-shards", type=int, default=None, help="default: one per 64 MiB")
    command.add_argument("--workers", type=int, default=1, help="processes writing shards")
    command.add_argument("--name", default=None, help="dataset name (default: SRC's name)")
    command.add_argument("--split", default="train", help="split name (default: train)")
    command.add_argument("--kind", default=None, help="input kind (default: detected)")
    command.add_argument("--data-dir", default=None, help="TFDS data_dir for tfds:<name>")
    command.add_argument("--decode", action="store_true", help="store images decoded (uint8 RGB)")
    command.add_argument(
        "--compression",
        default="auto",
        help="auto (uncompressed for encoded images, else zstd), zstd, snappy, brotli or "
        "uncompressed",
    )
    command.add_argument(
        "--overwrite", action="store_true", help="replace a DST holding a previous conversion"
    )
    command.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    command.add_argument("--quiet", action="store_true", help="no progress output")
    command.add_argument(
        "--runner",
        default=None,
        help="run as an Apache Beam pipeline on this runner (DirectRunner, DataflowRunner, ...); "
        "needs grainlite[beam]",
    )
    command.add_argument(
        "--pipeline-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Beam pipeline option, e.g. direct_num_workers=2 (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    """Converts (or with ``--dry-run`` only plans); returns the exit status."""
    from grainlite.errors import GrainliteError
    from grainlite.tools.convert import converter
    from grainlite.tools.convert.progress import Progress

    try:
        options = converter.ConvertOptions(
            name=args.name, split=args.split, num_shards=args.num_shards, workers=args.workers,
            overwrite=args.overwrite, decode=args.decode, kind=args.kind,
            data_dir=args.data_dir, compression=args.compression,
        )  # fmt: skip
        if args.runner and not args.dry_run:
            from grainlite.tools.convert import beam_pipeline

            extra = [f"--{option}" for option in args.pipeline_option]
            manifest = beam_pipeline.run(args.src, args.dst, options, args.runner, extra)
            print(f"wrote {manifest.num_records} records with Beam ({args.runner}) to {args.dst}")
            return 0
        plan = converter.plan(args.src, args.dst, options)
        if args.dry_run:
            print("dry run: nothing written")
            print("\n".join(plan.describe()))
            return 0
        progress = Progress(plan.num_shards, plan.source.num_records, enabled=not args.quiet)
        manifest = converter.run(plan, options.workers, progress.shard_done)
    except (GrainliteError, OSError) as error:
        fix = ""
        if isinstance(error, OSError) and error.errno in _NOT_WRITABLE:
            fix = "; check that the destination is a writable folder with room on its disk"
        print(f"convert: error: {error}{fix}", file=sys.stderr)
        return 2
    print(
        f"wrote {manifest.num_records} records in {len(manifest.shard_paths)} shard(s) to "
        f"{manifest.folder}"
    )
    return 0
