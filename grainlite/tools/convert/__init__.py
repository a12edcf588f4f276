"""Converting datasets to ArrayRecord shards (``python -m grainlite convert``), and back.

One module per idea: an input kind each (image_folder, numpy_arrays, jsonl, parquet, tfds_input,
hf_disk, with arrow_rows shared by the Arrow-based ones), the record layout (records), the
features (features), the spread rule and shard writer (shards), the manifest (manifest), the
local converter (converter) and its worker processes (pool), the decoder (decoder), inspection
(verify) and the Apache Beam pipeline (beam_pipeline, the only module that imports
apache_beam). Nothing heavy is imported here.
"""

from __future__ import annotations

from grainlite.tools.convert.converter import ConvertOptions, convert
from grainlite.tools.convert.decoder import DecodeRecord, open_converted
from grainlite.tools.convert.manifest import Manifest, load

__all__ = ["ConvertOptions", "DecodeRecord", "Manifest", "convert", "load", "open_converted"]
