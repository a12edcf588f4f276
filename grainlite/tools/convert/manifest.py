"""The manifest: a small JSON file beside the shards that says what they hold.

``<name>-<split>.manifest.json``, keys in a fixed order, no timestamps (so the same input gives
the same bytes)::

    format          "grainlite.convert", version: the manifest/record layout version (1)
    name, split     as in the shard names
    source          {"kind", "path", "fingerprint"}: sha256 over the source's files (for the
                    file-based kinds) and every shard's record count and checksum; it changes
                    when the source's contents do
    features        [{"name", "kind", "dtype"?, "shape"?}]: see features.py
    record_layout   "GLR1" (records.py)
    spread          "contiguous": the rule in shards.py
    writer_options  the ArrayRecord writer options every shard was written with
    num_records     the total
    shards          [{"file", "records", "bytes", "records_crc32"}] in key order; the checksum is
                    CRC-32 chained over the records' bytes, in order (shards.py)
    extra           facts of the input kind (class names, skipped files)

The manifest is written last, and the folder is renamed into place only after it, so a folder
with a manifest is a complete conversion. In a bucket (an ``s3://`` or ``gs://`` prefix) the
manifest is likewise the last object uploaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from grainlite.errors import GrainliteValueError
from grainlite.sources import locations
from grainlite.tools.convert.features import Feature

FORMAT = "grainlite.convert"
VERSION = 1
SUFFIX = ".manifest.json"


def manifest_name(name: str, split: str) -> str:
    """The manifest's file name for dataset ``name``, split ``split``."""
    return f"{name}-{split}{SUFFIX}"


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest and the folder it lives in (a local folder, or a bucket's prefix)."""

    folder: str
    data: dict[str, Any]

    @property
    def features(self) -> tuple[Feature, ...]:
        """The features of every record, in record order."""
        return tuple(Feature.from_json(entry) for entry in self.data["features"])

    @property
    def shard_paths(self) -> list[str]:
        """Every shard's path, in key order."""
        return [locations.join(self.folder, shard["file"]) for shard in self.data["shards"]]

    @property
    def num_records(self) -> int:
        """How many records the shards hold together."""
        return int(self.data["num_records"])


def dumps(data: dict[str, Any]) -> str:
    """The manifest's text: indented JSON, keys in the order given, a final newline."""
    return json.dumps(data, indent=2) + "\n"


def find(path: str | os.PathLike[str]) -> str:
    """The manifest file of ``path``: the file itself, or the one manifest in a folder (or in a
    bucket's prefix: a URL ending in the manifest suffix is taken as the manifest)."""
    text = os.fspath(path)
    remote = locations.is_remote(text)
    if remote and text.endswith(SUFFIX):
        return text
    if not remote and os.path.isfile(text):
        return text
    if not remote and not os.path.isdir(text):
        raise FileNotFoundError(
            f"No converted dataset at {text!r}: pass the folder python -m grainlite convert wrote"
        )
    found = locations.glob_children(text, "*" + SUFFIX)
    if len(found) != 1:
        raise GrainliteValueError(
            f"{text!r} holds {len(found)} manifests ({[locations.basename(f) for f in found]}); a "
            f"complete conversion holds exactly one: pass the manifest file itself, or convert "
            f"again (an interrupted conversion leaves none)."
        )
    return found[0]


def load(path: str | os.PathLike[str]) -> Manifest:
    """Reads the manifest of ``path`` (a converted folder or its manifest file)."""
    file = find(path)
    with locations.open_binary(file) as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GrainliteValueError(
            f'{file} is not a grainlite manifest (no "format": {FORMAT!r}); pass the folder '
            f"python -m grainlite convert wrote."
        )
    if data.get("version") != VERSION:
        raise GrainliteValueError(
            f"{file} has manifest version {data.get('version')!r}; this grainlite reads version "
            f"{VERSION}: convert the source again with this grainlite."
        )
    return Manifest(locations.dirname(file), data)
