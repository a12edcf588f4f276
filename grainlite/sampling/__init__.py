"""Sampling: records and their metadata, sharding, samplers and Grain's index shuffle.

Everything here is pure Python and numpy; JAX is imported only by :class:`ShardByJaxProcess`.
"""

from __future__ import annotations

from grainlite.sampling.index_sampler import IndexSampler
from grainlite.sampling.index_shuffle import index_shuffle, index_shuffle_array
from grainlite.sampling.records import Record, RecordMetadata
from grainlite.sampling.samplers import Sampler
from grainlite.sampling.sequential_sampler import SequentialSampler
from grainlite.sampling.sharding import NoSharding, ShardByJaxProcess, ShardOptions, even_split

__all__ = [
    "IndexSampler",
    "NoSharding",
    "Record",
    "RecordMetadata",
    "Sampler",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
    "even_split",
    "index_shuffle",
    "index_shuffle_array",
]
