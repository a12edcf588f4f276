"""Shard options, under Grain's ``grain.sharding`` name: which part of the data a process reads."""

from grainlite.sampling.sharding import NoSharding, ShardByJaxProcess, ShardOptions

__all__ = ["NoSharding", "ShardByJaxProcess", "ShardOptions"]
