"""Input kind ``hf``: a Hugging Face ``datasets`` dataset saved with ``save_to_disk``.

The folder holds ``state.json`` (its Arrow files, in order), ``dataset_info.json`` (its features)
and the Arrow files (IPC stream format); a ``DatasetDict`` holds ``dataset_dict.json`` and one such
folder per split, chosen with ``split``. They are read with pyarrow alone, so the ``datasets``
package is not needed. Columns map as :mod:`arrow_rows` says; ``Image`` columns become ``image``
features (the embedded encoded bytes; RGB ``uint8`` arrays with ``decode``), ``ClassLabel``
names go into the manifest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from grainlite._optional import require
from grainlite.errors import GrainliteValueError
from grainlite.tools.convert.arrow_rows import ArrowSource, feature_of


@dataclass
class HuggingFaceDiskSource(ArrowSource):
    """The rows of a dataset saved by ``datasets``' ``save_to_disk``."""

    def open_table(self, index: int) -> Any:
        """Arrow file ``index``, memory-mapped."""
        pa = require("pyarrow", "convert", "Converting a Hugging Face dataset")
        with pa.memory_map(self.files[index]) as source:
            return pa.ipc.open_stream(source).read_all()


def is_saved_dataset(path: str) -> bool:
    """Whether ``path`` looks like a ``save_to_disk`` folder (one dataset or a DatasetDict)."""
    return any(
        os.path.isfile(os.path.join(path, name)) for name in ("state.json", "dataset_dict.json")
    )


def open_saved_dataset(path: str, split: str, decode: bool = False) -> HuggingFaceDiskSource:
    """The files, row counts and schema of the dataset (or of split ``split`` of a DatasetDict)."""
    pa = require("pyarrow", "convert", "Converting a Hugging Face dataset")
    folder = path
    splits_file = os.path.join(path, "dataset_dict.json")
    if os.path.isfile(splits_file):
        with open(splits_file) as file:
            splits = json.load(file).get("splits", [])
        if split not in splits:
            raise GrainliteValueError(
                f"The saved DatasetDict {path!r} has the splits {splits}, not {split!r}; pass "
                f"--split with one of them."
            )
        folder = os.path.join(path, split)
    with open(os.path.join(folder, "state.json")) as file:
        state = json.load(file)
    files = [os.path.join(folder, entry["filename"]) for entry in state.get("_data_files", [])]
    if not files:
        raise GrainliteValueError(f"{folder}/state.json lists no Arrow files; save it again.")
    declared = _declared_features(folder)
    schema, rows, size = None, [], 0
    for name in files:
        with pa.memory_map(name) as source:
            table = pa.ipc.open_stream(source).read_all()
        schema = schema or table.schema
        rows.append(table.num_rows)
        size += os.path.getsize(name)
    assert schema is not None
    images = [f.name for f in schema if declared.get(f.name, {}).get("_type") == "Image"]
    features = tuple(feature_of(f.name, f.type, f.name in images, files[0], decode) for f in schema)
    classes = {
        name: spec["names"]
        for name, spec in declared.items()
        if isinstance(spec, dict) and spec.get("_type") == "ClassLabel" and "names" in spec
    }
    extra = {"class_names": classes} if classes else {}
    return HuggingFaceDiskSource(
        "hf", path, features, sum(rows), size, extra, files=files, rows=rows,
        decoded_images=images if decode else [],
    )  # fmt: skip


def _declared_features(folder: str) -> dict[str, Any]:
    info = os.path.join(folder, "dataset_info.json")
    if not os.path.isfile(info):
        return {}
    with open(info) as file:
        features = json.load(file).get("features") or {}
    return features if isinstance(features, dict) else {}
