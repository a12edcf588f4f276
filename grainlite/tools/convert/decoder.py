"""Reading a converted folder back: its data source and the transform that decodes its records.

``open_converted(folder)`` gives the ``ArrayRecordDataSource`` over every shard (keys in source
order) and a :class:`DecodeRecord` transform built from the manifest, so a converted folder is
one line away from a ``DataLoader``::

    source, decode = open_converted("out/")
    loader = grain.DataLoader(data_source=source, operations=[decode, grain.Batch(32)], ...)
"""

from __future__ import annotations

import os
from typing import Any

from grainlite.sources.array_record import ArrayRecordDataSource
from grainlite.tools.convert import manifest as manifest_module
from grainlite.tools.convert import records
from grainlite.tools.convert.features import Feature
from grainlite.transforms.base import MapTransform


class DecodeRecord(MapTransform):
    """Turns a converted record (bytes) back into the dict of its features.

    Arrays come back as numpy arrays (numpy scalars for shape ``()``), ``str`` as str, ``bytes``
    as bytes, and ``image`` features as the encoded bytes, or as RGB ``uint8`` arrays (decoded
    with OpenCV, the ``image`` extra) when ``decode_images`` is True.

    Args:
      features: the manifest's features (``Manifest.features``) in record order.
      decode_images: decode ``image`` features to pixels.
    """

    def __init__(self, features: tuple[Feature, ...], decode_images: bool = False) -> None:
        self.features = tuple(features)
        self.decode_images = decode_images

    def map(self, element: bytes) -> dict[str, Any]:
        """The features of one record."""
        payloads = records.split(element, len(self.features))
        out: dict[str, Any] = {}
        for feature, payload in zip(self.features, payloads):
            value = records.decode_payload(feature, payload)
            if feature.kind == "image" and self.decode_images:
                from grainlite.tools.convert.image_folder import decode_image

                value = decode_image(value, f"image feature {feature.name!r}")
            out[feature.name] = value
        return out

    def __repr__(self) -> str:
        names = ", ".join(f.name for f in self.features)
        return f"DecodeRecord([{names}], decode_images={self.decode_images})"


def open_converted(
    path: str | os.PathLike[str], decode_images: bool = False
) -> tuple[ArrayRecordDataSource, DecodeRecord]:
    """The data source over a converted folder's shards and the transform that decodes them."""
    manifest = manifest_module.load(path)
    source = ArrayRecordDataSource(manifest.shard_paths)
    return source, DecodeRecord(manifest.features, decode_images)
