"""Samplers, under Grain's ``grain.samplers`` name: which record each step of the loader reads."""

from grainlite.sampling.samplers import IndexSampler, Sampler, SequentialSampler

__all__ = ["IndexSampler", "Sampler", "SequentialSampler"]
