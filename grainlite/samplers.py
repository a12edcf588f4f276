"""Samplers, under Grain's ``grain.samplers`` name: which record each step of the loader reads."""

from grainlite.sampling.index_sampler import IndexSampler
from grainlite.sampling.samplers import Sampler
from grainlite.sampling.sequential_sampler import SequentialSampler

__all__ = ["IndexSampler", "Sampler", "SequentialSampler"]
