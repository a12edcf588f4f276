"""Which input kind a source is, and opening it.

Detection, in order: ``tfds:<name>`` is TFDS; a folder with ``state.json`` or
``dataset_dict.json`` is a saved Hugging Face dataset; a folder of ``*.parquet`` files is
Parquet; any other folder is an image folder; a file is chosen by its extension (``.npy``,
``.npz``, ``.jsonl``, ``.parquet``). ``kind`` overrides the detection.
"""

from __future__ import annotations

import os

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert.source import InputSource

KINDS = ("images", "numpy", "jsonl", "parquet", "tfds", "hf")
_EXTENSIONS = {".npy": "numpy", ".npz": "numpy", ".jsonl": "jsonl", ".parquet": "parquet"}


def detect(path: str) -> str:
    """The input kind of ``path`` by the rules above."""
    from grainlite.tools.convert import hf_disk, tfds_input

    if path.startswith(tfds_input.PREFIX):
        return "tfds"
    if os.path.isdir(path):
        if hf_disk.is_saved_dataset(path):
            return "hf"
        if any(name.endswith(".parquet") for name in os.listdir(path)):
            return "parquet"
        return "images"
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"convert found nothing at {path!r}: pass an existing file or folder, or "
            f"tfds:<name> with --data-dir for a TFDS dataset"
        )
    kind = _EXTENSIONS.get(os.path.splitext(path)[1].lower())
    if kind is None:
        raise GrainliteValueError(
            f"convert cannot tell the input kind of {path!r} from its extension; pass --kind with "
            f"one of {', '.join(KINDS)}, or a file ending in {', '.join(_EXTENSIONS)}."
        )
    return kind


def open_input(
    path: str, kind: str | None, split: str, data_dir: str | None, decode: bool
) -> InputSource:
    """Opens ``path`` as ``kind`` (detected when None): scans it and infers its schema."""
    kind = kind or detect(path)
    if kind not in KINDS:
        raise GrainliteValueError(
            f"convert's kind must be one of {', '.join(KINDS)} (got {kind!r}); leave it out to "
            f"detect it from the source."
        )
    if kind == "tfds":
        from grainlite.tools.convert.tfds_input import PREFIX, open_tfds

        return open_tfds(
            path if path.startswith(PREFIX) else PREFIX + path, split, data_dir, decode
        )
    if not os.path.exists(path):
        detect(path)  # Raises the error naming the path.
    if kind == "images":
        from grainlite.tools.convert.image_folder import open_image_folder

        return open_image_folder(path, decode)
    if kind == "numpy":
        from grainlite.tools.convert.numpy_arrays import open_numpy

        return open_numpy(path)
    if kind == "jsonl":
        from grainlite.tools.convert.jsonl import open_jsonl

        return open_jsonl(path)
    if kind == "parquet":
        from grainlite.tools.convert.parquet import open_parquet

        return open_parquet(path)
    from grainlite.tools.convert.hf_disk import open_saved_dataset

    return open_saved_dataset(path, split, decode)
