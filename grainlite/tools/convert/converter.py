"""The local converter: plan the shards, write them with worker processes, then publish the
folder in one rename.

Steps: open the input (scan it, infer the schema); refuse an existing non-empty destination
unless ``overwrite``; remove the partial folders a killed conversion to ``dst`` left (their
owner process is dead, see partial.py); write every shard into
``<dst>.partial-<pid>-<identity>-<random>`` (shards are independent tasks, see shards.py); write
the manifest last; rename the folder to ``dst``. A failure removes the partial folder; a process
killed mid-way leaves only the ``.partial-`` folder (its shard writers end with it, see pool.py),
which holds no manifest, is never mistaken for a conversion, and is reclaimed by the next
conversion to ``dst`` or by ``python -m grainlite cleanup``.

A destination in a bucket (``s3://``, ``gs://``: :mod:`grainlite.sources.locations`) must be an
empty prefix (``--overwrite`` does not apply: nothing in a bucket is deleted). The shards are
written into a local staging folder (under ``$TMPDIR``), each uploaded as soon as it is written
and then removed locally, and the manifest is uploaded last: a prefix with a manifest is a complete
conversion, as a folder is. A failure or a killed process leaves no manifest behind.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grainlite.checks import is_int
from grainlite.errors import GrainliteValueError
from grainlite.sources import locations
from grainlite.tools.convert import manifest as manifest_module
from grainlite.tools.convert import partial
from grainlite.tools.convert.inputs import open_input
from grainlite.tools.convert.shards import ShardTask, file_sha256, shard_bounds, shard_name
from grainlite.tools.convert.source import InputSource

# Default shard size: large enough that per-file costs vanish, small enough that a 1 GB source
# gives 16 shards for workers (and readers) to share.
TARGET_SHARD_BYTES = 64 * 2**20
# The names of a conversion's files: shards and the manifest (what --overwrite may replace).
_CONVERT_OUTPUT = re.compile(r".+\.array_record-\d{5}-of-\d{5}|.+\.manifest\.json")
COMPRESSIONS = ("auto", "zstd", "snappy", "brotli", "uncompressed")


@dataclass(frozen=True)
class ConvertOptions:
    """How to convert; see ``python -m grainlite convert --help``.

    Attributes:
      name: the dataset name in the file names (default: the source's file or folder name).
      split: the split name in the file names; also which split a TFDS / DatasetDict source gives.
      num_shards: how many shards (default: one per 64 MiB of source, at least 1, at most one
        per record). The output depends on it, never on ``workers``.
      workers: processes writing shards at once (1: in this process).
      overwrite: replace an existing destination that holds a previous conversion's files.
      decode: store images decoded (RGB uint8) instead of as their encoded bytes.
      kind: the input kind (default: detected, see inputs.py).
      data_dir: TFDS's data_dir for ``tfds:<name>`` sources.
      compression: ArrayRecord chunk compression; ``auto`` is ``uncompressed`` when records hold
        encoded images (already compressed) and ``zstd`` (level 3) otherwise.
    """

    name: str | None = None
    split: str = "train"
    num_shards: int | None = None
    workers: int = 1
    overwrite: bool = False
    decode: bool = False
    kind: str | None = None
    data_dir: str | None = None
    compression: str = "auto"

    def __post_init__(self) -> None:
        for attribute in ("num_shards", "workers"):
            value = getattr(self, attribute)
            if value is not None and (not is_int(value) or value < 1):
                raise GrainliteValueError(
                    f"convert's {attribute} must be a positive int (got {value!r}); pass "
                    f"--{attribute.replace('_', '-')} N with N >= 1."
                )
        if self.compression not in COMPRESSIONS:
            raise GrainliteValueError(
                f"convert's compression must be one of {', '.join(COMPRESSIONS)} (got "
                f"{self.compression!r})."
            )
        for attribute in ("name", "split"):
            value = getattr(self, attribute)
            if value is not None and (not value or "/" in value or value.startswith(".")):
                raise GrainliteValueError(
                    f"convert's {attribute} must be a non-empty file-name part without '/' and "
                    f"not starting with '.' (got {value!r})."
                )


@dataclass
class Plan:
    """A conversion decided but not yet written: the input, the destination and the shards."""

    source: InputSource
    dst: str
    name: str
    split: str
    num_shards: int
    writer_options: str
    overwrite: bool
    files: list[str] = field(default_factory=list)

    def tasks(self, folder: str) -> list[ShardTask]:
        """One task per shard, writing into ``folder``."""
        return [
            ShardTask(
                self.source, index, *shard_bounds(self.source.num_records, self.num_shards, index),
                os.path.join(folder, self.files[index]), self.writer_options,
            )
            for index in range(self.num_shards)
        ]  # fmt: skip

    def describe(self) -> list[str]:
        """What the conversion will write, one line each (the dry run's output)."""
        lines = [
            f"source: {self.source.path} ({self.source.kind}, {self.source.num_records} records)",
            f"destination: {self.dst}",
            "features: " + ", ".join(f"{f.name}: {f.describe()}" for f in self.source.features),
            f"writer options: {self.writer_options}",
        ]
        for index, task_file in enumerate(self.files):
            start, stop = shard_bounds(self.source.num_records, self.num_shards, index)
            lines.append(f"  {task_file}: records [{start}, {stop}) ({stop - start})")
        return lines


def plan(src: str | os.PathLike[str], dst: str | os.PathLike[str], options: ConvertOptions) -> Plan:
    """Opens the input and decides the shards; checks the destination; writes nothing."""
    text, dst_text = os.fspath(src), os.fspath(dst)
    remote = locations.is_remote(dst_text)
    dst_text = dst_text.rstrip("/") if remote else os.path.abspath(dst_text)
    source = open_input(text, options.kind, options.split, options.data_dir, options.decode)
    if remote:
        _check_remote_destination(dst_text)
    else:
        _check_destination(dst_text, options.overwrite)
    name = options.name or _default_name(text)
    count = options.num_shards or -(-source.size_bytes // TARGET_SHARD_BYTES)
    count = max(1, min(count, source.num_records)) if options.num_shards is None else count
    if count > max(source.num_records, 1):
        raise GrainliteValueError(
            f"convert's num_shards is {count} but {text!r} has {source.num_records} records; "
            f"pass --num-shards at most {max(source.num_records, 1)}, so that no shard is empty."
        )
    compression = options.compression
    if compression == "auto":
        images = any(f.kind == "image" for f in source.features)
        compression = "uncompressed" if images else "zstd:3"
    files = [shard_name(name, options.split, i, count) for i in range(count)]
    return Plan(source, dst_text, name, options.split, count, f"group_size:1,{compression}",
                options.overwrite, files)  # fmt: skip


def _check_destination(dst: str, overwrite: bool) -> None:
    """Refuses a destination that exists and is not an empty folder, unless ``overwrite``; even
    then, only a folder holding nothing but a conversion's files is replaced (never a file, or a
    folder of other things: ``--overwrite`` must not delete what convert did not write)."""
    if not os.path.lexists(dst):
        return
    names = os.listdir(dst) if os.path.isdir(dst) and not os.path.islink(dst) else None
    if names == []:
        return
    if not overwrite:
        raise GrainliteValueError(
            f"The destination {dst!r} already exists and is not an empty folder; pass "
            f"--overwrite to replace it, or choose another destination."
        )
    foreign = (
        [os.path.basename(dst)]
        if names is None
        else sorted(n for n in names if not _CONVERT_OUTPUT.fullmatch(n))
    )
    if foreign:
        raise GrainliteValueError(
            f"The destination {dst!r} holds things convert did not write ({foreign[:3]}), so "
            f"--overwrite will not replace it; remove them yourself or choose another destination."
        )


def _check_remote_destination(dst: str) -> None:
    """Refuses a bucket prefix that already holds objects (never deleted or replaced there)."""
    found = locations.glob_children(dst, "*")
    if found:
        raise GrainliteValueError(
            f"The destination {dst!r} already holds {len(found)} object(s) "
            f"({[locations.basename(f) for f in found[:3]]}); convert writes into an empty "
            f"prefix of a bucket and deletes nothing there, --overwrite included: choose another "
            f"prefix, or remove those objects with your storage tool first."
        )


def _default_name(src: str) -> str:
    base = os.path.basename(
        os.path.normpath(src.split(":", 1)[-1] if src.startswith("tfds:") else src)
    )
    return os.path.splitext(base)[0] or "data"


def start(plan: Plan) -> str:
    """Creates and returns the partial folder the shards go into (beside the destination), after
    removing the partial folders of ``plan.dst`` whose owner process is dead; for a bucket, a
    local staging folder."""
    if locations.is_remote(plan.dst):
        return tempfile.mkdtemp(prefix="grainlite-convert-")
    parent = os.path.dirname(plan.dst)
    os.makedirs(parent, exist_ok=True)
    partial.remove_stale(plan.dst)
    folder = partial.new_name(plan.dst)
    os.mkdir(folder)
    return folder


def finish(plan: Plan, folder: str, entries: Sequence[dict[str, Any]]) -> manifest_module.Manifest:
    """Writes the manifest into ``folder`` and renames it to the destination."""
    fingerprint = hashlib.sha256(f"{plan.source.kind}\0".encode())
    for path in plan.source.fingerprint_files():
        fingerprint.update(f"{os.path.basename(path)}\0{file_sha256(path)}\0".encode())
    for entry in entries:
        fingerprint.update(f"{entry['records']}\0{entry['records_crc32']}\0".encode())
    source = plan.source
    path = source.path if source.kind == "tfds" else os.path.abspath(source.path)
    data = {
        "format": manifest_module.FORMAT,
        "version": manifest_module.VERSION,
        "name": plan.name,
        "split": plan.split,
        "source": {"kind": source.kind, "path": path, "fingerprint": fingerprint.hexdigest()},
        "features": [feature.to_json() for feature in source.features],
        "record_layout": "GLR1",
        "spread": "contiguous",
        "writer_options": plan.writer_options,
        "num_records": sum(int(entry["records"]) for entry in entries),
        "shards": list(entries),
        "extra": source.extra,
    }
    manifest_file = os.path.join(folder, manifest_module.manifest_name(plan.name, plan.split))
    with open(manifest_file, "w") as file:
        file.write(manifest_module.dumps(data))
    if locations.is_remote(plan.dst):
        _upload(folder, plan.dst, [entry["file"] for entry in entries])
    else:
        _publish(folder, plan.dst)
    return manifest_module.load(plan.dst)


def _upload(folder: str, dst: str, files: Sequence[str]) -> None:
    """Uploads the shards still in the staging ``folder``, then the manifest (last: it marks the
    conversion complete), then removes the folder."""
    for name in files:
        upload_shard(folder, dst, name)
    for name in sorted(os.listdir(folder)):  # the manifest: the one file left
        locations.upload(os.path.join(folder, name), locations.join(dst, name))
    shutil.rmtree(folder, ignore_errors=True)


def _upload_then_report(
    folder: str,
    dst: str,
    report: Callable[[dict[str, Any]], None] | None,
    entry: dict[str, Any],
) -> None:
    """Uploads a shard just written, then passes its entry on to ``report``."""
    upload_shard(folder, dst, entry["file"])
    if report:
        report(entry)


def upload_shard(folder: str, dst: str, name: str) -> None:
    """Uploads the written shard ``name`` from the staging ``folder`` to the bucket prefix
    ``dst`` and removes the local file (a shard already uploaded is skipped)."""
    path = os.path.join(folder, name)
    if os.path.exists(path):
        locations.upload(path, locations.join(dst, name))
        os.remove(path)


def _publish(folder: str, dst: str) -> None:
    """Renames ``folder`` to ``dst``, replacing what is there (an empty or overwritable folder)."""
    old = None
    if os.path.lexists(dst):
        old = f"{dst}.old-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(dst, old)
    os.rename(folder, dst)
    if old is not None:
        shutil.rmtree(old) if os.path.isdir(old) else os.remove(old)


def discard(folder: str) -> None:
    """Removes a partial folder (after a failure)."""
    shutil.rmtree(folder, ignore_errors=True)


def run(
    plan: Plan, workers: int, on_shard: Callable[[dict[str, Any]], None] | None = None
) -> manifest_module.Manifest:
    """Writes every shard with ``workers`` processes, then publishes; see the module docstring."""
    from grainlite.tools.convert.shards import write_shard

    folder = start(plan)
    if locations.is_remote(plan.dst):  # each shard leaves the staging folder once written
        on_shard = functools.partial(_upload_then_report, folder, plan.dst, on_shard)
    try:
        tasks = plan.tasks(folder)
        entries: list[dict[str, Any]] = []
        if workers == 1 or len(tasks) == 1:
            for task in tasks:
                entries.append(write_shard(task))
                if on_shard:
                    on_shard(entries[-1])
        else:
            from grainlite.tools.convert.pool import write_in_processes

            # A process that used the object-store client has its runtime's threads: no fork.
            fork = not locations.is_remote(plan.dst)
            entries = write_in_processes(tasks, workers, on_shard, fork=fork)
        return finish(plan, folder, entries)
    except BaseException:
        discard(folder)
        raise


def convert(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], **options: Any
) -> manifest_module.Manifest:
    """Converts ``src`` into ArrayRecord shards and a manifest in the folder ``dst``.

    Keyword arguments are :class:`ConvertOptions` fields. Returns the written manifest.
    """
    settings = ConvertOptions(**options)
    return run(plan(src, dst, settings), settings.workers)
