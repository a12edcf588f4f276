"""Input kind ``tfds``: a prepared TFDS dataset, by name (``tfds:<name>``) and ``data_dir``.

It is read with ``tfds.data_source`` (the dataset must be prepared in ``array_record`` format; no
TensorFlow is needed). Top-level features map as follows: ``Image`` to ``image`` (the stored
encoded bytes; decoded ``uint8`` arrays with ``decode=True``), ``Text`` to ``str``, ``ClassLabel``,
``Scalar`` and ``Tensor`` to arrays of their dtype and shape. ClassLabel names go into the manifest.
Other feature kinds (nested dicts, sequences) get an error naming the feature.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from grainlite._optional import require
from grainlite.errors import GrainliteValueError
from grainlite.tools.convert.features import Feature, array_feature
from grainlite.tools.convert.source import InputSource

PREFIX = "tfds:"


@dataclass
class TfdsSource(InputSource):
    """The examples of one split of a prepared TFDS dataset."""

    name: str = ""
    split: str = "train"
    data_dir: str | None = None
    decode: bool = False

    def __post_init__(self) -> None:
        self._source: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_source"] = None  # Opened again by the process that reads.
        return state

    def read(self, start: int, stop: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """Examples ``[start, stop)`` of the split, typed by the features."""
        if self._source is None:
            self._source = _data_source(self.name, self.split, self.data_dir, self.decode)
        for index in range(start, stop):
            where = f"{self.path} split {self.split!r} example {index}"
            example = self._source[index]
            yield where, {f.name: _value(f, example[f.name]) for f in self.features}

    def fingerprint_files(self) -> list[str]:
        """The split's ArrayRecord files, as TFDS lists them."""
        tfds = require("tensorflow_datasets", "tfds", "Converting a TFDS dataset")
        builder = tfds.builder(self.name, data_dir=self.data_dir)
        return sorted(str(path) for path in builder.info.splits[self.split].filepaths)

    def close(self) -> None:
        """Drops the data source this process opened."""
        self._source = None


def _value(feature: Feature, value: Any) -> Any:
    if feature.kind == "str":
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    return value


def _data_source(name: str, split: str, data_dir: str | None, decode: bool) -> Any:
    tfds = require("tensorflow_datasets", "tfds", "Converting a TFDS dataset")
    builder = tfds.builder(name, data_dir=data_dir)
    decoders = {}
    if not decode:
        decoders = {
            key: tfds.decode.SkipDecoding()
            for key, feature in builder.info.features.items()
            if isinstance(feature, tfds.features.Image)
        }
    return builder.as_data_source(split, decoders=decoders or None)


def open_tfds(path: str, split: str, data_dir: str | None, decode: bool) -> TfdsSource:
    """The split ``split`` of the dataset named in ``path`` (``tfds:<name>``)."""
    tfds = require("tensorflow_datasets", "tfds", "Converting a TFDS dataset")
    name = path[len(PREFIX) :]
    builder = tfds.builder(name, data_dir=data_dir)
    if split not in builder.info.splits:
        raise GrainliteValueError(
            f"The TFDS dataset {name!r} has the splits {sorted(builder.info.splits)}, not "
            f"{split!r}; pass --split with one of them."
        )
    features, classes = [], {}
    for key, spec in builder.info.features.items():
        if isinstance(spec, tfds.features.Image):
            shape = tuple(None if s in (None, -1) else s for s in spec.shape)
            features.append(
                array_feature(key, np.uint8, shape) if decode else Feature(key, "image")
            )
        elif isinstance(spec, tfds.features.Text):
            features.append(Feature(key, "str"))
        elif isinstance(
            spec, tfds.features.ClassLabel | tfds.features.Scalar | tfds.features.Tensor
        ):
            shape = tuple(None if s in (None, -1) else s for s in spec.shape)
            features.append(array_feature(key, spec.np_dtype, shape))
            if isinstance(spec, tfds.features.ClassLabel):
                classes[key] = list(spec.names)
        else:
            raise GrainliteValueError(
                f"TFDS dataset {name!r}: feature {key!r} is a {type(spec).__name__}; convert "
                f"takes Image, Text, ClassLabel, Scalar and Tensor features: convert the others "
                f"with your own script."
            )
    count = builder.info.splits[split].num_examples
    size = int(builder.info.splits[split].num_bytes or 0)
    extra = {"class_names": classes} if classes else {}
    return TfdsSource(
        "tfds", path, tuple(features), count, size, extra,
        name=name, split=split, data_dir=data_dir, decode=decode,
    )  # fmt: skip
